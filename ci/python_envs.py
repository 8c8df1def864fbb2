#!/usr/bin/env python3
"""The Python environments the tests run in: one virtual environment per interpreter under
build/venv/, made from the pins of pyproject.toml and nothing else.

  main     the python3 on PATH: the build backend ([build-system] requires), the `schemas` and
           `test` extras and, unless MESHGATE_NO_TORCH=1, the `torch` extra
  oldest   the oldest Python the driver supports (requires-python), where one is installed: the
           `schemas` and `test` extras

Each environment is isolated from its interpreter's own site-packages (no
--system-site-packages), so nothing installed by hand into an interpreter can reach a test.
Every package that pip resolves besides the pins is held to the version of the interpreter's
lock, ci/python/constraints-<X.Y>.txt, so two machines set up a month apart get the same set.
Each environment also carries the import guard (ci/hermetic_guard.py, loaded by a .pth file):
with MESHGATE_HERMETIC=<log file> in the environment, an import from any other site-packages
and a start of an interpreter outside an isolated environment are refused and logged.

  python3 ci/python_envs.py ensure     # create or refresh (what ci/bootstrap runs)
  python3 ci/python_envs.py check      # exit 1 when an environment differs from its pins, lock
                                       # or guard; the guard proves that it refuses
  python3 ci/python_envs.py lock       # make the environments anew, resolving the pins freely,
                                       # and rewrite the locks (after changing a pin)
  python3 ci/python_envs.py path main  # the interpreter of one environment
  python3 ci/python_envs.py violations LOG   # exit 1 when the guard logged any (CTest)

Standard library only: it runs before any environment exists."""

from __future__ import annotations

import argparse
import glob
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import tomllib
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ENVS = ROOT / "build" / "venv"
LOCKS = ROOT / "ci" / "python"
GUARD_SOURCE = ROOT / "ci" / "hermetic_guard.py"
GUARD_MODULE = "_meshgate_hermetic"
# Installed by `python -m venv` itself (ensurepip), not by the pins: the tools that install.
# Locked only where the pins resolve to them (torch needs setuptools); pip never is.
SEED_PACKAGES = {"pip", "setuptools"}


class EnvError(Exception):
    """Something the user must fix; the message says what."""


@dataclass(frozen=True)
class EnvSpec:
    role: str
    interpreter: str
    version: str  # "3.11"
    pins: tuple[str, ...]

    @property
    def path(self) -> Path:
        return ENVS / self.role

    @property
    def python(self) -> Path:
        return self.path / "bin" / "python"

    @property
    def lock(self) -> Path:
        return LOCKS / f"constraints-{self.version}.txt"


def shown(path: Path) -> str:
    """A path as messages show it: relative to the checkout when inside it."""
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


def pyproject() -> dict:
    with open(ROOT / "pyproject.toml", "rb") as f:
        return tomllib.load(f)


def oldest_version() -> str:
    """"3.9" from requires-python = ">=3.9"."""
    spec = pyproject()["project"]["requires-python"]
    match = re.fullmatch(r">=\s*(3\.\d+)", spec.strip())
    if not match:
        raise EnvError(f"pyproject.toml: requires-python '{spec}' is not of the form '>=3.N'")
    return match.group(1)


def pins_of(extras: list[str], build_backend: bool) -> tuple[str, ...]:
    project = pyproject()
    pins = list(project["build-system"]["requires"]) if build_backend else []
    for extra in extras:
        pins.extend(project["project"]["optional-dependencies"][extra])
    return tuple(pins)


