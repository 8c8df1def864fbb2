"""How `--impl` names an implementation under test and how the runner starts it: meshgate's own
library, or another implementation speaking the meshgate.impl/1 protocol
(docs/impl-protocol.md) to meshgate-runner, whose adapters live in the package meshgate.impls:

  meshgate            the runner's own library (the default)
  torch               PyTorch in this Python, or else in the checkout's own environment
                      (build/venv/main, which ci/bootstrap makes from the pins): the adapter in
                      meshgate/impls/torch
  torch@PYTHON        the same adapter run by another interpreter or virtual environment (a
                      python executable or a venv folder), e.g. to compare two PyTorch versions
  torch-local[@PYTHON]  the same adapter with every rank of a case in one process under
                      PyTorch's LocalTensorMode instead of a gloo worker per rank
  NAME=COMMAND        any program that speaks the protocol, started by COMMAND (shell words)
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from ..core import files

DEFAULT = "meshgate"
# The torch adapter's two worlds, by the name each goes by under --impl.
TORCH_WORLDS = {"torch": "gloo", "torch-local": "local"}
_NAME = re.compile(r"^[A-Za-z0-9_.-]+$")
# The folder that holds the `meshgate` package (this file is meshgate/system/implementations.py):
# an adapter run by another interpreter imports the package from here.
PACKAGE_PARENT = Path(__file__).resolve().parent.parent.parent
# The environment ci/bootstrap makes in a checkout (ci/python_envs.py), with the pinned torch.
CHECKOUT_PYTHON = PACKAGE_PARENT.parent / "build" / "venv" / "main" / "bin" / "python"


class ImplError(Exception):
    """--impl names nothing that can run: the message says what to do."""


@dataclass(frozen=True)
class Impl:
    name: str
    command: tuple[str, ...]
    python: str | None = None  # the interpreter of a Python adapter

    def runner_args(self) -> list[str]:
        return ["--impl", self.name, "--impl-command", json.dumps(list(self.command))]

    def env(self, base: dict | None = None) -> dict:
        """The runner's environment: a Python adapter finds the meshgate package first."""
        env = dict(os.environ if base is None else base)
        if self.python is not None:
            paths = [str(PACKAGE_PARENT)] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep)
                                             if p]
            env["PYTHONPATH"] = os.pathsep.join(paths)
        return env


def pinned_torch() -> str:
    """The one pin of PyTorch: pyproject.toml's optional dependency `torch`."""
    return files.pinned("torch", "torch==2.15.0")


def _interpreter(where: str) -> str:
    path = Path(where).expanduser()
    if path.is_dir():
        path = path / "bin" / "python"
    if not path.exists():
        raise ImplError(f"--impl torch@{where}: no such Python interpreter or virtual environment")
    return str(path)


def has_torch(python: str) -> bool:
    probe = "import importlib.util, sys; sys.exit(importlib.util.find_spec('torch') is None)"
    try:
        return subprocess.run([python, "-c", probe], capture_output=True, timeout=60).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def _default_torch_python(check: bool) -> str:
    """This interpreter when it has torch; else the checkout's environment when that has it."""
    if not check or has_torch(sys.executable):
        return sys.executable
    if CHECKOUT_PYTHON.exists() and has_torch(str(CHECKOUT_PYTHON)):
        return str(CHECKOUT_PYTHON)
    return sys.executable


def resolve(spec: str | None, check: bool = True) -> Impl | None:
    """The implementation `--impl spec` names; None for meshgate's own library."""
    if spec is None or spec == DEFAULT:
        return None
    if "=" in spec:
        name, command = spec.split("=", 1)
        if not _NAME.match(name):
            raise ImplError(f"--impl {spec}: the name before '=' may hold letters, digits, '_', "
                            f"'.' and '-'")
        words = shlex.split(command)
        if not words:
            raise ImplError(f"--impl {spec}: give the command that starts {name} after '='")
        return Impl(name, tuple(words))
    name, _, where = spec.partition("@")
    if name not in TORCH_WORLDS:
        raise ImplError(f"--impl {spec}: unknown implementation; known: meshgate, torch, "
                        f"torch-local, either @PYTHON, or NAME=COMMAND for a program that "
                        f"speaks meshgate.impl/1 (docs/impl-protocol.md)")
    python = _interpreter(where) if where else _default_torch_python(check)
    if check and not has_torch(python):
        raise ImplError(f"--impl {spec} needs PyTorch in {python}; install the pinned version "
                        f"with:\n  {python} -m pip install '{pinned_torch()}'\n(or run "
                        f"ci/bootstrap torch)")
    return Impl(name, (python, "-m", "meshgate.impls.torch", "--world", TORCH_WORLDS[name]),
                python=python)
