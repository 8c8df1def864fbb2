"""The PyTorch releases `meshgate releases` runs the cases on, and their environments.

The releases and their pins are written in one committed file, ci/python/torch-releases.txt:
one release per line, the release first, then its pins (torch==<release> and a numpy that
release supports), `#` comments:

  2.10.0  torch==2.10.0  numpy==2.4.1

Each release gets its own isolated virtual environment, build/venv/torch-<release>/, made by
venvs.py from the pins with the interpreter of the checkout's main environment (build/venv/main,
made by ci/bootstrap) and held to the lock ci/python/constraints-torch-<release>.txt, which
the first resolution writes and later machines install with. An environment that matches its
pins and lock is reused as it is."""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from . import venvs

PINS_FILE = Path("ci") / "python" / "torch-releases.txt"
_RELEASE = re.compile(r"^\d+(\.\d+)+$")


class PinsError(Exception):
    """The pins file is missing or not of the form the module docstring gives."""


@dataclass(frozen=True)
class Release:
    version: str  # "2.10.0"
    pins: tuple  # ("torch==2.10.0", "numpy==2.4.1")

    def env(self, root: Path) -> Path:
        return root / "build" / "venv" / f"torch-{self.version}"

    def lock(self, root: Path) -> Path:
        return root / "ci" / "python" / f"constraints-torch-{self.version}.txt"


def version_key(version: str) -> tuple:
    return tuple(int(part) for part in version.split("."))


def read_pins(root: Path) -> list[Release]:
    """The releases of the pins file under `root`, oldest first."""
    path = root / PINS_FILE
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise PinsError(f"no pins: {path} does not exist (one line per release: "
                        f"'2.10.0  torch==2.10.0  numpy==2.4.1')") from None
    releases: dict[str, Release] = {}
    for number, line in enumerate(text.splitlines(), 1):
        words = line.split("#", 1)[0].split()
        if not words:
            continue
        where = f"{path}:{number}"
        version, pins = words[0], tuple(words[1:])
        if not _RELEASE.match(version):
            raise PinsError(f"{where}: '{version}' is not a release such as 2.10.0")
        if version in releases:
            raise PinsError(f"{where}: release {version} is listed twice")
        names = {}
        for pin in pins:
            try:
                name, pinned = venvs.parse_pin(pin)
            except venvs.EnvError as e:
                raise PinsError(f"{where}: {e}") from None
            if venvs.canonical(name) in names:
                raise PinsError(f"{where}: {name} is pinned twice")
            names[venvs.canonical(name)] = pinned
        if names.get("torch") != version:
            raise PinsError(f"{where}: release {version} needs the pin torch=={version}")
        releases[version] = Release(version, pins)
    if not releases:
        raise PinsError(f"no pins: {path} lists no release")
    return sorted(releases.values(), key=lambda r: version_key(r.version))


def select(releases: list[Release], wanted: list[str]) -> list[Release]:
    """The releases `--release` names (all when none), oldest first; PinsError for one the pins
    file does not list."""
    if not wanted:
        return releases
    known = {r.version: r for r in releases}
    unknown = [v for v in wanted if v not in known]
    if unknown:
        raise PinsError(f"unknown release {', '.join(unknown)}: the pins ({PINS_FILE}) list "
                        f"{', '.join(known)}; add a line there to test another")
    return sorted({known[v] for v in wanted}, key=lambda r: version_key(r.version))


# What installing one release takes on disk: its environment (4.6 to 7.0 GiB for 2.9.1 to
# 2.15.0 on Linux x86_64, the CUDA libraries most of it) and the wheels pip holds while it
# unpacks them (about 3 GiB).
INSTALL_SPACE = 10 * 2**30


def default_interpreter(root: Path) -> str:
    """The Python the environments are made from: the checkout's main environment's (the one
    the tests and the pinned torch run on), else this one. Either way `venv` makes an
    environment of the base interpreter, never one that sees another's packages."""
    main = venvs.python_of(root / "build" / "venv" / "main")
    return str(main) if main.exists() else sys.executable


def ensure(root: Path, release: Release, interpreter: str,
           say: Callable[[str], None] = print) -> str:
    """Makes or reuses the release's environment: "reused", "created" or "refreshed"."""
    title = (f"Every package torch {release.version}'s pins ({PINS_FILE}) resolve to; "
             f"meshgate releases installs build/venv/torch-{release.version} with it")
    return venvs.ensure(release.env(root), interpreter, release.pins, release.lock(root), title,
                        say, space=INSTALL_SPACE)
