"""Damaged and hostile files given to the driver's commands. Each is refused with exit code 2 and
one line naming the file and what is wrong: never a traceback, whose exit code 1 is the one
`meshgate compare` keeps for a confirmed regression, and nothing already written is changed.
A bug that still raises is reported as an internal error, exit 2, with its traceback."""

import contextlib
import io
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path
from unittest import mock

from meshgate import cli
from meshgate.core import jsonfile

from .support import FakeRunner

REPO = Path(__file__).resolve().parents[2]
MESHGATE = REPO / "meshgate"

RUN = {"id": "r1", "started": "2026-01-01T00:00:00Z", "commit": "abc123", "dirty": False,
       "backend": "threads", "world_size": 1,
       "machine": {"host": "h", "cpu": "Test CPU", "gpus": [], "fingerprint": "f"},
       "versions": {"meshgate": "0.1.0", "cuda": None, "nccl": None, "mpi": None}}


def row(**fields) -> dict:
    base = {"id": "s/a", "suite": "s", "name": "a", "kind": "layout", "tags": [], "status": "pass",
            "message": "", "params": {}, "plan": [], "metrics": {},
            "samples": {"time_s": [[1.0, 1.1], [1.0, 1.2], [1.1, 1.0]]}, "seconds": 0.1}
    return dict(base, **fields)


def results_json(*rows: dict, **top) -> bytes:
    return json.dumps(dict({"schema": "meshgate.results/1", "run": RUN,
                            "cases": list(rows) or [row()]}, **top)).encode()


GOOD = results_json()
# What each hostile results.json holds; a directory stands in for "a directory".
HOSTILE = {
    "empty": b"",
    "binary": b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR",
    "UTF-16": GOOD.decode().encode("utf-16"),
    "UTF-16 without a byte order mark": GOOD.decode().encode("utf-16-le"),
    "truncated": GOOD[:60],
    "an array at the top": b"[1, 2, 3]",
    "null at the top": b"null",
    "nested too deeply": b"[" * 100000 + b"]" * 100000,
    "a 5000-digit number": GOOD.replace(b"0.1}", b"1" * 5000 + b"}"),
    "a lone surrogate": results_json(row(id="s/\udc80")),
    "an id that is a number": results_json(row(id=5)),
    "metrics that are a string": results_json(row(metrics="fast")),
    "samples that are strings": results_json(row(samples={"time_s": [["1.0", "x"]]})),
    "samples that are a string": results_json(row(samples={"time_s": "slow"})),
    "a NaN sample": results_json(row(samples={"time_s": [[float("nan"), 1.0], [1.0]]})),
    "a sample beyond any float": GOOD.replace(b"1.2]", b"1" + b"0" * 400 + b"]"),
    "an infinite sample": GOOD.replace(b"1.2]", b"1e999]"),
    "a boolean sample": results_json(row(samples={"time_s": [[True, 1.0]]})),
    "an unknown status": results_json(row(status="exploded")),
    "a status that is a list": results_json(row(status=["pass"])),
    "a message that is a number": results_json(row(status="fail", message=7)),
    "seconds that are a string": results_json(row(seconds="fast")),
    "a machine that is a string": results_json(run=dict(RUN, machine="box")),
    "gpus that are a number": results_json(run=dict(RUN, machine=dict(RUN["machine"], gpus=8))),
    "two rows with one id": results_json(row(), row(status="fail")),
    "a directory": None,
}


def meshgate(*argv) -> tuple[int, str, str]:
    """`meshgate ARGV` in this process: (exit code, stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli.main([str(a) for a in argv])
    return code, out.getvalue(), err.getvalue()


def snapshot(folder: Path) -> dict[str, bytes]:
    """Every file under `folder` and its bytes (SQLite's transient -wal and -shm files aside)."""
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*"))
            if p.is_file() and not p.name.endswith(("-wal", "-shm"))}


