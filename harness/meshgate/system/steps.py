"""The steps of a build, whichever builds: a command whose output is held back unless it does
real work or fails, the cause of a failure in the failing tool's words, the lock that keeps two
meshgate commands from building one folder at once, and the number of parallel jobs. build.py
builds meshgate's runner with them, project.py the runner of a project of its own kinds."""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import subprocess
from pathlib import Path
from typing import TextIO

# Lines by which the Makefile and Ninja generators announce real work (a no-op build prints
# only "Built target" lines).
WORK_MARKERS = ("Building CXX object", "Building CUDA object", "Building C object", "Linking ",
                "Generating ", "Re-running CMake", "Configuring done", "error:", "warning:")
BOOTSTRAP_HINT = "run ci/bootstrap to install cmake, the compiler and the packages meshgate needs"


class BuildError(Exception):
    """The runner could not be built; the message says what to do."""


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


def run_quietly(command: list[str], root: Path, out: TextIO, failure_hint: str,
                env: dict, compile_step: bool = False, everything: bool = False,
                markers: tuple[str, ...] = WORK_MARKERS, progress=None) -> None:
    """Runs `command`, holding its output back unless it does real work (a line holds one of
    `markers`) or fails (or writing all of it, with `everything`: a log file). A failed
    `compile_step` gets `failure_hint` only when a compiler reported the error. `progress`,
    when given, is fed every line (progress.BuildProgress)."""
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
            if progress is not None:
                progress.feed(line)
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
