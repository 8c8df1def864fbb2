"""`meshgate nightly`: the run, the signal check, the A/B of the last good commit through its
seam, and when the last good commit moves."""

import contextlib
import io
import json
import pathlib
import random
import tempfile
import unittest
from unittest import mock

from meshgate import cli
from meshgate.gate import ab, store
from meshgate.gate.compare import Comparison
from meshgate.gate.verdict import CaseVerdict
from meshgate.run import session
from meshgate.timeline import nightly

from .test_signals import REPO, base_rows, by_id, results_doc, with_timing
from tests.support import once

HEAD = "c" * 40
LAST_GOOD = "a" * 40


class FakeAb:
    """Stands in for `meshgate ab`: records its calls and returns a fixed verdict."""

    def __init__(self, code, summary=None):
        self.code, self.summary = code, summary or {0: "PASS (3 pass)", 1: "FAIL: 1 regression"}.get(code, "unusable")
        self.calls = []

    def __call__(self, base, candidate, out_dir, options):
        self.calls.append((base, candidate, pathlib.Path(out_dir)))
        return nightly.TimingVerdict(self.code, self.summary, pathlib.Path(out_dir) / "report.md")


class NightlyTestCase(unittest.TestCase):
    def setUp(self):
        self._tmp = tempfile.TemporaryDirectory(prefix="meshgate-nightly-")
        self.addCleanup(self._tmp.cleanup)
        self.dir = pathlib.Path(self._tmp.name)
        self.signals_dir = self.dir / "signals"
        store.update_signals_dir(results_doc(base_rows()), self.signals_dir)
        self.state = self.dir / "state" / "last-good.json"
        self.rows = with_timing(base_rows(), factor=1.3)  # what tonight's run records
        self.run_calls = []

    def fake_run(self, request):
        self.run_calls.append(request)
        out_dir = request.out
        out_dir.mkdir(parents=True, exist_ok=True)
        document = results_doc(self.rows, host="nightly-1")
        (out_dir / "results.json").write_text(json.dumps(document))
        (out_dir / "report.md").write_text("# meshgate run n: PASS\n\nfacts\n")
        return session.Execution(0, out_dir, document)

    def record(self, commit):
        nightly.write_state(self.state, commit)

    def go(self, ab, dirty=False, **kw):
        options = nightly.Options(out=self.dir / "out", signals=self.signals_dir, state=self.state,
                                  repo=self.dir, db=self.dir / "history.sqlite", **kw)
        lines = []
        outcome = nightly.nightly(options, run_cases=self.fake_run, ab=ab,
                                  head=lambda repo: (HEAD, dirty), log=lines.append)
        return outcome, "\n".join(lines)

    def state_commit(self):
        return json.loads(self.state.read_text())["commit"] if self.state.exists() else None


