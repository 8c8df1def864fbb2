"""`meshgate history add | changes | show` (meshgate/timeline/history.py): the store, its schema,
exact status and plan changes, and the detection rates of timing changes on a synthetic nightly
series written as results files."""

from __future__ import annotations

import contextlib
import datetime as _dt
import hashlib
import io
import json
import random
import sqlite3
import statistics
import sys
import tempfile
import time
import unittest
from pathlib import Path
from unittest import mock

from meshgate import cli
from meshgate.core import svg
from meshgate.timeline import history
from meshgate.timeline import series as timeline_series

from .synthetic import runs_at
from tests.support import once

MACHINE = {"host": "ci-1", "cpu": "AMD EPYC 7763 64-Core Processor", "cores": 16, "gpus": [],
           "fingerprint": "f00d"}
OTHER_MACHINE = {"host": "ci-2", "cpu": "Intel Xeon Gold 6338", "cores": 16, "gpus": [],
                 "fingerprint": "beef"}


def sha(i: int, salt: str = "") -> str:
    return hashlib.sha1(f"{salt}{i}".encode()).hexdigest()


def night(i: int) -> str:
    return f"2026-01-01T02:00:00Z" if i == 0 else \
        (f"2026-{1 + (i // 28):02d}-{1 + i % 28:02d}T02:{i % 60:02d}:00Z")


def row(case_id: str, runs: list[list[float]] | None = None, status: str = "pass", plan=None,
        kind: str = "redistribute", message: str = "", metrics: dict | None = None) -> dict:
    metrics = dict(metrics or {})
    if runs:
        metrics["time_s"] = {"median": statistics.median(statistics.median(r) for r in runs)}
    return {"id": case_id, "suite": case_id.split("/")[0], "name": case_id.split("/")[-1], "kind": kind,
            "tags": ["nightly"], "status": status, "message": message, "params": {},
            "plan": list(plan or []), "metrics": metrics, "samples": {"time_s": runs} if runs else {},
            "seconds": 0.1}


def results(commit: str, started: str, rows: list[dict], machine: dict = MACHINE, run_id: str | None = None) -> dict:
    return {"schema": "meshgate.results/1",
            "run": {"id": run_id or f"run-{started}-{commit[:7]}", "started": started, "commit": commit,
                    "dirty": False, "backend": "threads", "world_size": 8, "machine": machine,
                    "versions": {"meshgate": "0.1.0", "cuda": None, "nccl": None, "mpi": None}},
            "cases": rows}


def meshgate(*argv: str) -> tuple[int, str, str]:
    with contextlib.redirect_stdout(io.StringIO()) as out, contextlib.redirect_stderr(io.StringIO()) as err:
        code = cli.main(list(argv))
    return code, out.getvalue(), err.getvalue()


class HistoryTestCase(unittest.TestCase):
    def setUp(self):
        tmp = tempfile.TemporaryDirectory(prefix="meshgate-history-")
        self.addCleanup(tmp.cleanup)
        self.dir = Path(tmp.name)
        self.db = self.dir / "history.sqlite"

    def write(self, name: str, doc: dict) -> Path:
        path = self.dir / name
        path.write_text(json.dumps(doc))
        return path

    def add(self, *paths: Path) -> tuple[int, str, str]:
        return meshgate("history", "add", *map(str, paths), "--db", str(self.db))

    def changes(self) -> list[dict]:
        out = self.dir / "changes.json"
        code, stdout, stderr = meshgate("history", "changes", "--db", str(self.db), "--json", str(out))
        self.assertEqual(code, 0, stderr)
        return json.loads(out.read_text())["changes"]

    def nightly(self, n: int, make_rows, machine: dict = MACHINE, salt: str = "") -> list[Path]:
        """One results file per night; make_rows(i) gives night i's rows."""
        return [self.write(f"night-{salt}{i:03d}.json", results(sha(i, salt), night(i), make_rows(i), machine))
                for i in range(n)]


# ---------------------------------------------------------------------------------------------
# Detection rates through add + changes


