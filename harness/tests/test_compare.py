"""compare: verdicts over the recorded fixtures base.json / new.json (tests/fixtures/gate/).

Recorded truth of the fixtures: all-reduce-8MiB 12 % slower, gemm/bias-1024 12 % faster with a
changed algorithm, prp-to-rrr unchanged in time but with a different plan, s0-to-r 2.5 % slower
with only 3 new runs, coalesce-a pass -> fail, removed-case only in base, new-case only in new.
"""

import argparse
import contextlib
import io
import json
import pathlib
import sys
import tempfile
import unittest
import unittest.mock

from meshgate.commands import baseline as baseline_command
from meshgate.commands import compare as compare_command
from meshgate.commands import options
from meshgate.core import files
from meshgate.gate import checks, compare, render, store, verdict
from tests.test_signals import results_doc, row as signal_row

FIXTURES = pathlib.Path(__file__).parent / "fixtures" / "gate"


def load(name):
    return json.loads((FIXTURES / name).read_text())


def compare_with_baseline(results_path, baseline_dir, out_dir):
    """`meshgate run --baseline`'s timing comparison (checks.compare_with_baseline) of a results
    file, its lines printed as the run prints them; the exit code."""
    found = checks.compare_with_baseline(json.loads(pathlib.Path(results_path).read_text()), results_path,
                                         baseline_dir, out_dir)
    for line in found.errors:
        print(line, file=sys.stderr)
    for line in found.lines:
        print(line)
    return found.code


def run_cli(argv):
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="command", required=True)
    compare_command.register(sub)
    baseline_command.register(sub)
    args = parser.parse_args(argv)
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = args.func(args)
    return code, out.getvalue(), err.getvalue()


class CompareFixturesTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.comparison = compare.compare_results(load("base.json"), load("new.json"))
        cls.by_id = {c.id: c for c in cls.comparison.cases}

    def test_verdict_per_case(self):
        want = {
            "collectives/all-reduce-8MiB": "regression",
            "collectives/all-gather-sweep": "inconclusive",
            "gemm/bias-1024": "improvement",
            "redistribute/prp-to-rrr": "pass",
            "redistribute/s0-to-r": "inconclusive",
            "layout/coalesce-a": "correctness",
            "layout/removed-case": "missing",
            "mesh/flatten-dp-tp": "pass",
            "mesh/new-case": "new",
        }
        self.assertEqual({i: c.verdict for i, c in self.by_id.items()}, want)

    def test_regression_evidence(self):
        v = self.by_id["collectives/all-reduce-8MiB"]
        self.assertGreater(v.ratio, 1.08)
        self.assertLess(v.ratio, 1.16)
        self.assertLess(v.ci[0], v.ratio)
        self.assertGreater(v.ci[1], v.ratio)
        self.assertGreater(v.ci[0], 1.02)  # the whole CI is past the gate
        self.assertLess(v.p, 0.001)
        self.assertEqual((v.runs_base, v.runs_new), (9, 9))
        self.assertEqual(v.min_effect, 0.02)

    def test_inconclusive_says_how_many_runs(self):
        v = self.by_id["redistribute/s0-to-r"]
        self.assertEqual((v.runs_base, v.runs_new), (9, 3))
        self.assertGreater(v.runs_needed, 3)
        self.assertIn("past the 2.0 % gate but not significant", v.note)
        self.assertIn(f"need ~{v.runs_needed} runs per side", v.note)

    def test_a_point_ratio_inside_the_gate_with_a_ci_past_it_is_not_a_pass(self):
        # 0.2 % slower, but the CI reaches 2.5 %: "no regression >= 2 %" is not supported.
        v = self.by_id["collectives/all-gather-sweep"]
        self.assertLess(v.ratio, 1.02)
        self.assertGreater(v.ci[1], 1.02)
        self.assertEqual(v.verdict, "inconclusive")
        self.assertIn("the CI reaches 2.5 % slower", v.note)
        self.assertGreater(v.runs_needed, 9)  # more than it had: advice never below the runs that failed

    def test_pass_rows_say_what_they_rule_out(self):
        v = self.by_id["redistribute/prp-to-rrr"]
        self.assertEqual(v.verdict, "pass")
        self.assertAlmostEqual(v.rules_out, v.ci[1] - 1.0)
        self.assertIn("rules out a slowdown of 0.7 % or more", v.note)

    def test_plan_changes_are_reported_beside_timing(self):
        changed = {c.id for c in self.comparison.plan_changes()}
        self.assertEqual(changed, {"gemm/bias-1024", "redistribute/prp-to-rrr"})
        v = self.by_id["redistribute/prp-to-rrr"]
        self.assertEqual(v.plan_base, ["all_reduce(A+C, sum)"])
        self.assertEqual(v.plan_new, ["all_reduce(A, sum)", "all_reduce(C, sum)"])

    def test_cache_markers_and_gpu_algorithms_are_not_plan_changes(self):
        row = lambda plan: {"schema": "meshgate.results/1", "run": {}, "cases": [
            {"id": "gemm/a", "kind": "gemm", "status": "pass", "plan": plan}]}
        same = compare.compare_results(row(["lt_epilogue: cublasLt, algo 3, splitK 1"]),
                                       row(["lt_epilogue: cublasLt, algo 7, splitK 2 (cached)"]))
        self.assertFalse(same.cases[0].plan_changed)
        other = compare.compare_results(row(["lt_epilogue: cublasLt"]), row(["unfused: cublasLt + bias kernel"]))
        self.assertTrue(other.cases[0].plan_changed)

    def test_correctness_is_never_hidden(self):
        v = self.by_id["layout/coalesce-a"]
        self.assertEqual(v.note, "pass -> fail")
        self.assertIn("expected (2,6):(1,2)", v.message)
        self.assertEqual(self.comparison.exit_code(), 1)

    def test_bootstrap_is_seeded(self):
        again = compare.compare_results(load("base.json"), load("new.json"))
        self.assertEqual([c.ci for c in again.cases], [c.ci for c in self.comparison.cases])

    def test_verdicts_json_shape(self):
        doc = compare.verdicts_json(self.comparison)
        row = next(r for r in doc["cases"] if r["id"] == "collectives/all-reduce-8MiB")
        self.assertEqual(row["verdict"], "regression")
        self.assertEqual(len(row["ci"]), 2)
        self.assertIsInstance(row["p"], float)
        self.assertIsInstance(row["ratio"], float)
        json.dumps(doc)


