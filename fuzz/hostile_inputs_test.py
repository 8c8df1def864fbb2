"""The real meshgate-runner, and the driver (`./meshgate run`) on a copy of the file, on every
hostile case file of corpus/case_file/. Each must finish within seconds with the exit code of
the table below, name the file (and the line at fault) when it rejects it, print no crash and
no raw control character, and leave any results.json / junit.xml it writes parseable.

CTest runs this as `hostile_inputs` with MESHGATE_RUNNER set; by hand:
    cd fuzz && MESHGATE_RUNNER=../build/cpu/harness/runner/meshgate-runner \
        python3 -m unittest -v hostile_inputs_test
"""

import json
import os
import re
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import unittest
import xml.etree.ElementTree as ElementTree
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
CORPUS = HERE / "corpus" / "case_file"
SECONDS_PER_RUN = 20  # a generous bound: each of these is decided in well under a second


@dataclass(frozen=True)
class Expect:
    code: int  # 0: valid, every case passes; 2: rejected as input before anything runs
    line: int | None  # the line the message names, where one line is at fault
    why: str


# Every file of corpus/case_file/ and what the runner must make of it.
EXPECTED = {
    "alias-self-args.yaml": Expect(2, 7, "a list containing itself: rejected, never walked"),
    "alias-self-defaults.yaml": Expect(2, 4, "the same inside defaults"),
    "alias-self-case.yaml": Expect(2, None, "a case containing itself (anchor line 4, alias 10)"),
    "alias-bomb.yaml": Expect(2, None, "9^9 leaves once expanded: rejected, never expanded"),
    "matrix-8x10.yaml": Expect(2, None, "10^8 combinations: over the matrix cap"),
    "matrix-7x10.yaml": Expect(2, None, "10^7 combinations: over the matrix cap"),
    "matrix-100k.yaml": Expect(2, None, "10^5 combinations: over the matrix cap"),
    "duplicate-keys.yaml": Expect(2, 8, "'op' twice in one case; the second is at fault"),
    "second-document.yaml": Expect(2, None, "a second YAML document would be dropped silently"),
    "cases-empty.yaml": Expect(2, 3, "a file that defines no case"),
    "utf16-bom.yaml": Expect(2, None, "not UTF-8; the message names the encoding, not a line"),
    "utf8-bom-valid.yaml": Expect(0, None, "valid after the byte order mark"),
    "fullwidth-digits-layout.yaml": Expect(2, 7, "'２' is not a digit of CuTe notation"),
    "control-chars-in-name.yaml": Expect(2, 5, "NUL, BEL, BS and CR in a case name"),
    "ansi-escape-in-name.yaml": Expect(2, 4, "ANSI escapes (as YAML escapes) in a case name"),
    "ansi-escape-raw-in-name.yaml": Expect(2, 4, "raw ESC bytes in a case name"),
    "enumerate-1e10.yaml": Expect(2, None, "all_ranks of 10^10 ranks: over the memory estimate"),
    "giant-tensor.yaml": Expect(2, None, "a 4 TB tensor: over the memory estimate"),
    "expect-error-group-missing-dim.yaml": Expect(0, None, "rejected at validation, as expected"),
    "expect-error-size-not-dividing.yaml": Expect(0, None, "rejected at validation, as expected"),
    "mesh-duplicate-ranks.yaml": Expect(2, None, "rank list [0, 0, 1, 1]"),
    "collective-duplicate-ranks.yaml": Expect(2, None, "the same rank list on a collective"),
    "mesh-names-shape-mismatch.yaml": Expect(2, None, "two dims, one name"),
}

CRASH_MARKERS = ("Segmentation fault", "terminate called", "Traceback", "AddressSanitizer",
                 "UndefinedBehaviorSanitizer", "LeakSanitizer", "ThreadSanitizer",
                 "runtime error:", "core dumped", "Aborted")
# C0 controls and DEL that would reach a terminal: all but tab and newline.
RAW_CONTROL = re.compile(rb"[\x00-\x08\x0b-\x1f\x7f]")


def runner_path() -> Path:
    given = os.environ.get("MESHGATE_RUNNER")
    path = Path(given) if given else ROOT / "build" / "cpu" / "harness" / "runner" / "meshgate-runner"
    if not os.access(path, os.X_OK):
        raise RuntimeError(f"no meshgate-runner at {path}: build it (cmake --build --preset cpu) "
                           "or set MESHGATE_RUNNER")
    return path.resolve()