@once("40 simulated nights of 200 cases")
class DetectionRateTest(HistoryTestCase):
    """Steps of 10 % and 5 % (half of them up, half down) and flat cases, 40 nights each, on a
    machine drifting +0.05 % per night; 5 runs per night with 2 % run-to-run noise and 1 %
    iteration noise. A step counts as found when a change of the right direction names the
    step's commit or the one after it."""

    NIGHTS = 40
    TRIALS = {"step10": 50, "step5": 50, "flat": 100}
    DRIFT = 0.0005

    @classmethod
    def setUpClass(cls):
        rng = random.Random(2024)
        cls.cases = {}
        for family, count in cls.TRIALS.items():
            for t in range(count):
                size = {"step10": 0.10, "step5": 0.05, "flat": 0.0}[family]
                sign = 1 if t % 2 == 0 else -1
                cls.cases[f"synthetic/{family}-{t:03d}"] = {
                    "level": 10 ** rng.uniform(-5, -2), "at": rng.randint(12, 28),
                    "step": sign * size, "rng": random.Random(rng.random())}

    def rows_for(self, i: int) -> list[dict]:
        rows = []
        for case_id, c in self.cases.items():
            level = c["level"] * (1 + self.DRIFT * i) * (1 + (c["step"] if i >= c["at"] else 0.0))
            rows.append(row(case_id, runs_at(c["rng"], level), plan=["all_reduce(A+C, sum)"],
                            metrics={"bytes_per_rank": 4096}))
        return rows

    def test_detection_rates(self):
        started = time.perf_counter()
        files = self.nightly(self.NIGHTS, self.rows_for)
        code, out, err = self.add(*files)
        self.assertEqual(code, 0, err)
        found = {}
        for c in self.changes():
            found.setdefault(c["case"], []).append(c)
        hits = {family: 0 for family in self.TRIALS}
        for case_id, c in self.cases.items():
            family = case_id.split("/")[1].split("-")[0]
            reported = found.get(case_id, [])
            self.assertTrue(all(x["kind"] in ("slower", "faster") for x in reported), reported)
            if family == "flat":
                hits[family] += bool(reported)
                continue
            kind = "slower" if c["step"] > 0 else "faster"
            good = {sha(c["at"]), sha(c["at"] + 1)}
            hits[family] += any(x["commit"] in good and x["kind"] == kind for x in reported)
        rates = {f: hits[f] / n for f, n in self.TRIALS.items()}
        sys.stderr.write(
            f"\n  history detection: 10 % steps {rates['step10']:.0%}, 5 % steps {rates['step5']:.0%} "
            f"found at the right commit or one late; flat cases reported {rates['flat']:.0%} "
            f"({time.perf_counter() - started:.1f} s) ... ")
        self.assertGreaterEqual(rates["step10"], 0.90)
        self.assertGreaterEqual(rates["step5"], 0.70)
        self.assertLessEqual(rates["flat"], 0.05)


# ---------------------------------------------------------------------------------------------
# Store


