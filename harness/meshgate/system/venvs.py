"""Virtual environments made from pins and held to a lock: the generic steps, for any caller
that keeps an isolated environment per purpose (torch_releases.py: one per PyTorch release).

An environment is made with `python -m venv` (never --system-site-packages), its pins are
installed with pip, and every other package pip resolves is held to the lock, a file of
`name==version` lines, so that two machines set up a month apart get the same set. An
environment is reused as long as `problems` finds nothing: an isolated venv of the expected
Python, each pin at its version and, when a lock exists, every installed distribution at the
lock's version and none beside it (pip and setuptools, which `venv` itself seeds, are allowed
unless the lock names them).

The same rules as ci/python_envs.py, which makes the tests' own environments before any of the
driver can be imported."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

# Installed by `python -m venv` itself (ensurepip), not by the pins: the tools that install.
# Locked only where the pins resolve to them; pip never is.
SEED_PACKAGES = frozenset({"pip", "setuptools"})
# Variables that would let an environment's interpreter see packages of another one.
FOREIGN_VARIABLES = ("PYTHONPATH", "PYTHONHOME", "PYTHONUSERBASE", "MESHGATE_HERMETIC",
                     "VIRTUAL_ENV")


class EnvError(Exception):
    """An environment cannot be made or used: the message says what to do."""


@dataclass(frozen=True)
class Lock:
    """A lock file: the packages it holds, and what its header says it was resolved from."""

    packages: dict  # canonical name -> version
    pins: tuple  # the pins the lock was resolved from ("" entries never), () when unrecorded
    python: str | None  # "3.11", when recorded


def canonical(name: str) -> str:
    """A distribution's name as pip compares them: PEP 503 normalised."""
    return re.sub(r"[-_.]+", "-", name).lower()


def parse_pin(pin: str) -> tuple[str, str]:
    """("numpy", "2.3.5") of "numpy==2.3.5"; EnvError for any other form."""
    name, sep, version = pin.partition("==")
    if not sep or not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", name.strip()) \
            or not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9.+!_-]*", version.strip()):
        raise EnvError(f"'{pin}' is not a pin of the form name==version")
    return name.strip(), version.strip()


def read_lock(path: Path) -> Lock | None:
    """The lock at `path`, None when there is none. Header lines `# pins: A==1 B==2` and
    `# python: 3.11` say what it was resolved from."""
    if not path.is_file():
        return None
    packages, pins, python = {}, (), None
    for line in path.read_text(encoding="utf-8").splitlines():
        stripped = line.strip()
        if stripped.startswith("# pins:"):
            pins = tuple(stripped[len("# pins:"):].split())
            continue
        if stripped.startswith("# python:"):
            python = stripped[len("# python:"):].strip() or None
            continue
        stripped = stripped.split("#", 1)[0].strip()
        if stripped:
            name, version = parse_pin(stripped)
            packages[canonical(name)] = version
    return Lock(packages, pins, python)


def write_lock(path: Path, packages: dict, pins: tuple, python: str, title: str) -> None:
    """Writes what an environment holds (name -> version, pip left out) as a lock whose header
    records the pins and the Python it was resolved from."""
    lines = [f"# {title}", f"# pins: {' '.join(pins)}", f"# python: {python}"]
    lines += [f"{name}=={version}" for name, version in sorted(packages.items()) if name != "pip"]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def python_of(env: Path) -> Path:
    return env / "bin" / "python"


def clean_env(base: dict | None = None) -> dict:
    """The process environment for an environment's interpreter: nothing that adds packages
    from elsewhere (PYTHONPATH, a user site, the tests' import guard)."""
    env = {k: v for k, v in (os.environ if base is None else base).items()
           if k not in FOREIGN_VARIABLES}
    env["PYTHONNOUSERSITE"] = "1"
    return env


def pyvenv_cfg(env: Path) -> dict:
    cfg = env / "pyvenv.cfg"
    if not cfg.is_file():
        return {}
    values = {}
    for line in cfg.read_text(encoding="utf-8").splitlines():
        key, sep, value = line.partition("=")
        if sep:
            values[key.strip()] = value.strip()
    return values


def sees_system_site(env: Path) -> bool:
    return pyvenv_cfg(env).get("include-system-site-packages", "false").lower() != "false"


