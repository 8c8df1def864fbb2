"""Getting a runner to launch: MESHGATE_RUNNER when set, otherwise install missing system
packages (ci/bootstrap) and configure once, then build the meshgate-runner target (only that
target, on every CPU this process may use: `cmake --build ... -j N`) with the CMake preset
ci/preset chooses. CMake decides what is stale; its output is shown only when it compiles
something or fails. Builds run with CCACHE_BASEDIR at the checkout and CCACHE_NOHASHDIR=1, so
ccache (the compiler launcher when installed) shares its entries between this checkout and the
worktrees of other revisions under it (revisions.py)."""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import TextIO

RUNNER_TARGET = "meshgate-runner"
# `meshgate plan`'s binary: the planner alone, which starts in milliseconds where the runner
# first loads CUDA, cuBLASLt, NCCL and MPI.
PLAN_TARGET = "meshgate-plan"
# Lines by which the Makefile and Ninja generators announce real work (a no-op build prints
# only "Built target" lines).
WORK_MARKERS = ("Building CXX object", "Building CUDA object", "Building C object", "Linking ",
                "Generating ", "Re-running CMake", "Configuring done", "error:", "warning:")
BOOTSTRAP_HINT = "run ci/bootstrap to install cmake, the compiler and the packages meshgate needs"


class BuildError(Exception):
    """The runner could not be built; the message says what to do."""


def is_checkout(path: Path) -> bool:
    """Whether `path` is the root of a meshgate source tree."""
    return (path / "CMakePresets.json").is_file() and (path / "harness" / "meshgate").is_dir()


def checkout_root() -> Path | None:
    """The meshgate source tree this driver runs from (this file is harness/meshgate/build.py in
    a checkout), else the one the working directory is in (a driver installed with pip, used
    inside a checkout), else None."""
    here = Path(__file__).resolve().parents[2]
    if is_checkout(here):
        return here
    cwd = Path.cwd().resolve()
    return next((p for p in (cwd, *cwd.parents) if is_checkout(p)), None)


def source_root() -> Path:
    """Where cases/ and reports/ are: the project of its own kinds the working directory is in
    (project.py), else the checkout (checkout_root), or for an installed driver used outside
    any checkout, the working directory."""
    from . import project

    return project.find() or checkout_root() or Path.cwd().resolve()


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
    """The cases CASES defaults to: a project's own (its meshgate.toml's `cases`), root/cases,
    or for an installed driver used outside a checkout, the cases installed beside the runner
    (<prefix>/share/meshgate/cases)."""
    from . import project

    with contextlib.suppress(project.ProjectError):  # building its runner reports it
        own_project = project.load(root)
        if own_project is not None:
            return own_project.cases
    own = root / "cases"
    if own.is_dir() or is_checkout(root):
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


# A compiler's own diagnostic: file:line:col: error: ... (gcc, clang, nvcc's host compiler).
_COMPILE_ERROR = re.compile(r"\S+\.(?:c|cc|cpp|cxx|cu|h|hpp|cuh):\d+(?::\d+)?:\s+(?:fatal )?error:")


def failure_cause(lines: list[str]) -> str | None:
    """What made a build fail, in the failing tool's words: the first compiler error when a
    compiler failed, else the last line that says error (a linker, ar, ranlib, make)."""
    for line in lines:
        if _COMPILE_ERROR.search(line):
            return line.strip()
    for line in reversed(lines):
        if "error" in line.lower() and line.strip():
            return line.strip()
    return None


def _run_quietly(command: list[str], root: Path, out: TextIO, failure_hint: str,
                 env: dict, compile_step: bool = False, everything: bool = False,
                 markers: tuple[str, ...] = WORK_MARKERS) -> None:
    """Runs `command`, holding its output back unless it does real work (a line holds one of
    `markers`) or fails (or writing all of it, with `everything`: a log file). A failed
    `compile_step` gets `failure_hint` only when a compiler reported the error."""
    try:
        proc = subprocess.Popen(command, cwd=root, stdout=subprocess.PIPE, env=env,
                                stderr=subprocess.STDOUT, text=True, errors="replace")
    except FileNotFoundError:
        raise BuildError(f"{command[0]} not found: {BOOTSTRAP_HINT}") from None
    held: list[str] = []
    seen: list[str] = []
    streaming = False
    with proc:
        for line in proc.stdout:
            seen.append(line)
            if streaming:
                out.write(line)
                out.flush()
            elif everything or any(marker in line for marker in markers):
                streaming = True
                out.write("".join(held) + line)
                out.flush()
            else:
                held.append(line)
    if proc.returncode != 0:
        if not streaming:
            out.write("".join(held))
        cause = failure_cause(seen)
        if compile_step and (cause is None or not _COMPILE_ERROR.search(cause)):
            # No compiler said error: a hint about the code would send the user the wrong way.
            failure_hint = f"the failing step said: {cause}" if cause else \
                "see the output above"
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


def build_jobs(env: dict | None = None) -> int:
    """Parallel build jobs: CMAKE_BUILD_PARALLEL_LEVEL when set, else the CPUs this process may
    run on."""
    given = (os.environ if env is None else env).get("CMAKE_BUILD_PARALLEL_LEVEL", "").strip()
    if given.isdigit() and int(given) > 0:
        return int(given)
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return max(1, os.cpu_count() or 1)


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
            _run_quietly(["cmake", "--preset", preset, *configure_args], root, tools,
                         f"if a compiler or package is missing, {BOOTSTRAP_HINT}", env,
                         everything=log is not None)
        _run_quietly(["cmake", "--build", "--preset", preset, "--target", target,
                      "-j", str(build_jobs(env))], root, tools,
                     "fix the compile error above (or run ci/bootstrap when a tool is missing)",
                     env, compile_step=True, everything=log is not None)
    return build_dir


@contextlib.contextmanager
def build_lock(build_dir: Path, out: TextIO):
    """Holds <build_dir>.lock while configuring and building, so that two meshgate commands on
    one checkout never write the same objects at once (a truncated archive, a half-linked
    runner): the second waits, and says so."""
    build_dir.parent.mkdir(parents=True, exist_ok=True)
    lock_path = build_dir.parent / f".{build_dir.name}.lock"
    with open(lock_path, "a+") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            out.write(f"meshgate: another meshgate command is building {build_dir}; waiting for "
                      f"it to finish\n")
            out.flush()
            fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


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
    root = root or source_root()
    from . import project

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