class StoreTest(HistoryTestCase):
    def series_files(self, n: int = 12) -> list[Path]:
        rng = random.Random(1)
        return self.nightly(n, lambda i: [row("s/a", runs_at(rng, 1e-3)), row("s/b", runs_at(rng, 2e-3))])

    def dump(self) -> list[tuple]:
        with contextlib.closing(sqlite3.connect(self.db)) as conn:
            return conn.execute("SELECT * FROM points ORDER BY run_id, case_id").fetchall()

    def test_wal_mode_and_schema_version(self):
        self.assertEqual(self.add(*self.series_files(3))[0], 0)
        with contextlib.closing(sqlite3.connect(self.db)) as conn:
            self.assertEqual(conn.execute("PRAGMA journal_mode").fetchone()[0], "wal")
            self.assertEqual(conn.execute("SELECT version FROM schema_version").fetchall(),
                             [(history.SCHEMA_VERSION,)])
            self.assertEqual(history.SCHEMA_VERSION, len(history.MIGRATIONS))

    def test_re_adding_a_run_gives_the_same_points(self):
        files = self.series_files()
        self.assertEqual(self.add(*files)[0], 0)
        first = self.dump()
        self.assertEqual(len(first), 24)
        code, out, _ = self.add(files[3])
        self.assertEqual(code, 0)
        self.assertIn("replaced", out)
        self.assertEqual(self.dump(), first)
        self.assertEqual(self.add(*reversed(files))[0], 0)
        self.assertEqual(self.dump(), first)

    def test_points_follow_the_start_time_not_the_add_order(self):
        files = self.series_files(8)
        self.add(*reversed(files))
        with contextlib.closing(history.open_db(self.db)) as conn:
            series = history.load_series(conn, ["s/a"])
        self.assertEqual(len(series), 1)
        self.assertEqual([c.commit for c in series[0].commits], [sha(i) for i in range(8)])
        self.assertEqual(len(series[0].commits[0].medians), 5)

    def test_start_times_ending_in_z_read_on_every_supported_python(self):
        # The runner writes UTC with a trailing Z, which datetime.fromisoformat reads only from
        # Python 3.11; the driver supports 3.9.
        class Before311(_dt.datetime):
            @classmethod
            def fromisoformat(cls, text):
                if text.endswith("Z"):
                    raise ValueError(f"Invalid isoformat string: {text!r}")
                return super().fromisoformat(text)

        with mock.patch.object(history._dt, "datetime", Before311):
            when = history._parse_time("2026-11-24T02:44:13Z", Path("results.json"))
            shifted = history._parse_time("2026-11-24T03:44:13+01:00", Path("results.json"))
        utc = _dt.datetime(2026, 11, 24, 2, 44, 13, tzinfo=_dt.timezone.utc).timestamp()
        self.assertEqual((when, shifted), (utc, utc))

    def test_one_transaction_per_add(self):
        good = self.series_files(2)
        bad = self.write("bad.json", {"schema": "meshgate.results/1", "run": {"started": night(5)}, "cases": []})
        code, _, err = self.add(*good, bad)
        self.assertEqual(code, 2)
        self.assertIn("bad.json", err)
        self.assertIn("run.commit", err)
        self.assertFalse(self.db.exists() and self.dump())

    def test_unusable_input_exits_2_naming_the_file(self):
        missing = self.dir / "nope" / "results.json"
        code, _, err = self.add(missing)
        self.assertEqual(code, 2)
        self.assertIn(str(missing), err)
        broken = self.dir / "broken.json"
        broken.write_text("{not json")
        code, _, err = self.add(broken)
        self.assertEqual(code, 2)
        self.assertIn(str(broken), err)
        wrong = self.write("wrong.json", {"schema": "something-else/1", "cases": []})
        self.assertEqual(self.add(wrong)[0], 2)
        no_time = self.write("no-time.json", results(sha(1), "yesterday", [row("s/a")]))
        code, _, err = self.add(no_time)
        self.assertEqual(code, 2)
        self.assertIn("no-time.json", err)
        code, _, err = meshgate("history", "changes", "--db", str(self.dir / "absent.sqlite"))
        self.assertEqual(code, 2)
        self.assertIn("absent.sqlite", err)

    def test_a_newer_schema_is_refused(self):
        self.add(*self.series_files(2))
        with contextlib.closing(sqlite3.connect(self.db)) as conn:
            conn.execute("UPDATE schema_version SET version = 7")
            conn.commit()
        before = self.dump()
        for argv in (("history", "changes", "--db", str(self.db)),
                     ("history", "add", str(self.series_files(3)[2]), "--db", str(self.db))):
            code, _, err = meshgate(*argv)
            self.assertEqual(code, 2)
            self.assertIn("schema version 7 is newer", err)
        self.assertEqual(self.dump(), before)

    def test_a_foreign_database_is_refused(self):
        with contextlib.closing(sqlite3.connect(self.db)) as conn:
            conn.execute("CREATE TABLE something (x)")
            conn.commit()
        code, _, err = self.add(*self.series_files(1))
        self.assertEqual(code, 2)
        self.assertIn("not a meshgate history database", err)

    def test_older_schemas_migrate_through_the_registered_steps(self):
        # Version 0: an empty file becomes version 1.
        self.db.touch()
        self.assertEqual(self.add(*self.series_files(2))[0], 0)
        before = self.dump()

        # A version 2 registered for this test: the version 1 database is migrated in place.
        def add_note(conn):
            conn.execute("ALTER TABLE runs ADD COLUMN note TEXT NOT NULL DEFAULT ''")

        with mock.patch.object(history, "SCHEMA_VERSION", 2), \
                mock.patch.object(history, "MIGRATIONS", history.MIGRATIONS + [add_note]):
            code, _, err = meshgate("history", "changes", "--db", str(self.db))
            self.assertEqual(code, 0, err)
        with contextlib.closing(sqlite3.connect(self.db)) as conn:
            self.assertEqual(conn.execute("SELECT version FROM schema_version").fetchall(), [(2,)])
            self.assertEqual({r[0] for r in conn.execute("SELECT note FROM runs")}, {""})
        self.assertEqual(self.dump(), before)
        # ... and this code (version 1) now refuses it.
        self.assertEqual(meshgate("history", "changes", "--db", str(self.db))[0], 2)

    def test_machine_classes_make_separate_series(self):
        rng = random.Random(3)
        fast = self.nightly(20, lambda i: [row("s/a", runs_at(rng, 1e-3))], MACHINE, "a")
        slow = self.nightly(20, lambda i: [row("s/a", runs_at(rng, 1.3e-3))], OTHER_MACHINE, "b")
        # Interleave the two machines' nights: mixed into one series they would zigzag by 30 %.
        self.assertEqual(self.add(*[f for pair in zip(fast, slow) for f in pair])[0], 0)
        self.assertEqual(self.changes(), [])
        with contextlib.closing(history.open_db(self.db)) as conn:
            self.assertEqual(len(history.load_series(conn)), 2)


