"""Getting a runner to launch: MESHGATE_RUNNER when set, otherwise install missing system
packages (ci/bootstrap) and configure once, then build the meshgate-runner target (only that
target, on every CPU this process may use: `cmake --build ... -j N`) with the CMake preset
ci/preset chooses. CMake decides what is stale; its output is shown only when it compiles
something or fails. Builds run with CCACHE_BASEDIR at the checkout and CCACHE_NOHASHDIR=1, so
ccache (the compiler launcher when installed) shares its entries between this checkout and the
worktrees of other revisions under it (revisions.py). Inside a project of its own kinds
(project.py: meshgate.toml), the runner is that project's, built by the steps its file names."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import TextIO

from ..core import files
from . import progress, project
# The steps of any build (steps.py); callers name BuildError, build_jobs and failure_cause as build.*.
from .steps import BOOTSTRAP_HINT, BuildError, build_jobs, build_lock, failure_cause, run_quietly  # noqa: F401

RUNNER_TARGET = "meshgate-runner"
# `meshgate plan`'s binary: the planner alone, which starts in milliseconds where the runner
# first loads CUDA, cuBLASLt, NCCL and MPI.
PLAN_TARGET = "meshgate-plan"


def installed_runner(env: dict, target: str = RUNNER_TARGET) -> Path | None:
    """meshgate-runner (or meshgate-plan) as `cmake --install` puts it: beside the `meshgate`
    command that is running, on PATH, or in the bin/ of the Python prefix the driver was
    installed into."""
    for folder in (Path(sys.argv[0]).resolve().parent, Path(sys.prefix) / "bin"):
        candidate = folder / target
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return candidate
    found = shutil.which(target, path=env.get("PATH"))
    return Path(found) if found else None


def default_cases(root: Path) -> Path:
    """The cases CASES defaults to: a project's own (its meshgate.toml's `cases`), the `cases`
    folder of the working directory (a project inside a checkout, such as an example, runs its
    own cases from its folder), root/cases, or for an installed driver used outside a
    checkout, the cases installed beside the runner (<prefix>/share/meshgate/cases)."""
    with contextlib.suppress(project.ProjectError):  # building its runner reports it
        own_project = project.load(root)
        if own_project is not None:
            return own_project.cases
    here = Path.cwd() / "cases"
    if here.is_dir():
        return here
    own = root / "cases"
    if own.is_dir() or files.is_checkout(root):
        return own
    runner = installed_runner(dict(os.environ))
    if runner is not None:
        installed = runner.resolve().parent.parent / "share" / "meshgate" / "cases"
        if installed.is_dir():
            return installed
    return own


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


def ensure_system_packages(root: Path, out: TextIO, env: dict) -> None:
    """Runs ci/bootstrap, which installs missing Debian packages when root and otherwise
    prints the exact apt-get command; its output is shown unless everything was present. A
    build needs none of the test suites' Python environments, so they are left alone."""
    script = root / "ci" / "bootstrap"
    if not script.exists():  # a revision from before ci/bootstrap existed (meshgate ab, bisect)
        return
    try:
        proc = subprocess.run([str(script)], cwd=root, env=dict(env, MESHGATE_BOOTSTRAP_PYTHON="0"),
                              capture_output=True, text=True, errors="replace")
    except OSError as e:
        raise BuildError(f"cannot run {script}: {e}") from None
    if proc.returncode != 0 or "missing" in proc.stdout:
        out.write(proc.stdout + proc.stderr)
        out.flush()
    if proc.returncode != 0:
        raise BuildError(f"{script} could not install the packages meshgate needs "
                         f"(exit code {proc.returncode}); see its message above")


def ccache_env(env: dict, base_dir: Path) -> dict:
    """`env` plus the ccache settings that let builds of several checkouts under `base_dir`
    share cache entries: paths under CCACHE_BASEDIR are hashed relative to the build folder,
    and CCACHE_NOHASHDIR=1 leaves the working directory (which -g would add) out of the hash.
    A CCACHE_BASEDIR the caller set that already contains `base_dir` is kept."""
    env = dict(env)
    given = env.get("CCACHE_BASEDIR")
    if not (given and Path(base_dir).resolve().is_relative_to(Path(given).resolve())):
        env["CCACHE_BASEDIR"] = str(Path(base_dir).resolve())
    env.setdefault("CCACHE_NOHASHDIR", "1")
    return env


def is_configured(build_dir: Path) -> bool:
    """Whether a configure finished in `build_dir`: a cache and a generated build system (a
    configure that failed leaves CMakeCache.txt alone, and is run again)."""
    return (build_dir / "CMakeCache.txt").exists() and any(
        (build_dir / name).exists() for name in ("Makefile", "build.ninja"))