def interpreter_version(python: str | Path) -> str | None:
    """"3.11" of an interpreter, None when it does not run."""
    try:
        done = subprocess.run([str(python), "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
                              capture_output=True, text=True, timeout=60, env=clean_env())
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def installed(python: Path) -> dict:
    """Canonical name -> version of every distribution the interpreter sees."""
    probe = ("import json; from importlib import metadata; print(json.dumps({d.metadata['Name']: "
             "d.version for d in metadata.distributions() if d.metadata['Name']}))")
    try:
        done = subprocess.run([str(python), "-c", probe], capture_output=True, text=True,
                              timeout=300, env=clean_env())
    except (OSError, subprocess.TimeoutExpired) as e:
        raise EnvError(f"{python} does not run: {e}") from None
    if done.returncode != 0:
        raise EnvError(f"{python} does not run: {done.stderr.strip()}")
    return {canonical(k): v for k, v in json.loads(done.stdout).items()}


def problems(env: Path, python_version: str, pins: tuple, lock: Lock | None) -> list[str]:
    """How the environment at `env` differs from an isolated Python `python_version` holding
    `pins` (and, with a lock, exactly the lock's set); empty when it matches."""
    python = python_of(env)
    if not python.exists():
        return [f"{env} does not exist"]
    if sees_system_site(env):
        # Such an environment is made again whatever it holds; running it would import from
        # outside the environment.
        return [f"{env} sees its interpreter's site-packages (include-system-site-packages "
                f"= {pyvenv_cfg(env).get('include-system-site-packages')})"]
    found = []
    version = interpreter_version(python)
    if version != python_version:
        found.append(f"{env} runs Python {version}, not {python_version}")
        return found
    have = installed(python)
    for pin in pins:
        name, wanted = parse_pin(pin)
        got = have.get(canonical(name))
        if got is None:
            found.append(f"{pin} is not installed")
        elif got.split("+")[0] != wanted:
            found.append(f"{name} is {got}, pinned {wanted}")
    if lock is not None:
        for name, version in sorted(have.items()):
            if name in SEED_PACKAGES and name not in lock.packages:
                continue
            if name not in lock.packages:
                found.append(f"{name} {version} is installed but is in no pin or lock")
            elif lock.packages[name] != version:
                found.append(f"{name} is {version}, locked {lock.packages[name]}")
    return found


def create(interpreter: str, env: Path) -> None:
    """A fresh isolated environment at `env` (emptied first) made by `interpreter -m venv`.
    An interpreter that is itself a venv's makes one of its base Python."""
    env.parent.mkdir(parents=True, exist_ok=True)
    command = [str(interpreter), "-m", "venv", "--clear", str(env)]
    try:
        done = subprocess.run(command, capture_output=True, text=True, env=clean_env(), timeout=600)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise EnvError(f"'{' '.join(command)}' failed: {e}") from None
    if done.returncode != 0:
        hint = ""
        if "ensurepip" in done.stderr:
            hint = "\n  (Debian's python3 needs python3-venv: apt-get install python3-venv)"
        raise EnvError(f"'{' '.join(command)}' failed: {done.stderr.strip()}{hint}")


def pip(python: Path, *args: str) -> None:
    """`python -m pip ARGS`, its output shown; EnvError when it fails. No cache: the wheels of
    PyTorch are GBs, and an environment that matches its lock is never installed again. An
    install writes no bytecode (--no-compile): compiling every module of torch takes longer
    than the unpacking, and Python compiles what it imports on first use."""
    if args and args[0] == "install":
        args = ("install", "--no-compile", *args[1:])
    command = [str(python), "-m", "pip", "--disable-pip-version-check", "--no-cache-dir", "-q",
               *args]
    try:
        code = subprocess.run(command, env=clean_env()).returncode
    except OSError as e:
        raise EnvError(f"'{' '.join(command)}' failed: {e}") from None
    if code != 0:
        raise EnvError(f"'{' '.join(command)}' failed (see above)")


def require_space(folder: Path, needed: int, what: str) -> None:
    """EnvError, before anything is written, when the file system of `folder` has less than
    `needed` bytes free: pip would otherwise stop halfway with "No space left on device" and
    leave a broken environment behind."""
    probe = folder
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    free = shutil.disk_usage(probe).free
    if free < needed:
        raise EnvError(f"{what} needs about {needed / 2**30:.0f} GiB free in {probe}, which has "
                       f"{free / 2**30:.1f} GiB: free some space (a release environment that is "
                       f"no longer needed is one folder, build/venv/torch-<release>) and run it "
                       f"again")


def ensure(env: Path, interpreter: str, pins: tuple, lock_path: Path, title: str,
           say: Callable[[str], None] = print, space: int = 0) -> str:
    """Makes the environment at `env` match `pins` and the lock at `lock_path`, reusing it when
    it already does. Without a lock, or with one resolved from other pins, pip resolves the pins
    freely and the lock is (re)written from what it installed. An install first checks that
    `space` bytes are free where the environment goes (require_space). Returns what was done:
    "reused", "created" or "refreshed"."""
    python_version = interpreter_version(interpreter)
    if python_version is None:
        raise EnvError(f"{interpreter} does not run: name a Python interpreter that does")
    lock = read_lock(lock_path)
    stale_lock = lock is not None and lock.pins and tuple(lock.pins) != tuple(pins)
    if stale_lock:
        say(f"{lock_path.name} was resolved from {' '.join(lock.pins)}, the pins are now "
            f"{' '.join(pins)}: resolving them again")
        lock = None
    python = python_of(env)
    if python.exists() and not problems(env, python_version, pins, lock):
        if lock is None:  # resolved before the lock was written, or from other pins
            write_lock(lock_path, installed(python), pins, python_version, title)
            say(f"wrote {lock_path.name}")
        return "reused"
    fresh = (not python.exists() or sees_system_site(env)
             or interpreter_version(python) != python_version)
    if space:
        require_space(env.parent, space, f"installing {' '.join(pins)} into {env}")
    if fresh:
        say(f"creating {env} from {interpreter} (Python {python_version})")
        create(interpreter, env)
    if lock is not None:
        strays = sorted(name for name, version in installed(python).items()
                        if name not in SEED_PACKAGES and lock.packages.get(name) != version)
        if strays:
            say(f"removing from {env}: {' '.join(strays)}")
            pip(python, "uninstall", "-y", *strays)
        say(f"installing {' '.join(pins)} into {env} with the lock {lock_path.name}")
        pip(python, "install", "-c", str(lock_path), *pins)
    else:
        say(f"installing {' '.join(pins)} into {env}, resolved freely (no lock yet)")
        pip(python, "install", *pins)
        write_lock(lock_path, installed(python), pins, python_version, title)
        say(f"wrote {lock_path.name}")
        lock = read_lock(lock_path)
    left = problems(env, python_version, pins, lock)
    if left:
        raise EnvError(f"{env} still differs from its pins after installing:\n  " + "\n  ".join(left))
    return "created" if fresh else "refreshed"