class CompareRulesTest(unittest.TestCase):
    def doc(self, rows):
        return {"schema": "meshgate.results/1", "run": {}, "cases": rows}

    def timed(self, case_id, medians, status="pass", plan=None):
        return {
            "id": case_id,
            "status": status,
            "message": "",
            "plan": plan or [],
            "samples": {"time_s": [[m, m, m] for m in medians]},
        }

    def test_identical_results_pass_and_exit_zero(self):
        base = self.doc([self.timed("s/a", [1.0, 1.01, 0.99, 1.0, 1.02, 0.98, 1.0, 1.01, 0.99])])
        c = compare.compare_results(base, base)
        self.assertEqual(c.cases[0].verdict, "pass")
        self.assertEqual(c.exit_code(), 0)

    def test_calibrated_noise_floor_raises_the_gate(self):
        base = [1.0 + 0.001 * i for i in range(9)]
        new = [1.04 + 0.001 * i for i in range(9)]  # 4 % slower, completely separated
        b, n = self.doc([self.timed("s/a", base)]), self.doc([self.timed("s/a", new)])
        self.assertEqual(compare.compare_results(b, n).cases[0].verdict, "regression")
        calibrated = compare.compare_results(b, n, noise_floors={"s/a": 0.02})
        v = calibrated.cases[0]
        self.assertAlmostEqual(v.min_effect, 0.06)
        self.assertEqual(v.verdict, "pass")  # a real but smaller change than the runner's gate
        self.assertIn("within the 6.0 % gate", v.note)
        self.assertEqual(calibrated.exit_code(), 0)

    def test_impractical_run_counts_are_called_so(self):
        # Just under the gate, the CI reaching well past it: narrowing it would take hundreds.
        b = self.doc([self.timed("s/a", [1.00, 1.01, 0.99, 1.00, 1.02, 0.98, 1.00, 1.01, 0.99])])
        n = self.doc([self.timed("s/a", [1.018, 1.00, 1.035, 1.017, 1.045, 0.99, 1.018, 1.03, 1.005])])
        v = compare.compare_results(b, n).cases[0]
        self.assertEqual(v.verdict, "inconclusive")
        self.assertGreater(v.runs_needed, verdict.PRACTICAL_RUNS)
        self.assertIn("more than is practical", v.note)

    def test_benjamini_hochberg_across_cases(self):
        # One case with p = 1/252 among many unchanged ones: BH pushes q above 0.05.
        rows_b, rows_n = [], []
        for i in range(80):
            rows_b.append(self.timed(f"s/c{i}", [1.0 + 0.01 * ((j * 7 + i) % 9) for j in range(5)]))
            rows_n.append(self.timed(f"s/c{i}", [1.0 + 0.01 * ((j * 5 + i) % 9) for j in range(5)]))
        rows_b.append(self.timed("s/x", [1.00, 1.01, 1.02, 1.03, 1.04]))
        rows_n.append(self.timed("s/x", [1.10, 1.11, 1.12, 1.13, 1.14]))
        c = compare.compare_results(self.doc(rows_b), self.doc(rows_n))
        x = next(v for v in c.cases if v.id == "s/x")
        self.assertAlmostEqual(x.p, 2 / 252)  # two-sided into BH
        self.assertGreater(x.q, 0.05)
        self.assertEqual(x.verdict, "inconclusive")
        alone = compare.compare_results(self.doc(rows_b[-1:]), self.doc(rows_n[-1:]))
        self.assertEqual(alone.cases[0].verdict, "regression")

    def test_error_in_new_run_is_correctness(self):
        b = self.doc([self.timed("s/a", [1.0] * 5)])
        n = self.doc([dict(self.timed("s/a", []), status="error", message="rank 1: timeout")])
        v = compare.compare_results(b, n).cases[0]
        self.assertEqual((v.verdict, v.note), ("correctness", "pass -> error"))

    def test_skip_in_new_run_is_missing(self):
        b = self.doc([self.timed("s/a", [1.0] * 5)])
        n = self.doc([dict(self.timed("s/a", []), status="skip", message="needs 16 ranks")])
        v = compare.compare_results(b, n).cases[0]
        self.assertEqual(v.verdict, "missing")
        self.assertIn("needs 16 ranks", v.note)

    def test_too_few_runs_cannot_pass_a_wide_interval(self):
        b = self.doc([self.timed("s/a", [1.00, 0.99, 1.01])])
        n = self.doc([self.timed("s/a", [1.01, 1.00, 1.025])])
        v = compare.compare_results(b, n).cases[0]
        self.assertEqual(v.verdict, "inconclusive")
        self.assertIn("3 vs 3 runs can never reach alpha = 0.01", v.note)
        self.assertGreaterEqual(v.runs_needed, 5)
        # Runs that could never flag a regression cannot rule one out either, however close:
        # one run a side has a CI of width zero.
        for base, new in (([1.0], [1.0]), ([1.0, 1.001], [1.0, 1.002]), ([1.0] * 4, [1.0] * 4)):
            v = compare.compare_results(self.doc([self.timed("s/a", base)]), self.doc([self.timed("s/a", new)])).cases[0]
            self.assertEqual(v.verdict, "inconclusive", (base, new))
            self.assertIn("can never reach alpha", v.note)
            self.assertEqual(v.runs_needed, 5)
        enough = compare.compare_results(self.doc([self.timed("s/a", [1.0] * 5)]), self.doc([self.timed("s/a", [1.0] * 5)]))
        self.assertEqual(enough.cases[0].verdict, "pass")

    def test_headline_says_pass_only_when_every_judged_case_passed(self):
        five = [1.0, 1.01, 0.99, 1.0, 1.005]
        skipped = dict(self.timed("s/skip", []), status="skip", message="needs 16 ranks")
        base = self.doc([self.timed("s/a", five), skipped, self.timed("s/gone", five)])
        c = compare.compare_results(base, self.doc([self.timed("s/a", five), skipped, self.timed("s/gone", five)]))
        self.assertEqual([v.verdict for v in c.cases], ["pass", "skip", "pass"])
        self.assertEqual(c.cases[1].note, "skipped on both sides")
        self.assertEqual((c.headline(), c.exit_code()), ("PASS", 0))
        # One run of the new side: nothing can be judged, and nothing passed.
        c = compare.compare_results(base, self.doc([self.timed("s/a", [1.0]), skipped]))
        self.assertEqual([v.verdict for v in c.cases], ["inconclusive", "skip", "missing"])
        self.assertEqual(c.headline(), "INCONCLUSIVE: 1 inconclusive, 1 missing, no regression found")
        self.assertEqual((c.headline_class(), c.exit_code()), ("INCONCLUSIVE", 0))
        c = compare.compare_results(base, self.doc([self.timed("s/a", [1.3] * 5), skipped]))
        self.assertEqual((c.headline(), c.exit_code()), ("FAIL: 1 regression", 1))
        # The summary line adds the counts the headline does not already give.
        self.assertEqual(render.summary_line(c), "compare: FAIL: 1 regression (1 missing, 1 skip)")
        c = compare.compare_results(self.doc([self.timed("s/a", five)]), self.doc([self.timed("s/a", [1.3] * 5)]))
        self.assertEqual(render.summary_line(c), "compare: FAIL: 1 regression")
        c = compare.compare_results(base, self.doc([self.timed("s/a", [1.0]), skipped]))
        self.assertEqual(render.summary_line(c),
                         "compare: INCONCLUSIVE: 1 inconclusive, 1 missing, no regression found (1 skip)")

    def test_cases_skipped_on_both_sides_fold_into_one_line_per_suite_and_reason(self):
        five = [1.0, 1.01, 0.99, 1.0, 1.005]
        rows = [dict(self.timed(f"gemm-cuda/c{i}", []), status="skip", message="no CUDA device present")
                for i in range(39)]
        rows.append(dict(self.timed("mesh/big", []), status="skip", message="needs 16 ranks"))
        doc = self.doc([self.timed("s/a", five)] + rows)
        table = render.format_table(compare.compare_results(doc, doc))
        self.assertIn("gemm-cuda: 39 cases skipped on both sides (no CUDA device present)", table)
        self.assertIn("mesh: 1 case skipped on both sides (needs 16 ranks)", table)
        self.assertNotIn("gemm-cuda/c1", table)
        self.assertLess(len(table.splitlines()), 8)

    def test_headline_states_the_revert_grade_where_one_was_judged(self):
        five = [1.0, 1.01, 0.99, 1.0, 1.005]
        c = compare.compare_results(self.doc([self.timed("s/a", five)]), self.doc([self.timed("s/a", [1.3] * 5)]))
        c.cases[0].grade, c.cases[0].grade_note = "not revert-grade", "the first batch's CI reaches below the gate"
        self.assertEqual(c.headline(), "FAIL: 1 regression (not revert-grade)")
        self.assertEqual(compare.verdicts_json(c)["cases"][0]["level"], "regression, not revert-grade")

    def test_table_columns_stay_aligned_for_long_ids(self):
        long_id = "redistribute-flattened/" + "x" * 60
        five = [1.0, 1.01, 0.99, 1.0, 1.005]
        c = compare.compare_results(self.doc([self.timed(long_id, five), self.timed("s/a", five)]),
                                    self.doc([self.timed(long_id, five), self.timed("s/a", five)]))
        header, *rows = [line for line in render.format_table(c).splitlines() if not line.startswith(" ")][:3]
        self.assertEqual({line.index("pass") for line in rows}, {header.index("verdict")})

    def test_a_max_gate_below_the_minimum_effect_is_named_as_such(self):
        v = verdict.judge([1.0, 1.01, 0.99, 1.0, 1.005], [1.0, 1.01, 0.99, 1.0, 1.005], max_gate=0.01)
        self.assertEqual(v.verdict, "inconclusive")
        self.assertIn("the 2.0 % minimum effect is wider than --max-gate 1.0 %", v.note)
        self.assertEqual(options.max_gate_fraction("5%"), 0.05)
        for text in ("1", "1%", "0.01"):
            with self.assertRaisesRegex(argparse.ArgumentTypeError, "minimum effect"):
                options.max_gate_fraction(text)

    def test_zero_time_is_inconclusive_not_a_crash(self):
        b = self.doc([self.timed("s/a", [0.0] * 5)])
        n = self.doc([self.timed("s/a", [1.0] * 5)])
        v = compare.compare_results(b, n).cases[0]
        self.assertEqual(v.verdict, "inconclusive")
        self.assertIn("zero", v.note)

    def test_single_run_rows_use_metrics_median(self):
        row = {"id": "s/a", "status": "pass", "metrics": {"time_s": {"median": 2.5}}}
        self.assertEqual(compare.run_medians(row), [2.5])
        self.assertEqual(compare.run_medians({"samples": {"time_s": [[1, 3, 2], [4, 5, 6]]}}), [2, 5])


