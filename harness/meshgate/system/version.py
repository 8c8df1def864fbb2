"""`meshgate --version`: the driver's version and commit, and what the runner it would use says
of itself (version, commit, compiled-in backends), without building anything."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from .. import __version__
from ..core import files
from . import build, git

# The meshgate package folder (this file is meshgate/system/version.py).
PACKAGE = Path(__file__).resolve().parents[1]


def driver_line() -> str:
    root = files.checkout_root()
    here = PACKAGE.parents[1]
    if root is None or root != here:
        return f"meshgate {__version__} (installed driver: {PACKAGE})"
    head = git.describe_head(root)
    if head is None:
        return f"meshgate {__version__} (checkout {root}, commit unknown)"
    commit, dirty = head
    return f"meshgate {__version__} (commit {commit}{', dirty' if dirty else ''}; checkout {root})"


def existing_runner() -> Path | None:
    """The runner `meshgate run` would use, if it exists already: MESHGATE_RUNNER, the
    checkout's build, or the installed one."""
    env = dict(os.environ)
    if env.get("MESHGATE_RUNNER"):
        return Path(env["MESHGATE_RUNNER"])
    root = files.checkout_root()
    if root is not None:
        try:
            build_dir = root / "build" / build.preset_for(root, None, env)
            return build.find_runner(build_dir)
        except build.BuildError:
            return None
    return build.installed_runner(env)


def runner_line() -> str:
    runner = existing_runner()
    if runner is None and files.checkout_root() is not None:
        return "runner: not built yet (`meshgate run` builds it)"
    if runner is None:
        return ("runner: none found (install one with cmake --install build/<preset> --prefix P "
                "and put P/bin on PATH, or set MESHGATE_RUNNER)")
    try:
        proc = subprocess.run([str(runner), "--version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"runner: {runner} does not start: {e}"
    text = proc.stdout.strip() or proc.stderr.strip()
    if proc.returncode != 0 or not text:
        return f"runner: {runner} --version failed (exit {proc.returncode}): {text[:200]}"
    return f"runner: {text} ({runner})"


def describe() -> str:
    return driver_line() + "\n" + runner_line()
