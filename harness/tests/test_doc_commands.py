"""The command blocks of the user documentation run as written (a literal doc-test).

Every block fenced as `sh` or `bash` in README.md, docs/own-kernels.md and each
examples/*/README.md is a list of commands a reader types: they run in the order written, one
bash per document (so `cd`, `export` and shell variables carry from block to block, as in a
reader's terminal), each command checked for its exit code. README.md and docs/ run from the
repository's root, an example's README from its folder.

- A command's exit code must be 0, or one its trailing comment announces:
  `meshgate ab ...   # exit 1: a confirmed slowdown`, `# exit 0|1: ...` where either happens.
- A block is skipped only when the line before its fence is `<!-- doc-test: needs a GPU -->`
  or `<!-- doc-test: needs another host -->`; any other marker is an error.
- `ci/test` itself, which runs this test, is not run again from within it.
- Other fences (yaml, cmake, cpp, toml, or none) are file excerpts, not commands.

The reader's side is a scratch one: `$P`, the install prefix of the documents, is a scratch
folder; README.md runs with a fresh virtual environment first on PATH (its `pip install .`
installs there); git commits carry a test identity; the preset is this build's
(MESHGATE_PRESET), so `./meshgate run` finds its runner built and `$(ci/preset)` names this
build folder.

After a document ran, its case checks what the commands left, where an exit code says too
little: the example projects' cases all pass, and the cpp-kind example's A/B and bisection name
the planted slowdown and its commit. The cpp-kind example's commands run with
MESHGATE_CHECK_SCHEMA=1, so every results.json of its runner (rows of its own kind,
`ring_allreduce`) is validated against the results schema and the kinds the runner registered.

Runs only with MESHGATE_DOC_COMMANDS=1 and MESHGATE_BUILD_DIR (CTest's doc_commands_* set both);
the README's commands take minutes."""

from __future__ import annotations

import importlib.util
import json
import os
import time
import re
import shutil
import subprocess
import sys
import tempfile
import unittest
from dataclasses import dataclass
from pathlib import Path

from meshgate.core import schema

REPO = Path(__file__).resolve().parents[2]
BUILD_DIR = os.environ.get("MESHGATE_BUILD_DIR", "")
ENABLED = os.environ.get("MESHGATE_DOC_COMMANDS") == "1" and BUILD_DIR

FENCE = re.compile(r"^```([A-Za-z0-9_-]*)[^\n]*\n(.*?)^```[ \t]*$", re.M | re.S)
MARKER = re.compile(r"<!--\s*doc-test:\s*(.*?)\s*-->\s*$")
SKIP_REASONS = ("needs a GPU", "needs another host")
COMMAND_LANGUAGES = ("sh", "bash")
EXPECTED_EXIT = re.compile(r"(?:^|\s)#\s*exit (\d+(?:\|\d+)*)\b")
THE_TEST_ITSELF = "ci/test"


@dataclass(frozen=True)
class Command:
    line: int  # of the document, 1-based
    text: str  # with continuation lines joined
    exit_codes: tuple[int, ...]


@dataclass(frozen=True)
class Block:
    line: int
    skip: str | None
    commands: tuple[Command, ...]


def blocks_of(path: Path) -> list[Block]:
    text = path.read_text(encoding="utf-8")
    found = []
    for match in FENCE.finditer(text):
        if match.group(1) not in COMMAND_LANGUAGES:
            continue
        first = text.count("\n", 0, match.start()) + 1
        before = text[:match.start()].rstrip("\n").rsplit("\n", 1)[-1]
        marker = MARKER.search(before)
        skip = None
        if marker:
            if marker.group(1) not in SKIP_REASONS:
                raise ValueError(f"{path.name}:{first - 1}: doc-test marker '{marker.group(1)}': "
                                 f"a block is skipped only when it {' or '.join(SKIP_REASONS)}")
            skip = marker.group(1)
        found.append(Block(first, skip, tuple(commands_of(match.group(2), first + 1))))
    return found