def write(path: Path, content) -> Path:
    """`content` (bytes, or None for a directory) at `path`."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if content is None:
        path.mkdir()
    else:
        path.write_bytes(content)
    return path


class RefusalTestCase(unittest.TestCase):
    def assertRefused(self, code: int, err: str, named: Path, out: str = "") -> None:
        """Exit 2 and one line on stderr naming `named`, without a traceback."""
        self.assertEqual(code, 2, out + err)
        self.assertNotIn("Traceback", err)
        self.assertIn(str(named), err)
        self.assertEqual(len(err.strip().splitlines()), 1, err)


class HostileResultsTest(RefusalTestCase):
    """Every hostile results.json through every command that reads one, with a baseline, the
    committed signals and a history database already there, none of which may change."""

    @classmethod
    def setUpClass(cls):
        cls._tmp = tempfile.TemporaryDirectory(prefix="meshgate-hostile-")
        cls.template = Path(cls._tmp.name) / "template"
        good = write(cls.template / "good.json", GOOD)
        for argv in (["baseline", "update", good, "--baselines", cls.template / "baselines",
                      "--signals", cls.template / "signals"],
                     ["history", "add", good, "--db", cls.template / "history.sqlite"]):
            code, out, err = meshgate(*argv)
            assert code == 0, out + err

    @classmethod
    def tearDownClass(cls):
        cls._tmp.cleanup()

    def commands(self, work: Path, hostile: Path) -> dict[str, list]:
        good = work / "good.json"
        return {
            "compare (base)": ["compare", hostile, good, "--out", work / "compared"],
            "compare (new)": ["compare", good, hostile, "--out", work / "compared",
                              "--json", work / "verdicts.json"],
            "baseline update": ["baseline", "update", hostile, "--baselines", work / "baselines",
                                "--signals", work / "signals"],
            "baseline update --signals-only": ["baseline", "update", hostile, "--signals-only",
                                               "--signals", work / "signals"],
            "baseline check": ["baseline", "check", hostile, "--signals", work / "signals",
                               "--out", work / "checked"],
            "history add": ["history", "add", hostile, "--db", work / "history.sqlite"],
            "report": ["report", hostile],
        }

    def test_each_is_refused_by_each_command_and_nothing_changes(self):
        for name, content in HOSTILE.items():
            with tempfile.TemporaryDirectory(dir=self._tmp.name) as tmp:
                work = Path(tmp) / "w"
                shutil.copytree(self.template, work)
                hostile = write(work / "run" / "results.json", content)
                for command, argv in self.commands(work, hostile).items():
                    with self.subTest(input=name, command=command):
                        before = snapshot(work)
                        code, out, err = meshgate(*argv)
                        self.assertRefused(code, err, hostile, out)
                        self.assertEqual(snapshot(work), before)

    def test_the_messages_say_what_is_wrong_and_where(self):
        expected = {
            "binary": "not UTF-8 text (byte 0x89 at offset 0)",
            "UTF-16": "not UTF-8 text (byte 0xff at offset 0; it starts with a UTF-16 byte order mark)",
            "UTF-16 without a byte order mark": "not UTF-8 JSON text (a NUL byte at offset 1)",
            "empty": "empty, expected a JSON object",
            "truncated": "not valid JSON: Unterminated string starting at: column 54",
            "an array at the top": "expected a JSON object, found a JSON array",
            "nested too deeply": "not readable JSON: nested too deeply",
            "a lone surrogate": "a string holds a lone surrogate (\\udc80), which is not text",
            "metrics that are a string": "cases[0] (s/a): metrics is a string, expected a JSON object",
            "a NaN sample": "cases[0] (s/a): samples.time_s[0][0] is NaN, not a finite number",
            "a sample beyond any float": "cases[0] (s/a): samples.time_s[1][1] is "
                                         "1000000000000000000000000000000000000..., not a finite number",
            "an unknown status": 'cases[0] (s/a): status "exploded" is not one of pass, fail, error, skip',
            "a message that is a number": "cases[0] (s/a): message is an integer, expected a string",
            "a machine that is a string": "run.machine is a string, expected a JSON object",
            "two rows with one id": "cases[1] (s/a): the same id as cases[0]",
            "a directory": "cannot read: Is a directory",
        }
        with tempfile.TemporaryDirectory() as tmp:
            for name, message in expected.items():
                with self.subTest(input=name):
                    path = write(Path(tmp) / name.replace(" ", "-") / "results.json", HOSTILE[name])
                    code, out, err = meshgate("compare", path, path, "--out", Path(tmp) / "c")
                    self.assertEqual(err.strip(), f"meshgate compare: {path}: {message}")

    def test_the_entry_point_exits_2_with_the_message_and_no_traceback(self):
        # Through `python3 meshgate`, as CI calls it: the example of the bug report.
        with tempfile.TemporaryDirectory() as tmp:
            work = Path(tmp) / "w"
            shutil.copytree(self.template, work)
            hostile = write(work / "bin.json", b"\xff\xfe garbage")
            for command, argv in self.commands(work, hostile).items():
                with self.subTest(command=command):
                    proc = subprocess.run([sys.executable, str(MESHGATE), *map(str, argv)],
                                          capture_output=True, text=True, cwd=tmp)
                    self.assertRefused(proc.returncode, proc.stderr, hostile, proc.stdout)
                    if command.startswith("compare"):
                        self.assertEqual(proc.stderr, f"meshgate compare: {hostile}: not UTF-8 "
                                         "text (byte 0xff at offset 0; it starts with a UTF-16 "
                                         "byte order mark)\n")

    def test_what_the_contract_allows_still_reads(self):
        with tempfile.TemporaryDirectory() as tmp:
            good = write(Path(tmp) / "good.json", GOOD)
            bom = write(Path(tmp) / "bom.json", b"\xef\xbb\xbf" + GOOD)
            code, out, err = meshgate("compare", good, bom, "--out", Path(tmp) / "c")
            self.assertEqual(code, 0, out + err)
            # A negative time is the documented inconclusive verdict, not unusable input.
            negative = write(Path(tmp) / "negative.json",
                             results_json(row(samples={"time_s": [[-1.0, -2.0], [-3.0]]})))
            code, out, err = meshgate("compare", good, negative, "--out", Path(tmp) / "c")
            self.assertEqual(code, 0, out + err)
            self.assertIn("a run reported a zero or negative time", out)


class HostileBaselineFilesTest(RefusalTestCase):
    """The committed signals, an existing per-machine baseline, calibration files."""

    def setUp(self):
        tmp = tempfile.TemporaryDirectory()
        self.addCleanup(tmp.cleanup)
        self.dir = Path(tmp.name)
        self.good = write(self.dir / "good.json", GOOD)

    def test_damaged_committed_signals(self):
        for name in ("binary", "UTF-16", "truncated", "an array at the top", "a directory"):
            for argv in (["baseline", "check", self.good, "--out", self.dir / "checked"],
                         ["baseline", "update", self.good, "--signals-only"]):
                with self.subTest(input=name, command=argv[:2]):
                    signals = self.dir / name.replace(" ", "-")
                    shutil.rmtree(signals, ignore_errors=True)
                    damaged = write(signals / "s.json", HOSTILE[name])
                    before = snapshot(self.dir)
                    code, out, err = meshgate(*argv, "--signals", signals)
                    self.assertRefused(code, err, damaged, out)
                    self.assertEqual(snapshot(self.dir), before)

    def test_committed_signals_of_the_wrong_type(self):
        entries = {"a status that is a list": {"status": ["pass"]},
                   "an unknown status": {"status": "passed"},
                   "a plan that is a string": {"status": "pass", "plan": "all_reduce(A, sum)"},
                   "a plan step that is a number": {"status": "pass", "plan": [1]}}
        for name, entry in entries.items():
            with self.subTest(entry=name):
                signals = self.dir / name.replace(" ", "-")
                damaged = write(signals / "s.json", json.dumps(
                    {"schema": "meshgate.signals/1", "cases": {"s/a": entry}}).encode())
                code, out, err = meshgate("baseline", "check", self.good, "--signals", signals,
                                          "--out", self.dir / "checked")
                self.assertRefused(code, err, damaged, out)
                self.assertIn("cases.s/a.", err)

    def test_a_damaged_existing_baseline_is_not_replaced_without_force(self):
        for name in ("binary", "UTF-16", "an array at the top", "null at the top", "a directory"):
            with self.subTest(input=name):
                root = self.dir / name.replace(" ", "-")
                existing = write(root / "test" / "s.json", HOSTILE[name])  # GOOD's machine class
                before = snapshot(root)
                code, out, err = meshgate("baseline", "update", self.good, "--baselines", root,
                                          "--signals", root / "signals")
                self.assertRefused(code, err, existing, out)
                self.assertIn("pass --force to replace it", err)
                self.assertEqual(snapshot(root), before)

    def test_damaged_calibration(self):
        floors = {"NaN": float("nan"), "negative": -0.5, "text": "x", "true": True}
        cases = dict(HOSTILE, **{f"a noise floor that is {name}": json.dumps(
            {"schema": "meshgate.calibration/1", "cases": {"s/a": {"noise_floor": v}}}).encode()
            for name, v in floors.items()})
        for name in ("binary", "UTF-16", "truncated", "an array at the top", "a directory",
                     *(f"a noise floor that is {n}" for n in floors)):
            with self.subTest(input=name):
                folder = self.dir / name.replace(" ", "-")
                calibration = write(folder / "calibration.json", cases[name])
                base = write(folder / "base.json", GOOD)
                for argv in (["--calibration", calibration], []):  # given, or beside the base
                    code, out, err = meshgate("compare", base, self.good, "--out",
                                              self.dir / "c", *argv)
                    self.assertRefused(code, err, calibration, out)
                    self.assertIn("run `meshgate calibrate` again", err)


class HostileStoredCalibrationTest(RefusalTestCase):
    """`meshgate calibrate` refuses a stored calibration it could not merge into before it
    launches a single A/A session, instead of after all of them."""

    def test_damaged_stored_calibration_stops_before_the_sessions(self):
        floors = {"NaN": float("nan"), "negative": -0.5}
        cases = dict(HOSTILE, **{f"a noise floor that is {name}": json.dumps(
            {"schema": "meshgate.calibration/1", "cases": {"s/a": {"noise_floor": v}}}).encode()
            for name, v in floors.items()})
        for name in ("binary", "truncated", "an array at the top", "a directory",
                     *(f"a noise floor that is {n}" for n in floors)):
            with self.subTest(input=name), FakeRunner("perf") as fake, fake.environ():
                root = fake.dir / "baselines"
                stored = write(root / "fake" / "calibration.json", cases[name])  # the fake's class
                before = snapshot(root)
                code, out, err = meshgate("calibrate", "--baselines", root, "--out",
                                          fake.dir / "report", "--sessions", "1")
                self.assertRefused(code, err, stored, out)
                self.assertIn("remove it and run `meshgate calibrate` again", err)
                self.assertEqual(fake.run_launches(), [])
                self.assertFalse((fake.dir / "report").exists())
                self.assertEqual(snapshot(root), before)


class HostileDatabaseTest(RefusalTestCase):
    """`meshgate history` on files that are no meshgate history database."""

    def setUp(self):
        tmp = tempfile.TemporaryDirectory()
        self.addCleanup(tmp.cleanup)
        self.dir = Path(tmp.name)
        self.good = write(self.dir / "good.json", GOOD)

    def database(self, name: str, *statements: str) -> Path:
        path = self.dir / f"{name}.sqlite"
        with contextlib.closing(sqlite3.connect(path)) as conn:
            for statement in statements:
                conn.execute(statement)
            conn.commit()
        return path

    def history_db(self, name: str, *damage: str) -> Path:
        path = self.dir / f"{name}.sqlite"
        self.assertEqual(meshgate("history", "add", self.good, "--db", path)[0], 0)
        return self.database(name, *damage)

    def test_each_is_refused_by_each_history_command_and_left_alone(self):
        databases = {
            "not a database": write(self.dir / "text.sqlite", b"this is no database" * 100),
            "binary": write(self.dir / "binary.sqlite", HOSTILE["binary"]),
            "a directory": write(self.dir / "folder.sqlite", None),
            "another program's database": self.database("foreign", "CREATE TABLE foo (x)",
                                                        "INSERT INTO foo VALUES (1)"),
            "other tables at this schema version": self.database(
                "other-tables", "CREATE TABLE schema_version (version INTEGER)",
                "INSERT INTO schema_version VALUES (1)", "CREATE TABLE runs (x)",
                "CREATE TABLE points (y)"),
            "a schema version that is text": self.database(
                "text-version", "CREATE TABLE schema_version (version TEXT)",
                "INSERT INTO schema_version VALUES ('one')"),
        }
        for name, db in databases.items():
            for argv in (["history", "add", self.good], ["history", "changes"],
                         ["history", "show", "--out", self.dir / "shown"]):
                with self.subTest(database=name, command=argv[1]):
                    before = snapshot(self.dir)
                    code, out, err = meshgate(*argv, "--db", db)
                    self.assertRefused(code, err, db, out)
                    self.assertEqual(snapshot(self.dir), before)

    def test_an_empty_file_is_no_history_and_readers_leave_it_empty(self):
        db = write(self.dir / "empty.sqlite", b"")
        for argv in (["history", "changes"], ["history", "show", "--out", self.dir / "shown"]):
            with self.subTest(command=argv[1]):
                code, out, err = meshgate(*argv, "--db", db)
                self.assertRefused(code, err, db, out)
                self.assertIn("holds no history yet", err)
                self.assertEqual(db.stat().st_size, 0)

    def test_damaged_json_in_a_point(self):
        damage = {"medians that are not JSON": "UPDATE points SET medians = 'garbage'",
                  "medians that are an object": "UPDATE points SET medians = '{}'",
                  "signals cut short": "UPDATE points SET signals = '{\"status\": '",
                  "signals that are an array": "UPDATE points SET signals = '[1]'"}
        for name, statement in damage.items():
            for argv in (["history", "changes"], ["history", "show", "--out", self.dir / "shown"]):
                with self.subTest(damage=name, command=argv[1]):
                    db = self.history_db(name.replace(" ", "-"), statement)
                    code, out, err = meshgate(*argv, "--db", db)
                    self.assertRefused(code, err, db, out)
                    self.assertIn("the point of s/a at abc123", err)


class HostileRunFoldersTest(RefusalTestCase):
    """Run folders: `report DIR` and `run --resume DIR` with a damaged results.jsonl, `run
    --baseline DIR` with a damaged baseline, `nightly` with damaged state files."""

    def setUp(self):
        tmp = tempfile.TemporaryDirectory()
        self.addCleanup(tmp.cleanup)
        self.dir = Path(tmp.name)
        lines = [json.dumps(row(id=f"s/{n}")) for n in "abc"]
        self.damaged = {"a line that is not JSON": lines[:1] + ["not json"] + lines[1:],
                        "a line of bytes that are not UTF-8": lines[:1] + ["\udcff\udcfe"] + lines[1:],
                        "a line nested too deeply": lines[:1] + ["[" * 100000] + lines[1:]}

    def jsonl(self, folder: Path, lines: list[str]) -> Path:
        text = "".join(line + "\n" for line in lines)
        return write(folder / "results.jsonl", text.encode("utf-8", "surrogateescape"))

    def test_report_of_a_damaged_results_jsonl(self):
        for name, lines in dict(self.damaged, **{
                "a row whose metrics are a string": [json.dumps(row(metrics="fast"))]}).items():
            with self.subTest(damage=name):
                folder = self.dir / name.replace(" ", "-")
                jsonl = self.jsonl(folder, lines)
                code, out, err = meshgate("report", folder)
                self.assertRefused(code, err, jsonl, out)
                self.assertEqual([p.name for p in folder.iterdir()], ["results.jsonl"])

    def test_report_of_a_damaged_results_json(self):
        for name in ("binary", "truncated", "an unknown status", "a directory"):
            with self.subTest(input=name):
                folder = self.dir / name.replace(" ", "-")
                damaged = write(folder / "results.json", HOSTILE[name])
                write(folder / "results.jsonl", GOOD)
                before = snapshot(folder)
                code, out, err = meshgate("report", folder)
                self.assertRefused(code, err, damaged, out)
                self.assertEqual(snapshot(folder), before)

    def test_resume_of_a_damaged_results_jsonl_runs_nothing_and_keeps_the_file(self):
        fake = FakeRunner("passing")
        self.addCleanup(fake.__exit__)
        for name, lines in self.damaged.items():
            with self.subTest(damage=name), fake.environ():
                folder = self.dir / name.replace(" ", "-")
                jsonl = self.jsonl(folder, lines)
                before = jsonl.read_bytes()
                with mock.patch("meshgate.core.files.source_root", return_value=fake.dir):
                    code, out, err = meshgate("run", "--resume", folder)
                self.assertRefused(code, err, f"{jsonl}:2", out)
                self.assertEqual(jsonl.read_bytes(), before)
                self.assertEqual(fake.run_launches(), [])
        # Found before the runner is built: no build is attempted for a run that cannot resume.
        folder = self.dir / "before-the-build"
        jsonl = self.jsonl(folder, next(iter(self.damaged.values())))
        with mock.patch("meshgate.system.build.runner_command",
                        side_effect=AssertionError("the runner was built")):
            code, out, err = meshgate("run", "--resume", folder)
        self.assertRefused(code, err, f"{jsonl}:2", out)

    def test_a_damaged_baseline_given_to_run(self):
        fake = FakeRunner("passing")
        self.addCleanup(fake.__exit__)
        for name in ("binary", "truncated", "a machine that is a string", "a NaN sample"):
            with self.subTest(input=name), fake.environ(), \
                    mock.patch("meshgate.core.files.source_root", return_value=fake.dir):
                folder = self.dir / name.replace(" ", "-")
                damaged = write(folder / "baseline" / "mesh.json", HOSTILE[name])
                code, out, err = meshgate("run", "--out", folder / "run", "--baseline",
                                          folder / "baseline")
                runner_said = "stderr: fake-runner: loaded 3 cases from 1 file\n"
                self.assertTrue(err.startswith(runner_said), err)
                self.assertRefused(code, err[len(runner_said):], damaged, out)
                self.assertIn("comparison unusable (exit 2)", out)
                self.assertTrue((folder / "run" / "results.json").is_file())

    def test_damaged_nightly_state_files(self):
        for name in ("binary", "empty", "an array at the top", "a directory"):
            for which in ("state", "handled"):
                with self.subTest(input=name, file=which):
                    folder = self.dir / f"{which}-{name.replace(' ', '-')}"
                    db = folder / "history.sqlite"
                    damaged = write(folder / "state.json" if which == "state"
                                    else Path(f"{db}.handled.json"), HOSTILE[name])
                    code, out, err = meshgate("nightly", "--state", folder / "state.json",
                                              "--db", db, "--out", folder / "out")
                    self.assertRefused(code, err, damaged, out)
                    self.assertIn("fix or delete it", err)


class ReaderTest(unittest.TestCase):
    """jsonfile on its own: offsets count from the file's first byte, BOM included."""

    def test_offsets_and_positions(self):
        with self.assertRaisesRegex(jsonfile.JsonFileError, r"^f: not UTF-8 text \(byte 0xff at offset 5\)$"):
            jsonfile.decode(b"\xef\xbb\xbf{\"\xff", "f")
        with self.assertRaisesRegex(jsonfile.JsonFileError, r"^f: not valid JSON: Expecting value: line 2, column 2$"):
            jsonfile.parse('{"a":\n }', "f")
        with self.assertRaisesRegex(ValueError, r"^f: expected a JSON array, found a string: fix it$"):
            jsonfile.parse('"x"', "f", list, error=ValueError, hint="fix it")
        self.assertEqual(jsonfile.parse('"\\ud83d\\ude00"', "f", str), "\U0001f600")
        self.assertEqual(jsonfile.decode(b"\xef\xbb\xbf{}", "f"), "{}")