def interpreter_version(python: str) -> str | None:
    try:
        done = subprocess.run([python, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
                              capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def real_interpreter(python: str) -> str:
    """The interpreter itself, not a pyenv shim or a venv's link: sys._base_executable."""
    done = subprocess.run([python, "-c", "import sys; print(getattr(sys, '_base_executable', "
                           "sys.executable))"], capture_output=True, text=True, timeout=60)
    if done.returncode != 0:
        raise EnvError(f"{python} does not run: {done.stderr.strip()}")
    return done.stdout.strip()


def find_oldest(version: str) -> str | None:
    """An installed interpreter of `version`. A pyenv shim answers only when its version is
    selected, so pyenv's installs are looked up directly."""
    candidates = []
    for root in (os.environ.get("PYENV_ROOT"), os.path.expanduser("~/.pyenv")):
        if root:
            candidates += sorted(glob.glob(f"{root}/versions/{version}*/bin/python{version}"))
    candidates += [f"/usr/bin/python{version}", f"/usr/local/bin/python{version}"]
    for candidate in candidates:
        if os.access(candidate, os.X_OK) and interpreter_version(candidate) == version:
            return candidate
    return None


def specs() -> list[EnvSpec]:
    """The environments this machine gets."""
    python3 = shutil.which("python3")
    if python3 is None:
        raise EnvError("no python3 on PATH (ci/bootstrap installs Debian's)")
    main = real_interpreter(python3)
    main_version = interpreter_version(main)
    extras = ["schemas", "test"] + ([] if os.environ.get("MESHGATE_NO_TORCH") == "1" else ["torch"])
    result = [EnvSpec("main", main, main_version, pins_of(extras, build_backend=True))]
    oldest = oldest_version()
    if oldest != main_version:
        found = find_oldest(oldest)
        if found:
            result.append(EnvSpec("oldest", found, oldest, pins_of(["schemas", "test"], build_backend=False)))
        else:
            print(f"python-envs: no Python {oldest} installed: the driver's tests run on "
                  f"{main_version} only", file=sys.stderr)
    return result


def read_lock(path: Path) -> dict[str, str]:
    if not path.is_file():
        return {}
    lock = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, _, version = line.partition("==")
            lock[canonical(name)] = version.strip()
    return lock


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def installed(python: Path) -> dict[str, str]:
    """name -> version of every distribution the environment's interpreter sees."""
    probe = ("import json; from importlib import metadata; print(json.dumps({d.metadata['Name']: "
             "d.version for d in metadata.distributions()}))")
    done = subprocess.run([str(python), "-c", probe], capture_output=True, text=True, timeout=120,
                          env=clean_env())
    if done.returncode != 0:
        raise EnvError(f"{python} does not run: {done.stderr.strip()}")
    return {canonical(k): v for k, v in json.loads(done.stdout).items()}


def clean_env() -> dict:
    """The environment for running an environment's interpreter: no PYTHONPATH or user site
    that could add packages, and no guard (which would refuse this tool's own probes)."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "PYTHONHOME", "PYTHONUSERBASE", "MESHGATE_HERMETIC",
                        "VIRTUAL_ENV")}
    env["PYTHONNOUSERSITE"] = "1"
    return env


def site_packages(python: Path) -> Path:
    done = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                          capture_output=True, text=True, timeout=60, env=clean_env())
    if done.returncode != 0:
        raise EnvError(f"{python} does not run: {done.stderr.strip()}")
    return Path(done.stdout.strip())


def pyvenv_cfg(path: Path) -> dict[str, str]:
    cfg = path / "pyvenv.cfg"
    if not cfg.is_file():
        return {}
    values = {}
    for line in cfg.read_text(encoding="utf-8").splitlines():
        key, sep, value = line.partition("=")
        if sep:
            values[key.strip()] = value.strip()
    return values


def problems(spec: EnvSpec) -> list[str]:
    """How the environment differs from what its spec makes; empty when it matches."""
    if not spec.python.exists():
        return [f"{spec.path} does not exist"]
    cfg = pyvenv_cfg(spec.path)
    if cfg.get("include-system-site-packages", "false").lower() != "false":
        # Made again whatever it holds; running it would import from outside the environment.
        return [f"{spec.path} sees its interpreter's site-packages "
                f"(include-system-site-packages = {cfg['include-system-site-packages']})"]
    found = []
    if interpreter_version(str(spec.python)) != spec.version:
        found.append(f"{spec.path} runs Python {interpreter_version(str(spec.python))}, not "
                     f"{spec.version}")
        return found
    have = installed(spec.python)
    lock = read_lock(spec.lock)
    for pin in spec.pins:
        name, _, version = pin.partition("==")
        got = have.get(canonical(name))
        if got is None:
            found.append(f"{pin} is not installed")
        elif got.split("+")[0] != version:
            found.append(f"{name} is {got}, pinned {version}")
    for name, version in sorted(have.items()):
        if name in SEED_PACKAGES and name not in lock:
            continue
        if name not in lock:
            found.append(f"{name} {version} is installed but is in no pin or lock "
                         f"({shown(spec.lock)})")
        elif lock[name] != version:
            found.append(f"{name} is {version}, locked {lock[name]}")
    guard = site_packages(spec.python) / f"{GUARD_MODULE}.py"
    if not guard.is_file() or guard.read_bytes() != GUARD_SOURCE.read_bytes():
        found.append(f"the import guard in {guard.parent} is missing or stale")
    return found


def pip(python: Path, *args: str) -> None:
    # No bytecode at install time: compiling every module of torch takes longer than unpacking
    # it, and Python compiles what it imports on first use.
    if args and args[0] == "install":
        args = ("install", "--no-compile", *args[1:])
    command = [str(python), "-m", "pip", "--disable-pip-version-check", "-q", *args]
    if subprocess.run(command, env=clean_env()).returncode != 0:
        raise EnvError(f"'{' '.join(command)}' failed (see above)")


def install_guard(python: Path) -> None:
    site = site_packages(python)
    shutil.copyfile(GUARD_SOURCE, site / f"{GUARD_MODULE}.py")
    # A .pth line that starts with "import" runs at every start of the interpreter.
    (site / f"{GUARD_MODULE}.pth").write_text(f"import {GUARD_MODULE}\n", encoding="utf-8")


def create(spec: EnvSpec) -> None:
    print(f"python-envs: creating {shown(spec.path)} from {spec.interpreter}", flush=True)
    command = [spec.interpreter, "-m", "venv", "--clear", str(spec.path)]
    done = subprocess.run(command, capture_output=True, text=True, env=clean_env())
    if done.returncode != 0:
        hint = ""
        if "ensurepip" in done.stderr:
            hint = "\n  (Debian's python3 needs python3-venv: apt-get install python3-venv)"
        raise EnvError(f"'{' '.join(command)}' failed: {done.stderr.strip()}{hint}")


def ensure(spec: EnvSpec) -> None:
    """Creates the environment or brings it back to its pins, lock and guard."""
    cfg = pyvenv_cfg(spec.path)
    fresh = (not spec.python.exists()
             or cfg.get("include-system-site-packages", "false").lower() != "false"
             or interpreter_version(str(spec.python)) != spec.version)
    if fresh:
        create(spec)
    if not problems(spec):
        print(f"python-envs: {shown(spec.path)} matches its pins ({' '.join(spec.pins)})")
        return
    if not spec.lock.is_file():
        raise EnvError(f"no lock for Python {spec.version}: {shown(spec.lock)} "
                       f"(python3 ci/python_envs.py lock writes it)")
    lock = read_lock(spec.lock)
    have = installed(spec.python)
    strays = sorted(name for name, version in have.items()
                    if name not in SEED_PACKAGES and lock.get(name) != version)
    if strays:
        print(f"python-envs: removing from {shown(spec.path)}: {' '.join(strays)}")
        pip(spec.python, "uninstall", "-y", *strays)
    if [p for p in problems(spec) if "import guard" not in p]:
        note = (" (PyTorch is a download of several GB)"
                if any(p.startswith("torch==") for p in spec.pins) else "")
        print(f"python-envs: installing {' '.join(spec.pins)} into {shown(spec.path)}{note}",
              flush=True)
        pip(spec.python, "install", "-c", str(spec.lock), *spec.pins)
    install_guard(spec.python)
    left = problems(spec)
    if left:
        raise EnvError(f"{shown(spec.path)} still differs after installing:\n  " +
                       "\n  ".join(left))


def lock(spec: EnvSpec) -> None:
    """Makes the environment anew with every pin of every extra resolved freely (so one lock
    serves with and without torch), and writes what pip installed as this Python's lock."""
    extras = list(pyproject()["project"]["optional-dependencies"])
    pins = pins_of(extras, build_backend=True) if spec.role == "main" else spec.pins
    create(spec)
    print(f"python-envs: resolving {' '.join(pins)}", flush=True)
    pip(spec.python, "install", *pins)
    install_guard(spec.python)
    have = installed(spec.python)
    lines = [f"# Every package the pins of pyproject.toml resolve to on Python {spec.version}",
             "# (python3 ci/python_envs.py lock); ci/bootstrap installs with it as constraints."]
    lines += [f"{name}=={version}" for name, version in sorted(have.items()) if name != "pip"]
    spec.lock.parent.mkdir(parents=True, exist_ok=True)
    spec.lock.write_text("\n".join(lines) + "\n", encoding="utf-8")
    print(f"python-envs: wrote {shown(spec.lock)} ({len(lines) - 2} packages)")


def guard_refuses(spec: EnvSpec) -> list[str]:
    """Proof that the guard works in this environment: a package planted in a foreign
    site-packages and a global interpreter must both be refused, and logged."""
    found = []
    with tempfile.TemporaryDirectory(prefix="meshgate-guard-") as tmp:
        foreign = Path(tmp) / "lib" / "site-packages"
        (foreign / "planted_package").mkdir(parents=True)
        (foreign / "planted_package" / "__init__.py").write_text("", encoding="utf-8")
        log = Path(tmp) / "violations.log"
        env = dict(clean_env(), MESHGATE_HERMETIC=str(log), PYTHONPATH=str(foreign))
        probe = "import planted_package"
        done = subprocess.run([str(spec.python), "-c", probe], capture_output=True, text=True,
                              env=env, timeout=60)
        if done.returncode == 0 or "outside the project's environments" not in done.stderr:
            found.append(f"the guard of {shown(spec.path)} let an import from "
                         f"{foreign} through")
        outside = spec.interpreter
        probe = f"import subprocess; subprocess.run([{outside!r}, '-c', 'pass'])"
        done = subprocess.run([str(spec.python), "-c", probe], capture_output=True, text=True,
                              env=env, timeout=60)
        if done.returncode == 0 or "outside the project's environments" not in done.stderr:
            found.append(f"the guard of {shown(spec.path)} let {outside} start")
        logged = log.read_text(encoding="utf-8").splitlines() if log.is_file() else []
        if len(logged) != 2:
            found.append(f"the guard logged {len(logged)} violations, not 2: {logged}")
    return found


def violations(log: Path) -> int:
    lines = log.read_text(encoding="utf-8").splitlines() if log.is_file() else []
    for line in lines:
        print(f"python-envs: {line}", file=sys.stderr)
    if lines:
        print(f"python-envs: {len(lines)} import(s) or interpreter(s) from outside the project's "
              f"environments during the tests (log: {log})", file=sys.stderr)
        return 1
    print("python-envs: every Python test stayed inside the project's environments")
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="ci/python_envs.py", description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog=__doc__.split("\n\n", 1)[1])
    parser.add_argument("action", choices=("ensure", "check", "lock", "path", "violations"))
    parser.add_argument("what", nargs="?", metavar="ROLE|LOG",
                        help="for path: main or oldest; for violations: the guard's log")
    parser.add_argument("--reset-log", type=Path, metavar="LOG",
                        help="for check: empty the guard's log first (a new test run)")
    args = parser.parse_args(argv)
    if args.action == "violations":
        return violations(Path(args.what or ""))
    if args.reset_log:
        args.reset_log.parent.mkdir(parents=True, exist_ok=True)
        args.reset_log.write_text("", encoding="utf-8")
    args.role = args.what
    try:
        envs = specs()
        if args.action == "path":
            chosen = [e for e in envs if e.role == (args.role or "main")]
            if not chosen or not chosen[0].python.exists():
                print(f"python-envs: no environment '{args.role or 'main'}' (ci/bootstrap makes it)",
                      file=sys.stderr)
                return 1
            print(chosen[0].python)
            return 0
        if args.action == "lock":
            for spec in envs:
                lock(spec)
            return 0
        if args.action == "ensure":
            for spec in envs:
                ensure(spec)
            return 0
        failed = False
        for spec in envs:
            found = problems(spec)
            if not found:
                found = guard_refuses(spec)
            for problem in found:
                print(f"python-envs: {spec.role}: {problem}", file=sys.stderr)
            if found:
                failed = True
            else:
                print(f"python-envs: {spec.role} ({shown(spec.path)}, Python "
                      f"{spec.version}): {len(spec.pins)} pins and the lock match; the guard refuses")
        if failed:
            print("python-envs: ci/bootstrap brings the environments back to their pins",
                  file=sys.stderr)
        return 1 if failed else 0
    except EnvError as e:
        print(f"python-envs: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
