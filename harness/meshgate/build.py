"""Getting a runner to launch: MESHGATE_RUNNER when set, otherwise install missing system
packages (ci/bootstrap) and configure once, then build the meshgate-runner target with the CMake preset ci/preset chooses. CMake decides what is
stale; its output is shown only when it compiles something or fails."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import TextIO

RUNNER_TARGET = "meshgate-runner"
# Lines by which the Makefile and Ninja generators announce real work (a no-op build prints
# only "Built target" lines).
WORK_MARKERS = ("Building CXX object", "Building CUDA object", "Building C object", "Linking ",
                "Generating ", "Re-running CMake", "Configuring done", "error:", "warning:")
BOOTSTRAP_HINT = "run ci/bootstrap to install cmake, the compiler and the packages meshgate needs"


class BuildError(Exception):
    """The runner could not be built; the message says what to do."""


def source_root() -> Path:
    """The repository root (this file is harness/meshgate/build.py)."""
    return Path(__file__).resolve().parents[2]


def preset_for(root: Path, explicit: str | None = None, env: dict | None = None) -> str:
    """--preset when given, else what ci/preset prints (MESHGATE_PRESET, cuda or cpu)."""
    if explicit:
        return explicit
    script = root / "ci" / "preset"
    try:
        proc = subprocess.run([str(script)], capture_output=True, text=True, env=env, check=True)
    except (OSError, subprocess.CalledProcessError) as e:
        raise BuildError(f"cannot choose a CMake preset: {script} failed ({e}); "
                         f"pass --preset cpu|cuda") from None
    return proc.stdout.strip() or "cpu"


def _run_quietly(command: list[str], root: Path, out: TextIO, failure_hint: str,
                 env: dict) -> None:
    """Runs `command`, holding its output back unless it does real work or fails."""
    try:
        proc = subprocess.Popen(command, cwd=root, stdout=subprocess.PIPE, env=env,
                                stderr=subprocess.STDOUT, text=True, errors="replace")
    except FileNotFoundError:
        raise BuildError(f"{command[0]} not found: {BOOTSTRAP_HINT}") from None
    held: list[str] = []
    streaming = False
    with proc:
        for line in proc.stdout:
            if streaming:
                out.write(line)
                out.flush()
            elif any(marker in line for marker in WORK_MARKERS):
                streaming = True
                out.write("".join(held) + line)
                out.flush()
            else:
                held.append(line)
    if proc.returncode != 0:
        if not streaming:
            out.write("".join(held))
        raise BuildError(f"`{' '.join(command)}` failed with exit code {proc.returncode}; "
                         f"{failure_hint}")


def ensure_system_packages(root: Path, out: TextIO, env: dict) -> None:
    """Runs ci/bootstrap, which installs missing Debian packages when root and otherwise
    prints the exact apt-get command; its output is shown unless everything was present."""
    script = root / "ci" / "bootstrap"
    if not script.exists():  # a revision from before ci/bootstrap existed (meshgate ab, bisect)
        return
    try:
        proc = subprocess.run([str(script)], cwd=root, env=env, capture_output=True, text=True,
                              errors="replace")
    except OSError as e:
        raise BuildError(f"cannot run {script}: {e}") from None
    if proc.returncode != 0 or "missing" in proc.stdout:
        out.write(proc.stdout + proc.stderr)
        out.flush()
    if proc.returncode != 0:
        raise BuildError(f"{script} could not install the packages meshgate needs "
                         f"(exit code {proc.returncode}); see its message above")


def find_runner(build_dir: Path) -> Path:
    """The meshgate-runner executable inside a build folder."""
    for candidate in (build_dir / "harness" / "runner" / RUNNER_TARGET,
                      build_dir / "bin" / RUNNER_TARGET, build_dir / RUNNER_TARGET):
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return candidate
    for candidate in sorted(build_dir.rglob(RUNNER_TARGET)):
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return candidate
    raise BuildError(f"the build finished but no {RUNNER_TARGET} executable is under {build_dir}")


def runner_command(root: Path | None = None, preset: str | None = None,
                   env: dict | None = None, out: TextIO | None = None) -> list[str]:
    """The command that starts meshgate-runner, building it first unless MESHGATE_RUNNER
    names one."""
    env = dict(os.environ) if env is None else env
    out = out or sys.stderr
    given = env.get("MESHGATE_RUNNER")
    if given:
        path = Path(given)
        if not (path.is_file() and os.access(path, os.X_OK)):
            raise BuildError(f"MESHGATE_RUNNER={given} is not an executable file: unset it to "
                             f"build the runner, or point it at a built meshgate-runner")
        return [str(path)]
    root = root or source_root()
    checked_packages = False
    if shutil.which("cmake", path=env.get("PATH")) is None:
        ensure_system_packages(root, out, env)
        checked_packages = True
    if shutil.which("cmake", path=env.get("PATH")) is None:
        raise BuildError(f"cmake not found on PATH: {BOOTSTRAP_HINT}")
    preset = preset_for(root, preset, env)
    build_dir = root / "build" / preset
    if not (build_dir / "CMakeCache.txt").exists():
        if not checked_packages:
            ensure_system_packages(root, out, env)
        out.write(f"meshgate: configuring build/{preset} (cmake --preset {preset})\n")
        _run_quietly(["cmake", "--preset", preset], root, out,
                     f"if a compiler or package is missing, {BOOTSTRAP_HINT}", env)
    _run_quietly(["cmake", "--build", "--preset", preset, "--target", RUNNER_TARGET], root, out,
                 "fix the compile error above (or run ci/bootstrap when a tool is missing)", env)
    return [str(find_runner(build_dir))]