class NightlyTest(NightlyTestCase):
    def test_a_regression_from_the_ab_exits_1_and_keeps_the_last_good(self):
        self.record(LAST_GOOD)
        ab = FakeAb(1)
        outcome, log = self.go(ab)
        self.assertEqual(outcome.exit_code, 1)
        self.assertEqual(outcome.signals_code, 0)
        self.assertEqual(ab.calls, [(LAST_GOOD, HEAD, self.dir / "out" / "ab")])
        self.assertEqual(self.state_commit(), LAST_GOOD)
        self.assertFalse(outcome.recorded)
        self.assertIn("timing did not pass", outcome.record_note)
        report = json.loads((self.dir / "out" / "nightly.json").read_text())
        self.assertEqual(report["exit_code"], 1)
        self.assertEqual(report["timing"]["exit_code"], 1)
        self.assertIn("FAIL: 1 regression", (self.dir / "out" / "nightly.md").read_text())

    def test_a_pass_records_head_as_last_good(self):
        self.record(LAST_GOOD)
        ab = FakeAb(0)
        outcome, log = self.go(ab)
        self.assertEqual(outcome.exit_code, 0, log)
        self.assertEqual(len(ab.calls), 1)
        self.assertEqual(self.state_commit(), HEAD)
        self.assertTrue(outcome.recorded)
        self.assertIn(f"{HEAD[:12]} recorded", (self.dir / "out" / "nightly.md").read_text())
        # The next night has nothing to compare while HEAD has not moved.
        ab = FakeAb(1)
        outcome, log = self.go(ab)
        self.assertEqual((outcome.exit_code, ab.calls), (0, []))
        self.assertIn("is the last good commit", log)

    def test_the_first_night_gates_on_signals_only_and_records_head_when_they_pass(self):
        ab = FakeAb(1)
        outcome, log = self.go(ab)
        self.assertEqual(ab.calls, [])
        self.assertIn("first night: no last good commit", log)
        self.assertIn("signals alone decide", (self.dir / "out" / "nightly.md").read_text())
        self.assertEqual(outcome.exit_code, 0)
        self.assertEqual(self.state_commit(), HEAD)

    def test_the_first_night_with_a_changed_plan_fails_and_records_nothing(self):
        by_id(self.rows)["redistribute-x/ppp-to-rrr"]["plan"] = ["all_reduce(A+B, sum)", "all_reduce(C, sum)"]
        outcome, log = self.go(FakeAb(0))
        self.assertEqual(outcome.exit_code, 1)
        self.assertEqual(outcome.signals_code, 1)
        self.assertIsNone(self.state_commit())
        self.assertIn("+all_reduce(A+B, sum)", log)
        run_report = (self.dir / "out" / "run" / "report.md").read_text()
        self.assertIn("## Deterministic signals: FAIL: 1 plan change", run_report)
        self.assertTrue((self.dir / "out" / "run" / "signals-report.md").is_file())

    def test_a_changed_signal_keeps_the_last_good_even_when_timing_passes(self):
        self.record(LAST_GOOD)
        by_id(self.rows)["redistribute-x/s0-to-r"]["metrics"]["bytes_per_rank"] = 1
        outcome, _ = self.go(FakeAb(0))
        self.assertEqual(outcome.exit_code, 1)
        self.assertEqual(self.state_commit(), LAST_GOOD)
        self.assertIn("signals did not pass", outcome.record_note)

    def test_a_new_failure_fails_the_night(self):
        self.record(LAST_GOOD)
        by_id(self.rows)["layout-x/coalesce-a"].update(status="fail", message="wrong layout")
        outcome, _ = self.go(FakeAb(0))
        self.assertEqual(outcome.signals_code, 1)
        self.assertEqual(self.state_commit(), LAST_GOOD)

    def test_an_unusable_ab_exits_2_and_keeps_the_last_good(self):
        self.record(LAST_GOOD)
        outcome, _ = self.go(FakeAb(2))
        self.assertEqual(outcome.exit_code, 2)
        self.assertEqual(self.state_commit(), LAST_GOOD)

    def test_uncommitted_changes_are_not_recorded(self):
        outcome, _ = self.go(FakeAb(0), dirty=True)
        self.assertEqual(outcome.exit_code, 0)
        self.assertIsNone(self.state_commit())
        self.assertIn("uncommitted changes", outcome.record_note)

    def test_no_results_exits_2_without_timing(self):
        ab = FakeAb(0)
        options = nightly.Options(out=self.dir / "out", signals=self.signals_dir, state=self.state, repo=self.dir,
                                  db=self.dir / "history.sqlite")
        outcome = nightly.nightly(options, run_cases=lambda request: session.Execution(2), ab=ab,
                                  head=lambda repo: (HEAD, False), log=lambda *_: None)
        self.assertEqual((outcome.exit_code, ab.calls), (2, []))
        self.assertIsNone(self.state_commit())

    def test_last_good_option_overrides_the_state(self):
        self.record(LAST_GOOD)
        ab = FakeAb(0)
        with mock.patch.object(nightly, "resolve", return_value="b" * 40) as resolve:
            outcome, _ = self.go(ab, last_good="v0.3")
        resolve.assert_called_once_with(self.dir, "v0.3")
        self.assertEqual(ab.calls[0][0], "b" * 40)
        self.assertEqual(outcome.last_good_source, "--last-good")
        self.assertEqual(self.state_commit(), HEAD)

    def test_a_broken_state_file_is_unusable_input(self):
        self.state.parent.mkdir(parents=True)
        self.state.write_text("{not json")
        with self.assertRaises(nightly.NightlyError) as e:
            self.go(FakeAb(0))
        self.assertIn("--last-good", str(e.exception))

    def test_the_run_covers_every_case_with_the_options(self):
        self.go(FakeAb(0), backend="mpi", ranks=8, case_timeout=60.0)
        request = self.run_calls[0]
        self.assertEqual(request.cases, [str(self.dir / "cases")])
        self.assertEqual((request.suites, request.tags, request.case_patterns), ([], [], []))
        self.assertEqual((request.backend, request.ranks, request.case_timeout, request.impl, request.preset),
                         ("mpi", 8, 60.0, None, None))


