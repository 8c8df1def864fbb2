"""A project of its own kinds: a repository, or a folder of one, with `meshgate.toml`, which says
how to build its runner (meshgate's runner with the project's case kinds linked in,
docs/own-kernels.md) and where its cases are:

    [runner]
    build = [["cmake", "-S", ".", "-B", "build/runner"], ["cmake", "--build", "build/runner"]]
    path = "build/runner/my-runner"
    cases = "cases"                 # optional; the default

- `build`: the commands that build the runner, run in order in the project's root: a list of
  commands, each a list of strings (the program, then its arguments, passed as they are: no
  shell runs; write ["sh", "-c", "..."] for one), or one such command alone.
- `path`: the runner they leave, relative to the project's root.
- `cases`: the folder `meshgate run`, `ab`, `bisect` and `nightly` take the cases from when no
  CASES are given.

Inside such a project (the working directory or a folder above it has the file: find, which is
core/files.find_project, so that the driver's reports/ are the project's too), `meshgate run`
builds the runner first and runs it; `ab`, `bisect` and `nightly` build it in the worktree of
every revision they test (revisions.py). The build commands get the environment of the driver
plus: the prefix meshgate is installed in, first on CMAKE_PREFIX_PATH (so that
find_package(meshgate) finds the meshgate whose driver runs), CMAKE_BUILD_PARALLEL_LEVEL (every
CPU) and ccache as the compiler launcher when it is installed, each unless already set.

The file is TOML; Python 3.11 reads it with tomllib, older Pythons with the small reader below,
which knows what this file needs: tables, comments, strings, integers, booleans and arrays."""

from __future__ import annotations

import os
import pathlib
import shutil
from typing import Any, NamedTuple, Optional, TextIO

from ..core.files import PROJECT_FILE, find_project as find  # noqa: F401 (project.find)
from . import steps

# Lines by which a build step shows that it compiles or links. Not CMake's "Configuring done":
# a project's first step usually configures, every time.
COMPILE_MARKERS = ("Building CXX object", "Building CUDA object", "Building C object", "Linking ",
                   "error:", "warning:")
DEFAULT_CASES = "cases"
RUNNER_KEYS = ("build", "path", "cases")


class ProjectError(steps.BuildError):
    """A project file that cannot be used; the message names the file and the key."""


class Project(NamedTuple):
    root: pathlib.Path                # the folder of meshgate.toml
    build_steps: list[list[str]]      # commands, run in `root`
    runner: pathlib.Path              # absolute
    cases: pathlib.Path               # absolute

    @property
    def file(self) -> pathlib.Path:
        return self.root / PROJECT_FILE


def load(root: pathlib.Path) -> Optional[Project]:
    """The project whose meshgate.toml is in `root` (no search upwards: a revision's worktree
    lies inside the repository it was made from), else None. ProjectError when the file is
    not a usable project file."""
    root = pathlib.Path(root).resolve()
    path = root / PROJECT_FILE
    if not path.is_file():
        return None
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise ProjectError(f"{path}: cannot be read: {e}") from None
    try:
        document = parse_toml(text)
    except ValueError as e:
        raise ProjectError(f"{path}: {e}") from None
    return _project_from(document, root, path)


def _project_from(document: dict, root: pathlib.Path, path: pathlib.Path) -> Project:
    unknown = sorted(set(document) - {"runner"})
    if unknown:
        raise ProjectError(f"{path}: unknown table or key {unknown[0]!r}: the file has a [runner] "
                           f"table only")
    table = document.get("runner")
    if not isinstance(table, dict):
        raise ProjectError(f"{path}: no [runner] table: it names the runner's build and path")
    unknown = sorted(set(table) - set(RUNNER_KEYS))
    if unknown:
        raise ProjectError(f"{path}: [runner] has an unknown key {unknown[0]!r} (known: "
                           f"{', '.join(RUNNER_KEYS)})")
    commands = _build_steps(table.get("build"), path)
    runner = table.get("path")
    if not isinstance(runner, str) or not runner:
        raise ProjectError(f"{path}: [runner] path is required: the runner the build leaves, "
                           f"relative to {root}")
    cases = table.get("cases", DEFAULT_CASES)
    if not isinstance(cases, str) or not cases:
        raise ProjectError(f"{path}: [runner] cases must be a folder (a string)")
    return Project(root, commands, (root / runner).resolve(), (root / cases).resolve())