def commands_of(body: str, first_line: int) -> list[Command]:
    commands, pending, start = [], "", None
    for offset, raw in enumerate(body.splitlines()):
        if not pending and (not raw.strip() or raw.lstrip().startswith("#")):
            continue
        if start is None:
            start = first_line + offset
        if raw.rstrip().endswith("\\"):
            pending += (raw.rstrip()[:-1].strip() if pending else raw.rstrip()[:-1].rstrip()) + " "
            continue
        text = pending + (raw.strip() if pending else raw)
        pending = ""
        expected = EXPECTED_EXIT.search(text)
        codes = tuple(int(c) for c in expected.group(1).split("|")) if expected else (0,)
        commands.append(Command(start, text, codes))
        start = None
    return commands


def script_of(document: Path, blocks: list[Block]) -> str:
    """One bash script: every command, each followed by the check of its exit code."""
    name = str(document.relative_to(REPO)) if document.is_relative_to(REPO) else document.name
    lines = ["set -o pipefail"]
    for block in blocks:
        if block.skip:
            lines.append(f"echo 'doc-test: {name}:{block.line}: skipped, {block.skip}'")
            continue
        for command in block.commands:
            where = f"{name}:{command.line}"
            if command.text.split("#", 1)[0].strip() == THE_TEST_ITSELF:
                lines.append(f"echo 'doc-test: {where}: {THE_TEST_ITSELF} is the run this test "
                             f"belongs to; not run again'")
                continue
            lines.append(f"echo 'doc-test: {where}: $ '{quote(command.text)}")
            lines.append("SECONDS=0")
            lines.append(command.text)
            allowed = " ".join(str(c) for c in command.exit_codes)
            said = " or ".join(str(c) for c in command.exit_codes)
            lines.append(f"__rc=$?; echo \"doc-test: {where}: took ${{SECONDS}} s\" >&2; case \" {allowed} \" in *\" $__rc \"*) ;; *) echo 'doc-test: "
                         f"{where}: exit '$__rc', expected {said}' >&2; exit 1;; esac")
    lines.append("echo 'doc-test: every command ran as written'")
    return "\n".join(lines) + "\n"


def quote(text: str) -> str:
    return "'" + text.replace("'", "'\\''") + "'"


class DocumentCase(unittest.TestCase):
    """Runs one document's commands; subclasses name the document and where it runs."""

    document: Path
    timeout = 3000

    def working_directory(self) -> Path:
        return REPO

    def reader_env(self, scratch: Path, env: dict) -> dict:
        return env

    def check_outcome(self, scratch: Path, output: str, started: float) -> None:
        """What the commands left, beyond their exit codes (none by default)."""

    def test_commands_run_as_written(self):
        if not ENABLED:
            self.skipTest("runs with MESHGATE_DOC_COMMANDS=1 and MESHGATE_BUILD_DIR (CTest's doc_commands_*)")
        blocks = blocks_of(self.document)
        self.assertTrue(any(b.commands for b in blocks), f"{self.document} has no command block")
        scratch = Path(tempfile.mkdtemp(prefix="meshgate-doc-"))
        self.addCleanup(shutil.rmtree, scratch, ignore_errors=True)
        env = {k: v for k, v in os.environ.items() if k not in ("MESHGATE_RUNNER", "MESHGATE_PLAN")}
        # The preset of this build: `./meshgate run` and `$(ci/preset)` then use its folder.
        env.update(P=str(scratch / "prefix"), MESHGATE_PRESET=Path(BUILD_DIR).name)
        for role in ("AUTHOR", "COMMITTER"):
            env.setdefault(f"GIT_{role}_NAME", "meshgate doc-test")
            env.setdefault(f"GIT_{role}_EMAIL", "doc-test@meshgate.invalid")
        env = self.reader_env(scratch, env)
        script = script_of(self.document, blocks)
        started = time.time()
        proc = subprocess.run(["bash", "-c", script], cwd=self.working_directory(), env=env,
                              capture_output=True, text=True, timeout=self.timeout)
        output = proc.stdout + proc.stderr
        # Where the time went, shown by `ctest -V` and unittest -v: the slowest commands first.
        took = [line for line in proc.stderr.splitlines() if line.endswith(" s") and ": took " in line]
        took.sort(key=lambda line: -int(line.rsplit(" ", 2)[1]))
        print("\n".join(took[:10]), file=sys.stderr)
        self.assertEqual(proc.returncode, 0, output[-6000:])
        self.assertIn("doc-test: every command ran as written", proc.stdout)
        self.check_outcome(scratch, output, started)