class AbRegressionTest(NightlyTestCase):
    """A confirmed regression of the timing A/B is named in nightly.md and bisected."""

    SLOW = "collectives-x/all-reduce-4"

    def ab_with_regression(self):
        ab = FakeAb(1, "confirmed regression or correctness failure (4 pass, 1 regression, 1 inconclusive)")

        def call(base, candidate, out_dir, options):
            verdict = ab(base, candidate, out_dir, options)
            verdict.regressing = [nightly.Regressing(self.SLOW, "regression",
                                                     "slower by 9.1 % (gate 2.0 %), p = 8.2e-05, q = 0.00049, "
                                                     "95 % CI [1.071, 1.113]", confirmed=True, ratio=1.091, p=8.2e-05)]
            return verdict
        return call

    def test_a_confirmed_regression_is_named_and_bisected(self):
        self.record(LAST_GOOD)
        bisect = FakeBisect(0)
        options = nightly.Options(out=self.dir / "out", signals=self.signals_dir, state=self.state,
                                  repo=self.dir, db=self.dir / "history.sqlite")
        outcome = nightly.nightly(options, run_cases=self.fake_run, ab=self.ab_with_regression(),
                                  head=lambda repo: (HEAD, False), log=lambda *_: None, bisect=bisect)
        self.assertEqual(bisect.calls, [(LAST_GOOD, HEAD, self.SLOW)])
        self.assertEqual(outcome.exit_code, 1)
        report = (self.dir / "out" / "nightly.md").read_text()
        self.assertIn(f"  - `{self.SLOW}`: regression: slower by 9.1 % (gate 2.0 %)", report)
        self.assertIn("## Confirmed regressions of the A/B, bisected", report)
        self.assertIn("bisect-ab-1/revert.md", report)
        self.assertIn(f"culprit {HEAD[:12]}", report)
        data = json.loads((self.dir / "out" / "nightly.json").read_text())
        self.assertEqual(data["timing"]["regressing"][0]["case"], self.SLOW)
        self.assertEqual(data["timing"]["bisections"][0]["culprit"], HEAD)

    def test_no_bisect_prints_the_exact_bisect_command(self):
        self.record(LAST_GOOD)
        bisect = FakeBisect(0)
        options = nightly.Options(out=self.dir / "out", signals=self.signals_dir, state=self.state,
                                  repo=self.dir, db=self.dir / "history.sqlite", bisect=False, runs=15,
                                  backend="mpi", ranks=4)
        lines = []
        nightly.nightly(options, run_cases=self.fake_run, ab=self.ab_with_regression(),
                        head=lambda repo: (HEAD, False), log=lines.append, bisect=bisect)
        self.assertEqual(bisect.calls, [])
        command = (f"meshgate bisect --good {LAST_GOOD} --bad {HEAD} --case {self.SLOW} "
                   f"--backend mpi --ranks 4 --runs 15")
        self.assertIn(command, "\n".join(lines))
        self.assertIn(f"`{command}`", (self.dir / "out" / "nightly.md").read_text())
        self.assertEqual(nightly.bisect_command(LAST_GOOD, HEAD, self.SLOW, options), command)