class CompareCliTest(unittest.TestCase):
    def test_exit_codes_and_json(self):
        with tempfile.TemporaryDirectory() as tmp:
            verdicts = pathlib.Path(tmp) / "v.json"
            out = pathlib.Path(tmp) / "report"
            code, stdout, _ = run_cli(
                ["compare", str(FIXTURES / "base.json"), str(FIXTURES / "new.json"), "--json", str(verdicts), "--out", str(out),
                 "--trust-separate-runs"]
            )
            self.assertEqual(code, 1)
            self.assertIn("FAIL: 1 regression, 1 correctness failure", stdout)
            doc = json.loads(verdicts.read_text())
            self.assertEqual({r["id"]: r["verdict"] for r in doc["cases"]}["gemm/bias-1024"], "improvement")
            for name in ("report.md", "junit.xml", "report.html", "results.json", "comparison.json"):
                self.assertTrue((out / name).is_file(), name)

            code, _, _ = run_cli(["compare", str(FIXTURES / "base.json"), str(FIXTURES / "base.json"), "--out", str(out)])
            self.assertEqual(code, 0)

    def test_results_with_no_case_in_common_are_unusable(self):
        with tempfile.TemporaryDirectory() as tmp:
            other = json.loads((FIXTURES / "new.json").read_text())
            for row in other["cases"]:
                row["id"] = "renamed-" + row["id"]
            renamed = pathlib.Path(tmp) / "renamed.json"
            renamed.write_text(json.dumps(other))
            code, _, err = run_cli(["compare", str(FIXTURES / "base.json"), str(renamed),
                                    "--out", tmp])
            self.assertEqual(code, 2)
            self.assertIn("nothing to compare", err)
            self.assertIn("have no case in common", err)

    def test_separate_runs_are_compared_with_a_warning_pointing_at_ab(self):
        with tempfile.TemporaryDirectory() as tmp:
            code, _, err = run_cli(["compare", str(FIXTURES / "base.json"),
                                    str(FIXTURES / "new.json"), "--out", tmp])
            self.assertEqual(code, 1)  # the correctness failure, not the timing
            self.assertIn("come from separate runs", err)
            self.assertIn("`meshgate ab` interleaves the two builds", err)

    def test_separate_runs_never_fail_on_timing_alone(self):
        # Two separate runs of the same code whose medians differ by the machine's drift: the
        # rule would call it a regression, compare of separate runs holds it back.
        case = signal_row("s/a", "collective")
        case["samples"] = {"time_s": [[1.0 + 0.001 * i] for i in range(9)]}
        base = results_doc([case])
        base["run"]["id"] = "20261126-101500-59fa4d3"
        new = json.loads(json.dumps(base))
        new["run"]["id"] = "20261126-111500-59fa4d3"
        new["cases"][0]["samples"]["time_s"] = [[1.06 + 0.001 * i] for i in range(9)]
        with tempfile.TemporaryDirectory() as tmp:
            tmp = pathlib.Path(tmp)
            (tmp / "a.json").write_text(json.dumps(base))
            (tmp / "b.json").write_text(json.dumps(new))
            events = []
            real_print = print

            def recording_print(*args, **kwargs):
                events.append("stderr" if kwargs.get("file") is sys.stderr else "stdout")
                real_print(*args, **kwargs)

            with unittest.mock.patch("builtins.print", recording_print):
                code, out, err = run_cli(["compare", str(tmp / "a.json"), str(tmp / "b.json"),
                                          "--json", str(tmp / "v.json"), "--out", str(tmp / "r")])
            self.assertEqual(code, 0, out + err)
            self.assertEqual(events[0], "stderr", "the separate-runs warning comes first")
            self.assertIn("come from separate runs", err)
            self.assertIn("--trust-separate-runs", err)
            self.assertIn("inconclusive (separate runs)", out)
            self.assertIn("INCONCLUSIVE", out)
            doc = json.loads((tmp / "v.json").read_text())
            self.assertTrue(doc["separate_runs"])
            row = doc["cases"][0]
            self.assertEqual((row["verdict"], row["level"], row["separate_verdict"]),
                             ("inconclusive", "inconclusive (separate runs)", "regression"))
            self.assertIn("inconclusive (separate runs)", (tmp / "r" / "report.md").read_text())
            self.assertIn("**Separate runs.**", (tmp / "r" / "report.md").read_text())
            from meshgate.core import schema as schema_module
            schema_module.check(doc, "verdicts-1", tmp / "v.json")

            code, out, _ = run_cli(["compare", str(tmp / "a.json"), str(tmp / "b.json"),
                                    "--trust-separate-runs", "--out", str(tmp / "r2")])
            self.assertEqual(code, 1)
            self.assertIn("FAIL: 1 regression", out)
        self.assertTrue(compare.interleaved({"id": "ab-20261126-101500-base-1"},
                                            {"id": "ab-20261126-101500-candidate-3"}))
        self.assertFalse(compare.interleaved({"id": "ab-20261126-101500-base-1"},
                                             {"id": "ab-20261126-111500-candidate-1"}))
        self.assertTrue(compare.interleaved({"id": "base-1"}, {"id": "base-1"}))
        self.assertFalse(compare.interleaved({"id": "20261126-101500-59fa4d3"},
                                             {"id": "20261126-111500-59fa4d3"}))

    def test_default_report_folders_of_the_same_second_differ(self):
        with tempfile.TemporaryDirectory() as tmp, \
                unittest.mock.patch.object(files, "source_root", return_value=pathlib.Path(tmp)):
            folders = [files.default_report_dir("compare") for _ in range(3)]
            self.assertEqual(len(set(folders)), 3, folders)
            self.assertTrue(all(f.is_dir() and f.parent == pathlib.Path(tmp) / "reports" for f in folders))

    def test_unusable_input_exits_2_naming_the_file(self):
        with tempfile.TemporaryDirectory() as tmp:
            bad = pathlib.Path(tmp) / "bad.json"
            bad.write_text("{not json")
            code, _, err = run_cli(["compare", str(FIXTURES / "base.json"), str(bad), "--out", tmp])
            self.assertEqual(code, 2)
            self.assertIn(str(bad), err)
            wrong = pathlib.Path(tmp) / "wrong.json"
            wrong.write_text(json.dumps({"schema": "other/1", "cases": []}))
            code, _, err = run_cli(["compare", str(wrong), str(FIXTURES / "new.json"), "--out", tmp])
            self.assertEqual(code, 2)
            self.assertIn("wrong.json: schema is 'other/1'", err)
            code, _, err = run_cli(["compare", str(pathlib.Path(tmp) / "absent.json"), str(FIXTURES / "new.json"), "--out", tmp])
            self.assertEqual(code, 2)
            self.assertIn("absent.json", err)