def results_since(folder: Path, started: float) -> list[dict]:
    """The results.json of the runs in `folder` (folder/<run>/results.json) written since
    `started`, oldest first."""
    paths = [p for p in folder.glob("*/results.json") if p.stat().st_mtime >= started]
    return [json.loads(p.read_text()) for p in sorted(paths, key=lambda p: p.stat().st_mtime)]


def git_output(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True,
                          text=True).stdout.strip()


class Readme(DocumentCase):
    document = REPO / "README.md"

    def setUp(self):
        # This interpreter is build/venv/main, which the README's PyTorch commands use.
        if ENABLED and importlib.util.find_spec("torch") is None:
            self.skipTest("the environment has no torch (MESHGATE_NO_TORCH=1 ci/bootstrap): the "
                          "README's PyTorch commands cannot run")

    def reader_env(self, scratch: Path, env: dict) -> dict:
        """A fresh environment of the reader's, first on PATH (made by this interpreter, which
        is one of the project's environments, so it is isolated too)."""
        venv = scratch / "reader-venv"
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        return dict(env, PATH=f"{venv / 'bin'}{os.pathsep}{env['PATH']}", VIRTUAL_ENV=str(venv))


class OwnKernels(DocumentCase):
    document = REPO / "docs" / "own-kernels.md"


class CppKindExample(DocumentCase):
    document = REPO / "examples" / "cpp-kind" / "README.md"

    def working_directory(self) -> Path:
        return self.document.parent

    def reader_env(self, scratch: Path, env: dict) -> dict:
        # The README's scratch repository (mktemp -d) then lies under the test's scratch folder.
        (scratch / "tmp").mkdir()
        # Every results.json the driver takes from the example's runner or writes is checked
        # against the results schema, rows of the project's own kind included.
        return dict(env, TMPDIR=str(scratch / "tmp"), MESHGATE_CHECK_SCHEMA="1")

    def check_outcome(self, scratch: Path, output: str, started: float) -> None:
        # The smoke cases: every one passes and their plans match the committed signals.
        smoke = [doc for doc in results_since(self.document.parent / "reports", started)
                 if len(doc["cases"]) == 12]
        self.assertTrue(smoke, "no run of the 12 smoke cases")
        self.assertEqual({row["status"] for row in smoke[0]["cases"]}, {"pass"})
        self.assertTrue(all(row["id"].startswith("ring-allreduce/ring-") for row in smoke[0]["cases"]))
        # A kind of the project's own is a first-class one: the runner records it among its
        # kinds, and the results validate against the schema and those kinds.
        self.assertIn("ring_allreduce", smoke[0]["run"]["kinds"])
        self.assertEqual({row["kind"] for row in smoke[0]["cases"]}, {"ring_allreduce"})
        schema.check(smoke[0], "results-1")
        self.assertIn("signals baselines/signals: no change (exit 0)", output)
        # The scratch repository: the A/B flags the perf case, the bisection names main~1.
        (repo,) = scratch.glob("tmp/*/ring")
        planted = git_output(repo, "rev-parse", "main~1")
        (comparison,) = repo.glob("reports/ab-*/comparison.json")
        verdicts = {c["id"]: c["verdict"] for c in json.loads(comparison.read_text())["cases"]}
        self.assertEqual(verdicts["ring-allreduce/ring-4-perf"], "regression", verdicts)
        (bisect,) = repo.glob("reports/bisect-*/bisect.json")
        self.assertEqual(json.loads(bisect.read_text())["culprit"], planted)
        self.assertIn(f"culprit: {planted}", output)