def limit_memory():
    """Caps the address space of the process under test (MESHGATE_HOSTILE_MEMORY_LIMIT_MB, 0 =
    none; sanitized builds need none), so a runaway allocation fails instead of swapping."""
    megabytes = int(os.environ.get("MESHGATE_HOSTILE_MEMORY_LIMIT_MB", "4096"))
    if megabytes > 0:
        limit = megabytes * 1024 * 1024
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))


@dataclass
class Finished:
    code: int | None  # None: killed after SECONDS_PER_RUN
    output: bytes


def run_bounded(command: list[str], env: dict) -> Finished:
    process = subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, start_new_session=True,
                               preexec_fn=limit_memory)
    try:
        output, _ = process.communicate(timeout=SECONDS_PER_RUN)
        return Finished(process.returncode, output)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        output, _ = process.communicate()
        return Finished(None, output)


class HostileInputs(unittest.TestCase):
    maxDiff = None

    @classmethod
    def setUpClass(cls):
        cls.runner = runner_path()
        cls.scratch = Path(tempfile.mkdtemp(prefix="meshgate-hostile-"))

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.scratch, ignore_errors=True)

    def test_every_corpus_file_has_an_expectation(self):
        self.assertEqual(sorted(p.name for p in CORPUS.iterdir()), sorted(EXPECTED))

    def test_runner(self):
        for name, expect in EXPECTED.items():
            with self.subTest(name):
                out = self.scratch / "runner" / name
                command = [str(self.runner), "run", str(CORPUS / name), "--out", str(out)]
                self.check(name, expect, CORPUS / name, out, run_bounded(command, dict(os.environ)))

    def test_driver_on_a_copy(self):
        env = dict(os.environ, MESHGATE_RUNNER=str(self.runner))
        for name, expect in EXPECTED.items():
            with self.subTest(name):
                folder = self.scratch / "driver" / name
                folder.mkdir(parents=True)
                copy = folder / name
                shutil.copyfile(CORPUS / name, copy)
                out = folder / "out"
                command = [sys.executable, str(ROOT / "meshgate"), "run", str(copy), "--out",
                           str(out)]
                self.check(name, expect, copy, out, run_bounded(command, env))

    def check(self, name: str, expect: Expect, path: Path, out: Path, finished: Finished):
        text = finished.output.decode("utf-8", errors="replace")
        context = f"{name} ({expect.why}); output:\n{text[-3000:]}"
        self.assertIsNotNone(finished.code, f"still running after {SECONDS_PER_RUN} s: {context}")
        self.assertGreaterEqual(finished.code, 0, f"killed by signal {-finished.code}: {context}")
        for marker in CRASH_MARKERS:
            self.assertNotIn(marker, text, context)
        self.assertEqual(finished.code, expect.code, context)
        if expect.code != 0:
            self.assertIn(f"{path}:", text, f"the file is not named: {context}")
            if expect.line is not None:
                self.assertRegex(text, re.escape(f"{path}:{expect.line}:"),
                                 f"line {expect.line} is not named: {context}")
        try:
            finished.output.decode("utf-8")
        except UnicodeDecodeError as e:
            self.fail(f"output is not valid UTF-8 ({e}): {context}")
        self.assertIsNone(RAW_CONTROL.search(finished.output),
                          f"a raw control character reached the output: {context}")
        self.check_written_files(out, expect, context)

    def check_written_files(self, out: Path, expect: Expect, context: str):
        results = out / "results.json"
        if results.exists():
            try:
                document = json.loads(results.read_text(encoding="utf-8"))
            except ValueError as e:
                self.fail(f"{results} does not parse: {e}: {context}")
            if expect.code == 0:
                statuses = [c["status"] for c in document["cases"]]
                self.assertTrue(statuses and all(s == "pass" for s in statuses),
                                f"statuses {statuses}: {context}")
        elif expect.code == 0:
            self.fail(f"a valid file wrote no {results}: {context}")
        junit = out / "junit.xml"
        if junit.exists():
            try:
                ElementTree.parse(junit)
            except ElementTree.ParseError as e:
                self.fail(f"{junit} does not parse: {e}: {context}")


if __name__ == "__main__":
    unittest.main()