class CompareWithBaselineTest(unittest.TestCase):
    def test_run_against_baseline_dir(self):
        with tempfile.TemporaryDirectory() as tmp:
            root = pathlib.Path(tmp) / "baselines"
            written = store.update_baseline(FIXTURES / "base.json", root)
            mclass_dir = written[0].parent
            out = pathlib.Path(tmp) / "run"
            with contextlib.redirect_stdout(io.StringIO()):
                code = compare_with_baseline(FIXTURES / "new.json", mclass_dir, out)
            self.assertEqual(code, 1)
            doc = json.loads((out / "baseline-comparison.json").read_text())
            verdicts = {c["id"]: c["verdict"] for c in doc["cases"]}
            self.assertEqual(verdicts["collectives/all-reduce-8MiB"], "regression")
            self.assertEqual(verdicts["mesh/new-case"], "new")
            self.assertTrue((out / "baseline-report.md").read_text().startswith("# meshgate run --baseline: FAIL"))
            self.assertTrue((out / "baseline-junit.xml").is_file())

    def test_baselines_root_resolves_to_this_machine_class(self):
        with tempfile.TemporaryDirectory() as tmp:
            root = pathlib.Path(tmp) / "baselines"
            store.update_baseline(FIXTURES / "base.json", root)
            with contextlib.redirect_stdout(io.StringIO()):
                code = compare_with_baseline(FIXTURES / "new.json", root, pathlib.Path(tmp) / "out")
            self.assertEqual(code, 1)
            doc = json.loads((pathlib.Path(tmp) / "out" / "baseline-comparison.json").read_text())
            self.assertEqual(doc["counts"]["regression"], 1)

    def test_suites_without_baseline_are_new_and_calibration_applies(self):
        with tempfile.TemporaryDirectory() as tmp:
            bdir = pathlib.Path(tmp) / "b"
            bdir.mkdir()
            base = load("base.json")
            only_collectives = dict(base, cases=[r for r in base["cases"] if r["suite"] == "collectives"])
            (bdir / "collectives.json").write_text(json.dumps(only_collectives))
            (bdir / "calibration.json").write_text(
                json.dumps({"schema": "meshgate.calibration/1", "cases": {"collectives/all-reduce-8MiB": {"noise_floor": 0.05}}})
            )
            with contextlib.redirect_stdout(io.StringIO()):
                code = compare_with_baseline(FIXTURES / "new.json", bdir, pathlib.Path(tmp) / "out")
            doc = json.loads((pathlib.Path(tmp) / "out" / "baseline-comparison.json").read_text())
            verdicts = {c["id"]: c for c in doc["cases"]}
            # 12 % slower but the calibrated gate is 15 %: not a regression, and a 15 % gate is
            # wider than the 10 % --max-gate, so not a pass either.
            self.assertEqual(verdicts["collectives/all-reduce-8MiB"]["verdict"], "inconclusive")
            self.assertIn("wider than --max-gate 10.0 %", verdicts["collectives/all-reduce-8MiB"]["note"])
            self.assertAlmostEqual(verdicts["collectives/all-reduce-8MiB"]["min_effect"], 0.15)
            self.assertEqual(verdicts["gemm/bias-1024"]["verdict"], "new")
            self.assertEqual(verdicts["layout/coalesce-a"]["verdict"], "correctness")
            self.assertEqual(code, 1)

    def test_missing_baseline_dir_is_unusable_input(self):
        with tempfile.TemporaryDirectory() as tmp, contextlib.redirect_stderr(io.StringIO()) as err:
            code = compare_with_baseline(FIXTURES / "new.json", pathlib.Path(tmp) / "nope", pathlib.Path(tmp))
        self.assertEqual(code, 2)
        self.assertIn("nope", err.getvalue())


if __name__ == "__main__":
    unittest.main()