def _build_steps(value: Any, path: pathlib.Path) -> list[list[str]]:
    """`build` as a list of commands: one command (a list of strings) or a list of them."""
    usage = ('a command as a list of strings, or a list of such commands, e.g. '
             '[["cmake", "-S", ".", "-B", "build"], ["cmake", "--build", "build"]]')
    if not isinstance(value, list) or not value:
        raise ProjectError(f"{path}: [runner] build is required: {usage}")
    commands = [value] if all(isinstance(item, str) for item in value) else value
    for step in commands:
        if not (isinstance(step, list) and step and all(isinstance(a, str) for a in step)):
            raise ProjectError(f"{path}: [runner] build: {step!r} is not a command: {usage}")
    return [list(step) for step in commands]


def installed_prefix() -> Optional[pathlib.Path]:
    """The prefix of the `cmake --install` this driver belongs to (it is then
    <prefix>/<libdir>/meshgate/python/meshgate/), else None (a checkout, a pip install)."""
    package = pathlib.Path(__file__).resolve().parents[1]  # this file is meshgate/system/project.py
    libdir = package.parents[2]
    if (libdir / "cmake" / "meshgate" / "meshgateConfig.cmake").is_file():
        return libdir.parent
    return None


def build_env(env: dict) -> dict:
    """The environment of the project's build commands (the module doc says what is added)."""
    env = dict(env)
    prefix = installed_prefix()
    if prefix is not None:
        paths = [p for p in env.get("CMAKE_PREFIX_PATH", "").split(os.pathsep) if p]
        env["CMAKE_PREFIX_PATH"] = os.pathsep.join([str(prefix)] + paths)
    env.setdefault("CMAKE_BUILD_PARALLEL_LEVEL", str(steps.build_jobs(env)))
    ccache = shutil.which("ccache", path=env.get("PATH"))
    if ccache:
        for lang in ("CXX", "C", "CUDA"):
            env.setdefault(f"CMAKE_{lang}_COMPILER_LAUNCHER", ccache)
    return env


def build_runner(project: Project, env: dict, out: TextIO, log: Optional[TextIO] = None) -> pathlib.Path:
    """Runs the project's build commands in its root and returns its runner. Their output goes
    to `out` when they do real work or fail, or all of it to `log` when given. BuildError
    (a ProjectError when the build leaves no runner) when a step fails."""
    env = build_env(env)
    tools = log or out
    with steps.build_lock(project.runner.parent, out):
        for step in project.build_steps:
            if log is not None:
                log.write(f"meshgate: {' '.join(step)}\n")
                log.flush()
            steps.run_quietly(step, project.root, tools,
                              f"fix the build of {project.root} (the steps of {project.file})",
                              env, compile_step=True, everything=log is not None,
                              markers=COMPILE_MARKERS)
    if not (project.runner.is_file() and os.access(project.runner, os.X_OK)):
        raise ProjectError(f"the build of {project.root} finished but left no executable "
                           f"{project.runner}: check [runner] path in {project.file}")
    return project.runner


def given_runner(path: str) -> list[str]:
    """The command of a prebuilt runner named on the command line (`meshgate run --runner`)."""
    runner = pathlib.Path(path)
    if not (runner.is_file() and os.access(runner, os.X_OK)):
        raise steps.BuildError(f"--runner {path} is not an executable file")
    return [str(runner.resolve())]


# ---- TOML ---------------------------------------------------------------------------------


def parse_toml(text: str) -> dict:
    """The TOML document `text` as a dict: tomllib where Python has it (3.11), else the subset
    reader. ValueError naming the line when it is not TOML."""
    try:
        import tomllib
    except ImportError:
        return parse_toml_subset(text)
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise ValueError(str(e)) from None


_ESCAPES = {"b": "\b", "t": "\t", "n": "\n", "f": "\f", "r": "\r", '"': '"', "\\": "\\"}