# ---------------------------------------------------------------------------------------------
# Exact changes, JSON shape, reports


class ExactChangeTest(HistoryTestCase):
    def test_status_change_at_the_first_failing_commit(self):
        rng = random.Random(4)

        def rows(i):
            if i < 9:
                return [row("s/a", runs_at(rng, 1e-3))]
            return [row("s/a", status="fail", message="rank 0: wrong element at (3, 1)")]

        self.add(*self.nightly(14, rows))
        changes = self.changes()
        self.assertEqual([(c["kind"], c["commit"], c["last_good"]) for c in changes], [("status", sha(9), sha(8))])
        self.assertIsNone(changes[0]["p"])
        self.assertIn("wrong element", changes[0]["detail"])

    def test_skips_are_not_status_changes(self):
        rng = random.Random(5)
        self.add(*self.nightly(8, lambda i: [row("s/a", runs_at(rng, 1e-3)) if i % 3 else row("s/a", status="skip")]))
        self.assertEqual(self.changes(), [])

    def test_plan_change_at_the_exact_commit(self):
        rng = random.Random(6)

        def rows(i):
            plan = ["all_reduce(A+C, sum)"] if i < 11 else ["all_reduce(A, sum)", "all_reduce(C, sum)"]
            return [row("s/a", runs_at(rng, 1e-3), plan=plan, metrics={"bytes_per_rank": 4096, "collectives": len(plan)}),
                    row("s/b", runs_at(rng, 1e-3), plan=["all_gather(B, dim=0)"], metrics={"bytes_per_rank": 4096})]

        self.add(*self.nightly(16, rows))
        changes = self.changes()
        self.assertEqual([(c["case"], c["kind"], c["commit"], c["last_good"]) for c in changes],
                         [("s/a", "plan", sha(11), sha(10))])
        self.assertIn("plan", changes[0]["detail"])
        self.assertAlmostEqual(changes[0]["ratio"], 1.0, delta=0.05)

    def test_a_plan_change_is_not_credited_with_an_earlier_step_in_time(self):
        rng = random.Random(8)

        def rows(i):
            plan = ["all_reduce(A, sum)"] if i < 15 else ["all_gather(A)"]
            return [row("s/a", runs_at(rng, 1e-3 * (1.1 if i >= 12 else 1.0), between=0.005, within=0.002),
                        plan=plan, metrics={"collectives": 1})]

        self.add(*self.nightly(34, rows))
        changes = {c["kind"]: c for c in self.changes()}
        self.assertEqual(sorted(changes), ["plan", "slower"])
        self.assertEqual((changes["slower"]["commit"], changes["plan"]["commit"]), (sha(12), sha(15)))
        self.assertAlmostEqual(changes["slower"]["ratio"], 1.1, delta=0.02)
        # Three commits after the step, the plan change itself moved no time.
        self.assertAlmostEqual(changes["plan"]["ratio"], 1.0, delta=0.02)

    def test_timing_change_json_has_the_contract_shape(self):
        rng = random.Random(7)
        self.add(*self.nightly(30, lambda i: [row("s/a", runs_at(rng, 1e-3 * (1.2 if i >= 17 else 1.0)))]))
        changes = self.changes()
        self.assertEqual(len(changes), 1)
        c = changes[0]
        self.assertLessEqual({"case", "commit", "last_good", "ratio", "p", "kind"}, set(c))
        self.assertEqual((c["case"], c["kind"], c["commit"], c["last_good"]), ("s/a", "slower", sha(17), sha(16)))
        self.assertIsInstance(c["ratio"], float)
        self.assertAlmostEqual(c["ratio"], 1.2, delta=0.05)
        self.assertIsInstance(c["p"], float)
        self.assertLessEqual(c["p"], 0.001)
        self.assertEqual(c["machine"], "amd-epyc-7763-64-core-16c")

    def test_show_writes_a_table_and_plots_with_the_change_marked(self):
        rng = random.Random(8)
        self.add(*self.nightly(24, lambda i: [row("s/a", runs_at(rng, 1e-3 * (0.85 if i >= 12 else 1.0))),
                                              row("t/b", runs_at(rng, 5e-4))]))
        out = self.dir / "report"
        code, stdout, err = meshgate("history", "show", "s/*", "--db", str(self.db), "--out", str(out))
        self.assertEqual(code, 0, err)
        self.assertIn(sha(12)[:12], stdout)
        self.assertIn("<- faster", stdout)
        self.assertNotIn("t/b", stdout)
        page = (out / "report.html").read_text()
        self.assertEqual(page.count("<svg"), 1)
        self.assertIn(f'class="change change-faster" data-commit="{sha(12)}"', page)
        self.assertIn(f"<title>{sha(12)} (", page)  # a point's hover names its commit and date
        self.assertNotIn("<script", page)
        self.assertIn("faster", (out / "report.md").read_text())
        code, stdout, _ = meshgate("history", "show", "--db", str(self.db), "--out", str(out))
        self.assertEqual(code, 0)
        self.assertIn("t/b", stdout)
        self.assertEqual((out / "report.html").read_text().count("<svg"), 2)
        self.assertEqual(meshgate("history", "show", "nothing/*", "--db", str(self.db), "--out", str(out))[0], 2)