class PythonCommandExample(DocumentCase):
    document = REPO / "examples" / "python-command" / "README.md"

    def working_directory(self) -> Path:
        return self.document.parent

    def check_outcome(self, scratch: Path, output: str, started: float) -> None:
        # Inside this checkout, the installed driver keeps its reports in the checkout's.
        every = [doc for doc in results_since(REPO / "reports", started)
                 if len(doc["cases"]) == 4]
        self.assertTrue(every, "no run of the example's four cases")
        rows = {row["id"]: row for row in every[-1]["cases"]}
        self.assertEqual(set(rows), {"python-allreduce/allreduce-1", "python-allreduce/allreduce-3",
                                     "python-allreduce/allreduce-sockets-2",
                                     "python-allreduce/allreduce-perf-2"})
        self.assertEqual({row["status"] for row in rows.values()}, {"pass"})
        self.assertEqual(rows["python-allreduce/allreduce-sockets-2"]["metrics"]["used_torch"], 0)
        perf = rows["python-allreduce/allreduce-perf-2"]
        self.assertEqual(len(perf["samples"]["time_s"]), 3, "one sample list per launch")


class Parsing(unittest.TestCase):
    """The extraction itself, on documents written here."""

    def write(self, text: str) -> Path:
        folder = Path(tempfile.mkdtemp(prefix="meshgate-doc-parse-"))
        self.addCleanup(shutil.rmtree, folder, ignore_errors=True)
        path = folder / "DOC.md"
        path.write_text(text, encoding="utf-8")
        return path

    def test_commands_exit_codes_markers_and_continuations(self):
        doc = self.write("text\n\n```sh\n# a comment line\nfalse   # exit 1: on purpose\n"
                         "echo a \\\n  b\n```\n\n```yaml\nkey: value\n```\n\n"
                         "<!-- doc-test: needs a GPU -->\n```sh\nnvidia-smi\n```\n")
        blocks = blocks_of(doc)
        self.assertEqual(len(blocks), 2)
        self.assertEqual([(c.line, c.exit_codes) for c in blocks[0].commands], [(5, (1,)), (6, (0,))])
        self.assertEqual(blocks[0].commands[1].text, "echo a b")
        self.assertEqual(blocks[1].skip, "needs a GPU")

    def test_an_unknown_marker_is_refused(self):
        doc = self.write("<!-- doc-test: too slow -->\n```sh\ntrue\n```\n")
        with self.assertRaisesRegex(ValueError, "DOC.md:1: doc-test marker 'too slow'"):
            blocks_of(doc)

    def test_the_script_stops_at_the_first_wrong_exit_code(self):
        doc = self.write("```sh\ntrue\nfalse\necho never\n```\n")
        script = script_of(doc, blocks_of(doc))
        proc = subprocess.run(["bash", "-c", script], capture_output=True, text=True)
        self.assertEqual(proc.returncode, 1)
        self.assertIn("doc-test: DOC.md:3: exit 1, expected 0", proc.stderr)
        self.assertNotIn("never\n", proc.stdout.replace("$ 'echo never'", ""))

    def test_an_announced_exit_code_must_happen(self):
        doc = self.write("```sh\ntrue   # exit 1: says it fails\n```\n")
        proc = subprocess.run(["bash", "-c", script_of(doc, blocks_of(doc))], capture_output=True,
                              text=True)
        self.assertEqual(proc.returncode, 1)
        self.assertIn("DOC.md:2: exit 0, expected 1", proc.stderr)
        doc = self.write("```sh\nfalse   # exit 0|1: either\n(exit 2)   # exit 0|1: either\n```\n")
        proc = subprocess.run(["bash", "-c", script_of(doc, blocks_of(doc))], capture_output=True,
                              text=True)
        self.assertEqual(proc.returncode, 1)
        self.assertIn("DOC.md:3: exit 2, expected 0 or 1", proc.stderr)

    def test_the_documents_parse_and_every_command_block_is_covered(self):
        for document in (Readme.document, OwnKernels.document, CppKindExample.document,
                         PythonCommandExample.document):
            blocks = blocks_of(document)
            for block in blocks:
                self.assertTrue(block.commands or block.skip, f"{document}:{block.line}: empty block")
        covered = {c.document for c in (Readme, OwnKernels, CppKindExample, PythonCommandExample)}
        self.assertEqual({p for p in (REPO / "examples").glob("*/README.md")},
                         {p for p in covered if p.parent.parent == REPO / "examples"},
                         "every example README has a DocumentCase here")


if __name__ == "__main__":
    unittest.main()