def knows_target(build_dir: Path, target: str) -> bool:
    """Whether the generated build system has `target`: a folder configured before the target
    was added (e.g. meshgate-plan) needs configuring again, which `cmake --build` with the
    Makefile generator does not do for a target it does not know."""
    for name, line in (("Makefile", f"\n{target}:"), ("build.ninja", f"\nbuild {target}:")):
        path = build_dir / name
        if path.exists():
            return line in path.read_text(errors="replace")
    return False


def build_target(root: Path, preset: str, env: dict, out: TextIO,
                 target: str = RUNNER_TARGET, configure_args: tuple[str, ...] = (),
                 checked_packages: bool = False, log: TextIO | None = None) -> Path:
    """Configures `root` with `cmake --preset PRESET [configure_args]` unless build/PRESET is
    configured already, then builds only `target` with `-j build_jobs()`. Returns the build
    folder; BuildError when a step fails. The tools' output goes to `out` when they do real
    work or fail, or all of it to `log` when given (a log file); `out` still says when the
    build waits for another command's."""
    build_dir = root / "build" / preset
    tools = log or out
    with build_lock(build_dir, out):
        if not is_configured(build_dir) or not knows_target(build_dir, target):
            if not checked_packages:
                ensure_system_packages(root, tools, env)
            tools.write(f"meshgate: configuring {build_dir} (cmake --preset {preset})\n")
            run_quietly(["cmake", "--preset", preset, *configure_args], root, tools,
                        f"if a compiler or package is missing, {BOOTSTRAP_HINT}", env,
                        everything=log is not None)
        # Its output going to a log, the terminal gets a compact progress line instead of silence.
        shown = progress.BuildProgress(root.name, out) if log is not None else None
        try:
            run_quietly(["cmake", "--build", "--preset", preset, "--target", target,
                         "-j", str(build_jobs(env))], root, tools,
                        "fix the compile error above (or run ci/bootstrap when a tool is missing)",
                        env, compile_step=True, everything=log is not None, progress=shown)
        finally:
            if shown is not None:
                shown.close()
    return build_dir


def require_cmake(root: Path, out: TextIO, env: dict) -> bool:
    """Makes sure cmake is on PATH, running ci/bootstrap when it is not; returns whether
    ci/bootstrap ran."""
    if shutil.which("cmake", path=env.get("PATH")) is not None:
        return False
    ensure_system_packages(root, out, env)
    if shutil.which("cmake", path=env.get("PATH")) is None:
        raise BuildError(f"cmake not found on PATH: {BOOTSTRAP_HINT}")
    return True


def find_runner(build_dir: Path, target: str = RUNNER_TARGET) -> Path:
    """The meshgate-runner (or another harness/runner `target`) executable inside a build
    folder."""
    for candidate in (build_dir / "harness" / "runner" / target,
                      build_dir / "bin" / target, build_dir / target):
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return candidate
    for candidate in sorted(build_dir.rglob(target)):
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return candidate
    raise BuildError(f"the build finished but no {target} executable is under {build_dir}")


def runner_command(root: Path | None = None, preset: str | None = None,
                   env: dict | None = None, out: TextIO | None = None,
                   target: str = RUNNER_TARGET, override: str = "MESHGATE_RUNNER") -> list[str]:
    """The command that starts meshgate-runner (or `target`): the executable the environment
    variable `override` names when set; in a project of its own kinds, its runner (built
    first, project.py); in a checkout, its build (built first when stale); elsewhere the
    installed one (installed_runner)."""
    env = dict(os.environ) if env is None else env
    out = out or sys.stderr
    given = env.get(override)
    if given:
        path = Path(given)
        if not (path.is_file() and os.access(path, os.X_OK)):
            raise BuildError(f"{override}={given} is not an executable file: unset it to "
                             f"build {target}, or point it at a built {target}")
        return [str(path)]
    root = root or files.source_root()
    own_project = project.load(root) if target == RUNNER_TARGET else None
    if own_project is not None:
        return [str(project.build_runner(own_project, ccache_env(env, root), out))]
    if not (root / "ci" / "preset").is_file():  # nothing to build here: an installed driver
        runner = installed_runner(env, target)
        if runner is None:
            raise BuildError(f"no {target} found: outside a meshgate checkout the driver uses an "
                             f"installed one (cmake --install build/<preset> --prefix P puts it "
                             f"in P/bin: add that to PATH), or set {override}")
        return [str(runner)]
    checked_packages = require_cmake(root, out, env)
    preset = preset_for(root, preset, env)
    build_dir = build_target(root, preset, ccache_env(env, root), out, target=target,
                             checked_packages=checked_packages)
    return [str(find_runner(build_dir, target))]