class LastLineOfDefenceTest(unittest.TestCase):
    def test_a_bug_is_an_internal_error_with_its_traceback_and_exit_2(self):
        with mock.patch("meshgate.commands.report._cmd_report", side_effect=RuntimeError("boom\x1b[2J")):
            code, out, err = meshgate("report", "anywhere")
        self.assertEqual(code, 2)
        self.assertIn("Traceback (most recent call last)", err)
        self.assertEqual(err.strip().splitlines()[-1],
                         "meshgate report: internal error: RuntimeError: boom\\x1b[2J")

    def test_an_output_path_the_file_system_refuses_is_one_line(self):
        # --json naming a folder: the rename onto it fails; the message names the folder.
        base = Path(__file__).parent / "fixtures" / "gate" / "base.json"
        with tempfile.TemporaryDirectory() as folder:
            code, out, err = meshgate("compare", base, base, "--json", folder)
            self.assertEqual(code, 2)
            self.assertNotIn("Traceback", err)
            self.assertEqual(err.strip(), f"meshgate compare: {folder}: Is a directory")
            self.assertEqual(os.listdir(folder), [])  # no temporary file left behind

    def test_ctrl_c_is_not_caught(self):
        with mock.patch("meshgate.commands.report._cmd_report", side_effect=KeyboardInterrupt):
            with self.assertRaises(KeyboardInterrupt):
                meshgate("report", "anywhere")

    def test_a_reader_that_goes_away_ends_the_command_quietly(self):
        # `meshgate list | head -1`: the pipe closes before the table is written.
        fake = FakeRunner("passing")
        self.addCleanup(fake.__exit__)
        proc = subprocess.Popen([sys.executable, str(MESHGATE), "list"], env=fake.env,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        proc.stdout.close()
        err = proc.stderr.read()
        proc.stderr.close()
        self.assertEqual(proc.wait(), 141)  # 128 + SIGPIPE, as a shell reports it
        self.assertEqual(err, b"")


if __name__ == "__main__":
    unittest.main()