class RealAbCommandTest(unittest.TestCase):
    def test_the_ab_runs_meshgate_ab_on_the_perf_cases(self):
        options = nightly.Options(backend="threads", runs=15, cases=["cases/perf"])
        out = pathlib.Path("/tmp/x")
        request = nightly.ab_request(LAST_GOOD, HEAD, out, options)
        self.assertEqual((request.base, request.candidate, request.cases.tags, request.out),
                         (LAST_GOOD, HEAD, (), out))  # ab's own selection: every perf: case
        self.assertEqual((request.backend, request.ranks, request.impl, request.runs, request.preset,
                          request.cases.cases, request.cases.suites, request.cases.case_patterns),
                         ("threads", None, None, 15, None, ["cases/perf"], (), ()))

    def test_the_verdict_comes_from_the_ab_exit_code_and_comparison(self):
        with tempfile.TemporaryDirectory() as tmp:
            out = pathlib.Path(tmp)

            def fake_ab(request):
                (out / "report.md").write_text("# x\n")
                comparison = Comparison([CaseVerdict("s/a", "pass"), CaseVerdict("s/b", "pass"),
                                         CaseVerdict("s/c", "regression")])
                return ab.AbOutcome(1, comparison, {}, out)

            with mock.patch("meshgate.gate.ab.run_request", side_effect=fake_ab) as run, \
                    contextlib.redirect_stdout(io.StringIO()):
                verdict = nightly.run_ab(LAST_GOOD, HEAD, out, nightly.Options())
            request = run.call_args[0][0]
            self.assertEqual((request.base, request.candidate), (LAST_GOOD, HEAD))
            self.assertEqual(verdict.code, 1)
            self.assertIn("2 pass, 1 regression", verdict.summary)
            self.assertEqual(verdict.report, out / "report.md")
            self.assertEqual([(r.case, r.verdict) for r in verdict.regressing], [("s/c", "regression")])

    def test_every_regressing_case_is_named_with_its_verdict_line(self):
        comparison = Comparison([
            CaseVerdict("s/a", "pass"),
            CaseVerdict("s/b", "regression", note="slower by 6.0 % (gate 2.0 %), p = 0.0001", confirmed=True),
            CaseVerdict("s/c", "correctness", note="pass -> fail", message="wrong layout"),
            CaseVerdict("s/d", "inconclusive", note="not significant")])
        found = nightly.regressing_cases(comparison)
        self.assertEqual([(r.case, r.verdict, r.line, r.confirmed) for r in found],
                         [("s/b", "regression", "slower by 6.0 % (gate 2.0 %), p = 0.0001", True),
                          ("s/c", "correctness", "pass -> fail", False)])


class FakeBisect:
    """Stands in for `meshgate bisect`: records its calls, names the first bad commit."""

    def __init__(self, code=0):
        self.code, self.calls = code, []

    def __call__(self, good, bad, case_id, out_dir, options):
        self.calls.append((good, bad, case_id))
        out_dir.mkdir(parents=True, exist_ok=True)
        (out_dir / "revert.md").write_text(f"# revert {bad}\n")
        return self.code, {"good": good, "bad": bad, "culprit": bad if self.code == 0 else None}