class _Reader:
    """The TOML a project file needs: [table] headers, `key = value` with bare or quoted keys,
    basic and literal strings, integers, booleans and arrays (nested, over several lines, with
    comments and a trailing comma). Anything else is a ValueError naming the line."""

    def __init__(self, text: str):
        self.text = text
        self.pos = 0

    def line(self) -> int:
        return self.text.count("\n", 0, self.pos) + 1

    def error(self, message: str) -> ValueError:
        return ValueError(f"line {self.line()}: {message}")

    def peek(self) -> str:
        return self.text[self.pos:self.pos + 1]

    def skip_blank(self, newlines: bool) -> None:
        """Spaces and tabs, comments, and with `newlines` line ends too."""
        while self.pos < len(self.text):
            c = self.text[self.pos]
            if c in " \t" or (newlines and c in "\r\n"):
                self.pos += 1
            elif c == "#":
                end = self.text.find("\n", self.pos)
                self.pos = len(self.text) if end < 0 else end
            else:
                return

    def end_of_line(self) -> None:
        self.skip_blank(newlines=False)
        if self.pos < len(self.text) and self.text[self.pos] not in "\r\n":
            raise self.error(f"unexpected {self.text[self.pos]!r} after the value")

    def key(self) -> str:
        c = self.peek()
        if c in ('"', "'"):
            return self.string()
        start = self.pos
        while self.pos < len(self.text) and (self.text[self.pos].isalnum() or self.text[self.pos] in "_-"):
            self.pos += 1
        if start == self.pos:
            raise self.error(f"expected a key, found {c!r}" if c else "expected a key")
        return self.text[start:self.pos]

    def string(self) -> str:
        quote = self.text[self.pos]
        if self.text.startswith(quote * 3, self.pos):
            raise self.error("multi-line strings are not supported here: use one line")
        self.pos += 1
        out = []
        while True:
            if self.pos >= len(self.text) or self.text[self.pos] in "\r\n":
                raise self.error("unterminated string")
            c = self.text[self.pos]
            self.pos += 1
            if c == quote:
                return "".join(out)
            if c == "\\" and quote == '"':
                e = self.text[self.pos:self.pos + 1]
                if e in _ESCAPES:
                    out.append(_ESCAPES[e])
                    self.pos += 1
                elif e in ("u", "U"):
                    width = 4 if e == "u" else 8
                    digits = self.text[self.pos + 1:self.pos + 1 + width]
                    if len(digits) != width or any(d not in "0123456789abcdefABCDEF" for d in digits):
                        raise self.error(f"bad \\{e} escape")
                    out.append(chr(int(digits, 16)))
                    self.pos += 1 + width
                else:
                    raise self.error(f"unknown escape \\{e}")
            else:
                out.append(c)

    def value(self) -> Any:
        c = self.peek()
        if c in ('"', "'"):
            return self.string()
        if c == "[":
            return self.array()
        start = self.pos
        while self.pos < len(self.text) and self.text[self.pos] not in " \t\r\n,]#":
            self.pos += 1
        word = self.text[start:self.pos]
        if word in ("true", "false"):
            return word == "true"
        digits = word.replace("_", "")
        if digits.lstrip("+-").isdigit():
            return int(digits)
        raise self.error(f"unsupported value {word!r}: use a string, an integer, a boolean or an array"
                         if word else "expected a value")

    def array(self) -> list:
        self.pos += 1  # [
        items = []
        while True:
            self.skip_blank(newlines=True)
            if self.peek() == "]":
                self.pos += 1
                return items
            if not self.peek():
                raise self.error("unterminated array")
            items.append(self.value())
            self.skip_blank(newlines=True)
            if self.peek() == ",":
                self.pos += 1
            elif self.peek() != "]":
                raise self.error("expected ',' or ']' in an array")

    def document(self) -> dict:
        root: dict = {}
        table = root
        while True:
            self.skip_blank(newlines=True)
            if self.pos >= len(self.text):
                return root
            if self.peek() == "[":
                self.pos += 1
                if self.peek() == "[":
                    raise self.error("arrays of tables are not supported here")
                self.skip_blank(newlines=False)
                name = self.key()
                self.skip_blank(newlines=False)
                if self.peek() != "]":
                    raise self.error("expected ']' after the table name (dotted names are not supported here)")
                self.pos += 1
                if name in root:
                    raise self.error(f"table {name!r} is defined twice")
                table = root[name] = {}
            else:
                name = self.key()
                self.skip_blank(newlines=False)
                if self.peek() != "=":
                    raise self.error(f"expected '=' after the key {name!r} (dotted keys are not supported here)")
                self.pos += 1
                self.skip_blank(newlines=False)
                if name in table:
                    raise self.error(f"key {name!r} is defined twice")
                table[name] = self.value()
            self.end_of_line()


def parse_toml_subset(text: str) -> dict:
    """`text` read by the subset reader (_Reader); ValueError naming the line."""
    return _Reader(text).document()