class ShortSeriesTest(HistoryTestCase):
    """A timing series shorter than the change-point test can judge is named, with how many
    points it has and needs, rather than passed over in silence."""

    def test_five_commits_with_a_step_say_their_timing_is_too_short(self):
        rng = random.Random(12)

        def rows(i):
            level = 45e-9 if i < 3 else 85e-9  # a step anyone can see in the table
            plan = ["all_reduce(A, sum)"] if i < 3 else ["all_gather(A)"]
            return [row("s/a", runs_at(rng, level), plan=plan, metrics={"collectives": 1}),
                    row("s/untimed", status="fail" if i == 4 else "pass")]

        self.add(*[self.write(f"run-{i}.json", results(sha(i), f"2026-11-26T0{i}:00:00Z", rows(i)))
                   for i in range(5)])
        out = self.dir / "changes.json"
        code, stdout, err = meshgate("history", "changes", "--db", str(self.db), "--json", str(out))
        self.assertEqual(code, 0, err)
        needed = timeline_series.fewest_points_to_judge()
        self.assertGreater(needed, 5)
        lines = stdout.splitlines()
        self.assertIn("1 series too short to judge a change in timing:", lines)
        self.assertIn(f"timing: 5 points, at least {needed} needed to judge a change",
                      next(line for line in lines if line.startswith("s/a ") and "timing" in line))
        self.assertFalse(any(line.startswith("s/untimed") and "timing" in line for line in lines))
        document = json.loads(out.read_text())
        self.assertEqual([(c["case"], c["kind"]) for c in document["changes"]],
                         [("s/a", "plan"), ("s/untimed", "status")])
        self.assertEqual(document["too_short"], [{"case": "s/a", "machine": "amd-epyc-7763-64-core-16c",
                                                  "points": 5, "needed": needed}])

    def test_a_long_enough_series_is_judged_not_called_short(self):
        rng = random.Random(13)
        self.add(*self.nightly(timeline_series.fewest_points_to_judge(), lambda i: [row("s/a", runs_at(rng, 1e-3))]))
        code, stdout, _ = meshgate("history", "changes", "--db", str(self.db))
        self.assertEqual(code, 0)
        self.assertEqual(stdout, "no change points in 1 series\n")

    def test_the_fewest_points_are_where_the_test_can_first_see_a_clean_step(self):
        from meshgate.timeline import changepoint

        needed = timeline_series.fewest_points_to_judge()
        # The permutation test alone needs 14 (2 / C(14, 7) = 0.00058 <= P_THRESHOLD <
        # 2 / C(13, 6)); the short-side test judges a clear step from SHORT_MIN_POINTS on.
        self.assertEqual(needed, changepoint.SHORT_MIN_POINTS)
        self.assertEqual(needed, 8)

        def clean_step(n):
            return [1.0 + 0.001 * i for i in range(n // 2)] + [2.0 + 0.001 * i for i in range(n - n // 2)]

        self.assertEqual([c.index for c in changepoint.detect(clean_step(needed))], [needed // 2])
        self.assertEqual(changepoint.detect(clean_step(needed - 1)), [])
        self.assertEqual(changepoint.detect(clean_step(2 * changepoint.MIN_SEGMENT)), [])

    def test_a_large_step_near_the_start_of_a_short_series_is_found(self):
        # The report: 14 commits, 4 at 15.8 ns then 10 at 135 ns; `history changes` said "no
        # change points", as a 4-point side can never reach p <= 0.001 by permutation.
        for before, after in ((4, 10), (3, 11), (5, 9), (10, 4), (11, 3)):
            with self.subTest(before=before, after=after):
                rng = random.Random(before * 100 + after)
                db = self.dir / f"h-{before}-{after}.sqlite"
                paths = [self.write(f"n-{before}-{after}-{i}.json",
                                    results(sha(i, f"{before}/{after}"), night(i),
                                            [row("s/a", runs_at(rng, 15.8e-9 if i < before else 135e-9))]))
                         for i in range(before + after)]
                code, _, err = meshgate("history", "add", *map(str, paths), "--db", str(db))
                self.assertEqual(code, 0, err)
                out = self.dir / f"c-{before}-{after}.json"
                code, stdout, err = meshgate("history", "changes", "--db", str(db), "--json", str(out))
                self.assertEqual(code, 0, err)
                found = json.loads(out.read_text())["changes"]
                self.assertEqual([(c["kind"], c["commit"]) for c in found],
                                 [("slower", sha(before, f"{before}/{after}"))], stdout)
                self.assertNotIn("too short", stdout)


class AncestryOrderTest(HistoryTestCase):
    """A series follows git's first-parent line, not the order the runs started in: commits
    backfilled later land where they belong."""

    def git(self, *args: str) -> str:
        import subprocess
        return subprocess.run(["git", "-C", str(self.repo), *args], check=True, capture_output=True,
                              text=True).stdout.strip()

    def setUp(self):
        super().setUp()
        self.repo = self.dir / "repo"
        self.repo.mkdir()
        self.git("init", "-q")
        self.git("config", "user.email", "t@example.com")
        self.git("config", "user.name", "t")
        self.commits = []
        for i in range(16):
            (self.repo / "f").write_text(str(i))
            self.git("add", "f")
            self.git("commit", "-q", "-m", f"c{i}")
            self.commits.append(self.git("rev-parse", "HEAD"))

    def test_backfilled_commits_take_their_place_in_the_line(self):
        # Nights measured the even commits first, then someone backfilled the odd ones: start
        # times zig-zag against the commits. The step is at commit 9.
        rng = random.Random(5)
        order = list(range(0, 16, 2)) + list(range(1, 16, 2))
        paths = []
        for n, i in enumerate(order):
            level = 1e-3 if i < 9 else 1.25e-3
            paths.append(self.write(f"run-{n:02d}.json",
                                    results(self.commits[i][:7], night(n), [row("s/a", runs_at(rng, level))])))
        code, _, err = self.add(*paths)
        self.assertEqual(code, 0, err)
        series = history.read_series(self.db, repo=self.repo)[0]
        self.assertEqual([c.commit for c in series.commits], [c[:7] for c in self.commits])
        out = self.dir / "changes.json"
        code, stdout, err = meshgate("history", "changes", "--db", str(self.db), "--json", str(out),
                                     "--repo", str(self.repo))
        self.assertEqual(code, 0, err)
        found = [(c["kind"], c["commit"], c["last_good"]) for c in json.loads(out.read_text())["changes"]]
        self.assertEqual(found, [("slower", self.commits[9][:7], self.commits[8][:7])], stdout)
        # Without the repository's line, start-time order is all there is.
        unordered = history.read_series(self.db)[0]
        self.assertEqual([c.commit for c in unordered.commits], [self.commits[i][:7] for i in order])

    def test_commits_off_the_line_keep_their_place_after_their_predecessor(self):
        line = ["a" * 40, "b" * 40, "c" * 40]
        s = timeline_series.Series("s/a", "m", [
            timeline_series.CommitPoint(sha, "", 0.0, ["pass"], [1.0], None)
            for sha in ("cccc", "side1", "aaaa", "side2", "bbbb")])
        timeline_series.order_by_ancestry([s], line)
        self.assertEqual([c.commit for c in s.commits], ["aaaa", "side2", "bbbb", "cccc", "side1"])


class PlotAxisTest(HistoryTestCase):
    """The history plot's x axis names commits: all points of a day would share one date."""

    def axis_labels(self, page: str) -> list[tuple[str, str, float]]:
        """(tooltip, text, x) of each commit label of the page's plot."""
        import re

        return [(tip, text, float(x)) for x, tip, text in re.findall(
            r'<text x="([\d.]+)" y="[\d.]+" class="tick commit" text-anchor="middle">'
            r"<title>([^<]*)</title>([^<]*)</text>", page)]

    def show(self, nights: int, started) -> str:
        rng = random.Random(11)
        self.add(*[self.write(f"run-{i}.json", results(sha(i), started(i), [row("s/a", runs_at(rng, 1e-3))]))
                   for i in range(nights)])
        out = self.dir / "report"
        code, _, err = meshgate("history", "show", "--db", str(self.db), "--out", str(out))
        self.assertEqual(code, 0, err)
        return (out / "report.html").read_text()

    def test_points_of_one_day_are_labelled_by_short_commit_with_the_date_in_a_tooltip(self):
        page = self.show(5, lambda i: f"2026-11-26T0{i}:30:00Z")
        labels = self.axis_labels(page)
        self.assertEqual([text for _, text, _ in labels], [sha(i)[:7] for i in range(5)])
        self.assertEqual([tip for tip, _, _ in labels], [f"{sha(i)} (2026-11-26 0{i}:30)" for i in range(5)])
        self.assertNotIn(">11-26<", page)

    def test_labels_are_thinned_so_that_they_do_not_overlap_and_the_newest_keeps_its_label(self):
        page = self.show(60, night)
        labels = self.axis_labels(page)
        xs = [x for _, _, x in labels]
        width = 7 * svg.TICK_CHAR_PX
        self.assertGreater(len(labels), 5)
        self.assertLess(len(labels), 60)
        self.assertTrue(all(b - a >= width for a, b in zip(xs, xs[1:])), xs)
        self.assertEqual((labels[0][1], labels[-1][1]), (sha(0)[:7], sha(59)[:7]))

    def test_label_positions(self):
        positions = svg.label_positions
        self.assertEqual(positions(5, 670, 7), [0, 1, 2, 3, 4])
        self.assertEqual(positions(0, 670, 7), [])
        self.assertEqual(positions(1, 670, 7), [0])
        # Every 4th of 40 points (16.75 px apart for 52 px labels); the newest replaces the 36th.
        self.assertEqual(positions(40, 670, 7), [0, 4, 8, 12, 16, 20, 24, 28, 32, 39])
        self.assertEqual(positions(41, 670, 7)[-2:], [36, 40])


if __name__ == "__main__":
    unittest.main()