@once("nights of real runs and a bisection")
class HistoryTest(NightlyTestCase):
    """Night after night through history: a step in one case becomes a change point once, is
    bisected once between its last good and first bad commit, and fails that night."""

    STEP_NIGHT = 10
    NIGHTS = 22
    SLOW = "collectives-x/all-reduce-4"

    def night(self, n, bisect, enable_bisect=True):
        commit = f"{n:040x}"
        rng = random.Random(n)

        def run(request):
            out_dir = request.out
            rows = with_timing(base_rows())
            for r in rows:
                if r["status"] != "pass":
                    continue
                step = 1.3 if (r["id"] == self.SLOW and n >= self.STEP_NIGHT) else 1.0
                r["samples"] = {"time_s": [[1e-4 * step * (1 + rng.gauss(0, 0.01))] * 5 for _ in range(3)]}
            doc = results_doc(rows, host="nightly-1", started=f"2026-11-{n:02d}T02:00:00Z")
            doc["run"].update(id=f"nightly-{n}", commit=commit)
            out_dir.mkdir(parents=True, exist_ok=True)
            (out_dir / "results.json").write_text(json.dumps(doc))
            return session.Execution(0, out_dir, doc)

        options = nightly.Options(out=self.dir / f"out-{n}", signals=self.signals_dir, state=self.state,
                                  repo=self.dir, db=self.dir / "history.sqlite", bisect=enable_bisect)
        return nightly.nightly(options, run_cases=run, ab=FakeAb(0), head=lambda repo: (commit, False),
                               log=lambda *_: None, bisect=bisect)

    def test_a_new_change_point_is_bisected_once_and_fails_the_night(self):
        bisect = FakeBisect(0)
        codes = [self.night(n, bisect).exit_code for n in range(1, self.NIGHTS + 1)]
        self.assertEqual(bisect.calls, [(f"{self.STEP_NIGHT - 1:040x}", f"{self.STEP_NIGHT:040x}", self.SLOW)])
        found_on = next(i for i, c in enumerate(codes, 1) if c == 1)
        self.assertTrue(all(c == 0 for c in codes[:found_on - 1]), codes)
        self.assertTrue(all(c == 0 for c in codes[found_on:]), codes)  # handled: not again
        report = (self.dir / f"out-{found_on}" / "nightly.md").read_text()
        self.assertIn("## New change points", report)
        self.assertIn(f"`{self.SLOW}` | slower", report)
        self.assertIn("bisect-1/revert.md", report)
        data = json.loads((self.dir / f"out-{found_on}" / "nightly.json").read_text())
        self.assertEqual(data["history"]["bisections"][0]["culprit"], f"{self.STEP_NIGHT:040x}")
        self.assertTrue(nightly.handled_path(self.dir / "history.sqlite").exists())

    def test_no_bisect_reports_without_bisecting(self):
        bisect = FakeBisect(0)
        outcomes = [self.night(n, bisect, enable_bisect=False) for n in range(1, self.NIGHTS + 1)]
        self.assertEqual(bisect.calls, [])
        notes = [b.note for o in outcomes for b in o.bisections]
        self.assertIn("not bisected (--no-bisect)", notes)
        self.assertTrue(all(o.exit_code == 0 for o in outcomes))

    def test_bisect_request_follows_the_contract(self):
        out = pathlib.Path("/tmp/x")
        request = nightly.bisect_request("a" * 40, "b" * 40, "s/c", out, nightly.Options(runs=5, preset="cpu"))
        self.assertEqual((request.good, request.bad, request.cases.case_patterns, request.out, request.json),
                         ("a" * 40, "b" * 40, ["s/c"], out, out / "bisect.json"))
        self.assertEqual((request.runs, request.preset), (5, "cpu"))


class CommandLineTest(NightlyTestCase):
    def test_meshgate_nightly_is_registered_and_passes_its_options(self):
        seen = {}

        def fake_nightly(options):
            seen["options"] = options
            return nightly.Outcome(head=HEAD, dirty=False, out=self.dir, run_code=0, signals_code=0)

        out = io.StringIO()
        with mock.patch.object(nightly, "nightly", side_effect=fake_nightly), contextlib.redirect_stdout(out):
            code = cli.main(["nightly", "--state", str(self.state), "--last-good", "HEAD~3", "--runs", "5",
                             "--signals", str(self.signals_dir), "--out", str(self.dir / "o")])
        self.assertEqual(code, 0)
        options = seen["options"]
        self.assertEqual((options.state, options.last_good, options.runs), (self.state, "HEAD~3", 5))
        self.assertEqual(options.signals, self.signals_dir)

    def test_ci_nightly_is_a_thin_wrapper(self):
        script = (REPO / "ci" / "nightly").read_text()
        self.assertIn('exec ./meshgate nightly "$@"', script)
        self.assertEqual(nightly.default_state(), REPO / "reports" / "nightly" / "last-good.json")


if __name__ == "__main__":
    unittest.main()
