"""Deterministic signals: extraction, comparison, `meshgate baseline update/check`, the
`run --baseline` wiring, the committed baselines/signals and ci/premerge's signal step."""

import contextlib
import copy
import io
import json
import os
import pathlib
import re
import subprocess
import sys
import tempfile
import unittest
from unittest import mock

from meshgate import cli
from meshgate.core.results import suite_of
from meshgate.gate import checks, signal_report, signals, store
from meshgate.run import report, session
from tests.support import once

REPO = pathlib.Path(__file__).resolve().parents[2]
COMMITTED = REPO / "baselines" / "signals"
FAKE_RUNNER = pathlib.Path(__file__).resolve().parent / "fixtures" / "driver" / "fake_runner.py"


# ---------------------------------------------------------------------------------------------
# Fixtures built in code: rows shaped like meshgate-runner's (see harness/README.md).


def machine(host="ci-runner-3", cpu="AMD EPYC 7763 64-Core Processor", gpus=()):
    return {"host": host, "cpu": cpu, "cores": 16, "gpus": list(gpus), "fingerprint": host}


def results_doc(rows, host="ci-runner-3", cpu="AMD EPYC 7763 64-Core Processor", gpus=(),
                started="2026-11-21T06:00:00Z"):
    return {"schema": "meshgate.results/1",
            "run": {"id": f"run-{host}", "started": started, "commit": "1111111", "dirty": False,
                    "backend": "threads", "world_size": 8,
                    "machine": machine(host, cpu, gpus),
                    "versions": {"meshgate": "0.1.0", "cuda": None, "nccl": None, "mpi": None}},
            "cases": rows}


def row(case_id, kind, status="pass", plan=None, metrics=None, message="", seconds=0.001):
    suite, _, name = case_id.partition("/")
    return {"id": case_id, "suite": suite, "name": name, "kind": kind, "tags": ["smoke"],
            "status": status, "message": message, "params": {}, "plan": list(plan or []),
            "metrics": dict(metrics or {}), "samples": {}, "seconds": seconds}


def base_rows():
    """Correctness-only rows (no timing at all) of every kind."""
    return [
        row("redistribute-x/ppp-to-rrr", "redistribute", plan=["all_reduce(A+B+C, sum)"],
            metrics={"collectives": 1, "bytes_per_rank": 262144, "modeled_cost_s": 2.6058346666666666e-05,
                     "greedy_cost_s": 2.6058346666666666e-05, "warnings": 0, "distinct_plans": 1,
                     "unmerged": {"plan": ["all_reduce(A, sum)", "all_reduce(B, sum)", "all_reduce(C, sum)"],
                                  "collectives": 3, "bytes_per_rank": 786432, "modeled_cost_s": 3.8e-05}}),
        row("redistribute-x/s0-to-r", "redistribute", plan=["all_gather(B, dim=0)"],
            metrics={"collectives": 1, "bytes_per_rank": 4096, "modeled_cost_s": 1.7e-05, "warnings": 0}),
        row("collectives-x/all-reduce-4", "collective", plan=["all_reduce(float32, sum) on 1 group(s) of 4"],
            metrics={"group_size": 4, "groups": 1, "bytes": 4096, "modeled_time_s": 1.704096e-05,
                     "wrong": 0, "sizes": [{"bytes": 4096, "count": 1024, "inplace": False,
                                            "modeled_time_s": 1.704096e-05, "wrong": 0}]}),
        row("layout-x/coalesce-a", "layout", metrics={"result": "(2,6):(1,2)"}),
        row("mesh-x/flatten-dp-tp", "mesh", metrics={"layout": "(8):(1)", "shape": [8],
                                                     "model_disagreements": []}),
        row("gemm-x/cpu-bias", "gemm", plan=["cpu_epilogue", "cpu_unfused"],
            metrics={"flops": 63360.0, "impls": {"cpu_epilogue": {"device": "cpu", "executed": "cpu_epilogue",
                                                                  "max_abs_err": 1e-7},
                                                 "cpu_unfused": {"device": "cpu", "executed": "cpu_unfused",
                                                                 "max_abs_err": 1e-7}}}),
        row("gemm-x/cuda-bias", "gemm", status="skip", message="no CUDA device present"),
    ]


def with_timing(rows, factor=1.0, seed=1):
    """The same rows with timing metrics and samples, as a perf run would record them."""
    out = copy.deepcopy(rows)
    for i, r in enumerate(out):
        if r["status"] != "pass":
            continue
        t = 1e-4 * (i + 1) * factor
        r["metrics"]["time_s"] = {"median": t, "min": t * 0.9, "max": t * 1.2, "runs": 3}
        r["metrics"]["algbw_GBps"] = 3.5 / factor
        r["samples"] = {"time_s": [[t * (1 + 0.01 * ((j * seed) % 5)) for j in range(5)] for _ in range(3)]}
        r["seconds"] = 0.5 * factor
        if r["kind"] == "gemm":
            r["message"] = f"flagged: perf: cpu_epilogue is {factor * 40:.1f}% slower than cpu_unfused"
            for impl in r["metrics"]["impls"].values():
                impl["time_s"], impl["gflops"] = t, 1.0 / factor
    return out


def by_id(rows):
    return {r["id"]: r for r in rows}


class Workspace(unittest.TestCase):
    """A temporary folder with a committed-style signals baseline made from base_rows()."""

    def setUp(self):
        self._tmp = tempfile.TemporaryDirectory(prefix="meshgate-signals-")
        self.addCleanup(self._tmp.cleanup)
        self.dir = pathlib.Path(self._tmp.name)
        self.signals_dir = self.dir / "baselines" / "signals"
        store.update_signals_dir(results_doc(base_rows()), self.signals_dir)

    def write(self, doc, name="results.json"):
        path = self.dir / name
        path.write_text(json.dumps(doc))
        return path

    def meshgate(self, *argv):
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = cli.main([str(a) for a in argv])
        return code, out.getvalue(), err.getvalue()

    def check(self, rows, **doc_kwargs):
        path = self.write(results_doc(rows, **doc_kwargs))
        out_dir = self.dir / "report"
        code, out, err = self.meshgate("baseline", "check", path, "--signals", self.signals_dir,
                                       "--out", out_dir, "--json", self.dir / "check.json")
        report = (out_dir / "signals-report.md").read_text() if (out_dir / "signals-report.md").exists() else ""
        data = json.loads((self.dir / "check.json").read_text()) if (self.dir / "check.json").exists() else {}
        return code, out + err, report, data


# ---------------------------------------------------------------------------------------------


class ExtractTest(unittest.TestCase):
    def test_timing_hosts_dates_and_messages_never_enter(self):
        timed = with_timing(base_rows(), factor=3.0)
        for plain, noisy in zip(base_rows(), timed):
            self.assertEqual(signals.extract(plain), signals.extract(noisy), plain["id"])
        text = json.dumps(signals.extract_all(results_doc(timed, host="elsewhere")))
        for word in ('"time_s"', "algbw", "gflops", "max_abs_err", "elsewhere", "2026", "flagged", "seconds"):
            self.assertNotIn(word, text)

    def test_signals_of_each_kind(self):
        sig = signals.extract_all(results_doc(base_rows()))
        red = sig["redistribute-x/ppp-to-rrr"]
        self.assertEqual(red["plan"], ["all_reduce(A+B+C, sum)"])
        self.assertEqual((red["collectives"], red["bytes_per_rank"]), (1, 262144))
        self.assertEqual(red["unmerged"]["collectives"], 3)
        self.assertAlmostEqual(red["modeled_cost_s"], 2.6058346666666666e-05)
        coll = sig["collectives-x/all-reduce-4"]
        self.assertEqual(coll["sizes"], [{"bytes": 4096, "count": 1024, "inplace": False,
                                          "modeled_time_s": 1.704096e-05}])
        self.assertEqual((coll["group_size"], coll["groups"], coll["bytes"]), (4, 1, 4096))
        self.assertEqual(sig["layout-x/coalesce-a"]["result"], "(2,6):(1,2)")
        self.assertEqual(sig["mesh-x/flatten-dp-tp"]["layout"], "(8):(1)")
        self.assertEqual(sig["gemm-x/cpu-bias"]["impls"]["cpu_unfused"], {"device": "cpu", "executed": "cpu_unfused"})
        self.assertNotIn("device", sig["gemm-x/cpu-bias"])
        self.assertEqual(sig["gemm-x/cuda-bias"], {"status": "skip"})

    def test_gemm_algorithm_leaves_the_plan_and_is_bound_to_the_gpu(self):
        r = row("gemm-cuda/bias", "gemm",
                plan=["lt_epilogue: epilogue BIAS, algo 21 tile 18 splitk 1 reduction 0 stages 8 workspace 0 B (cached)",
                      "unfused: epilogue DEFAULT, bias/activation kernel, algo 6 tile 20 splitk 4 reduction 1 stages 3 workspace 1024 B"],
                metrics={"impls": {"lt_epilogue": {"device": "cuda", "executed": "lt_epilogue", "lt_epilogue": "BIAS",
                                                   "algo": {"id": 21, "tile": 18, "splitk_num": 1, "reduction_scheme": 0,
                                                            "stages": 8, "workspace_bytes": 0, "heuristic_cached": True}}}})
        sig = signals.extract(r, results_doc([], gpus=["NVIDIA H100 80GB HBM3"])["run"])
        self.assertEqual(sig["plan"], ["lt_epilogue: epilogue BIAS",
                                       "unfused: epilogue DEFAULT, bias/activation kernel"])
        self.assertEqual(sig["algorithm"], {"lt_epilogue": {"id": 21, "tile": 18, "splitk_num": 1,
                                                            "reduction_scheme": 0, "stages": 8, "workspace_bytes": 0}})
        self.assertEqual(sig["device"], "NVIDIA H100 80GB HBM3")
        self.assertEqual(signals.extract(r)["device"], "cuda")


class DiffTest(unittest.TestCase):
    def test_floats_within_a_relative_1e9_are_equal(self):
        a = {"status": "pass", "modeled_cost_s": 2.6058346666666666e-05, "bytes_per_rank": 4096}
        self.assertEqual(signals.diff(a, dict(a, modeled_cost_s=2.605834666666667e-05))[0], [])
        changes = signals.diff(a, dict(a, modeled_cost_s=2.6058e-05))[0]
        self.assertEqual([c.signal for c in changes], ["modeled_cost_s"])
        self.assertEqual(signals.diff(a, dict(a, bytes_per_rank=4097))[0][0].signal, "bytes_per_rank")
        self.assertFalse(signals.values_equal(1, True))
        self.assertFalse(signals.values_equal("1", 1))

    def test_algorithm_compared_only_on_the_same_gpu(self):
        h100 = {"status": "pass", "plan": ["lt_epilogue: epilogue BIAS"], "device": "NVIDIA H100",
                "algorithm": {"lt_epilogue": {"id": 21, "splitk_num": 1, "workspace_bytes": 0}}}
        other_algo = copy.deepcopy(h100)
        other_algo["algorithm"]["lt_epilogue"]["splitk_num"] = 4
        changes, _, notes = signals.diff(h100, other_algo)
        self.assertEqual([c.signal for c in changes], ["algorithm.lt_epilogue.splitk_num"])
        changes, _, notes = signals.diff(h100, dict(other_algo, device="NVIDIA A100"))
        self.assertEqual(changes, [])
        self.assertIn("not compared", notes[0])
        self.assertIn("NVIDIA A100", notes[0])

    def test_vanished_signals_change_new_ones_are_only_listed(self):
        a = {"status": "pass", "plan": [], "collectives": 0}
        changes, added, _ = signals.diff(a, {"status": "pass", "plan": [], "kernel_launches": 2})
        self.assertEqual([(c.signal, c.old, c.new) for c in changes], [("collectives", 0, None)])
        self.assertEqual([(c.signal, c.new) for c in added], [("kernel_launches", 2)])


class CheckTest(Workspace):
    def test_a_changed_plan_string_fails_with_old_and_new_plan_and_no_timing(self):
        rows = base_rows()
        by_id(rows)["redistribute-x/ppp-to-rrr"]["plan"] = ["all_reduce(A+B, sum)", "all_reduce(C, sum)"]
        code, out, report, data = self.check(rows)
        self.assertEqual(code, 1, out)
        self.assertTrue(all(not r["samples"] and "time_s" not in r["metrics"] for r in rows))
        self.assertIn("plan change", report.splitlines()[0])
        section = report[report.index("## Plan changes"):]
        self.assertIn("`all_reduce(A+B+C, sum)`", section)  # old, side by side with the new
        self.assertIn("| 1 **≠** | `all_reduce(A+B+C, sum)` | `all_reduce(A+B, sum)` |", section)
        for line in ("-all_reduce(A+B+C, sum)", "+all_reduce(A+B, sum)", "+all_reduce(C, sum)"):
            self.assertIn(line, section)  # the unified diff
            self.assertIn(line, out)      # and on the terminal
        self.assertEqual(data["exit_code"], 1)
        changed = [c for c in data["cases"] if c["outcome"] == "changed"]
        self.assertEqual([c["id"] for c in changed], ["redistribute-x/ppp-to-rrr"])
        self.assertTrue(changed[0]["plan_changed"])

    def test_a_changed_signal_shows_old_and_new(self):
        rows = base_rows()
        by_id(rows)["redistribute-x/s0-to-r"]["metrics"]["bytes_per_rank"] = 8192
        code, out, report, _ = self.check(rows)
        self.assertEqual(code, 1)
        self.assertIn("| `redistribute-x/s0-to-r` | `bytes_per_rank` | `4096` -> `8192` |", report)
        self.assertIn("bytes_per_rank: 4096 -> 8192", out)

    def test_a_new_failure_fails_with_its_message(self):
        rows = base_rows()
        r = by_id(rows)["layout-x/coalesce-a"]
        r.update(status="fail", message="expected (2,6):(1,2), got (12):(1)")
        code, out, report, data = self.check(rows)
        self.assertEqual(code, 1)
        self.assertIn("## New failures (1)", report)
        self.assertIn("| `layout-x/coalesce-a` | pass | **fail** | expected (2,6):(1,2), got (12):(1) |", report)
        self.assertIn("new failure  layout-x/coalesce-a: pass -> fail: expected (2,6):(1,2)", out)
        self.assertEqual(data["counts"]["new_failure"], 1)
        rows = base_rows()
        by_id(rows)["mesh-x/flatten-dp-tp"].update(status="error", message="rank 3: std::bad_alloc")
        code, _, report, _ = self.check(rows)
        self.assertEqual(code, 1)
        self.assertIn("rank 3: std::bad_alloc", report)

    def test_case_ids_and_messages_cannot_break_the_report_or_the_terminal(self):
        hostile = "layout-x/a|b`c\x1b[2J"
        store.update_signals_dir(results_doc(base_rows() + [row(hostile, "layout")]), self.signals_dir)
        rows = base_rows() + [row(hostile, "layout", status="fail",
                                  message="got | this\nand <b>that</b> \x1b[31m")]
        code, out, report, _ = self.check(rows)
        self.assertEqual(code, 1)
        self.assertNotIn("\x1b", report)
        self.assertNotIn("\x1b", out)
        line = next(l for l in report.splitlines() if "b`c" in l and "**fail**" in l)
        # Four cells: the pipes inside the id and the message are escaped.
        self.assertEqual(len(re.findall(r"(?<!\\)\|", line)), 5, line)
        self.assertIn("\\<b>", line)  # an escaped tag, shown as text
        self.assertIn("new failure  layout-x/a|b`c\\x1b[2J: pass -> fail: got | this\\nand", out)

    def test_identical_signals_with_other_timings_on_another_machine_pass(self):
        rows = with_timing(base_rows(), factor=7.5, seed=3)
        code, out, report, data = self.check(rows, host="gpu-node-9", cpu="Intel Xeon Platinum 8480C",
                                             started="2027-01-02T03:04:05Z")
        self.assertEqual(code, 0, out)
        self.assertTrue(report.startswith("# Deterministic signals: PASS"))
        self.assertEqual(data["counts"]["same"], 6)
        self.assertEqual(data["counts"]["changed"], 0)

    def test_skips_for_missing_hardware_or_ranks_are_not_changes(self):
        rows = base_rows()
        by_id(rows)["collectives-x/all-reduce-4"].update(
            status="skip", plan=[], metrics={}, message="needs 4 ranks, the world has 2")
        code, out, report, data = self.check(rows)
        self.assertEqual(code, 0, out)
        self.assertEqual(data["counts"]["skipped_here"], 2)  # and the CUDA case, skipped on both sides
        self.assertIn("`collectives-x/all-reduce-4`: needs 4 ranks, the world has 2", report)
        # The other way round: recorded as a skip, runs here (a GPU runner): not compared.
        rows = base_rows()
        by_id(rows)["gemm-x/cuda-bias"].update(status="pass", plan=["lt_epilogue: epilogue BIAS"], message="")
        code, _, report, data = self.check(rows)
        self.assertEqual(code, 0)
        self.assertEqual(data["counts"]["skipped_in_baseline"], 1)

    def test_new_and_removed_cases_are_listed_without_failing(self):
        rows = [r for r in base_rows() if r["id"] != "redistribute-x/s0-to-r"]
        rows.append(row("redistribute-x/brand-new", "redistribute", plan=["all_to_all(A, dim=0->1)"]))
        rows.append(row("other-suite/first", "layout", metrics={"result": "1:0"}))
        code, out, report, data = self.check(rows)
        self.assertEqual(code, 0, out)
        self.assertEqual(data["counts"]["new"], 2)
        self.assertEqual(data["counts"]["absent"], 1)
        self.assertEqual(data["lacking_suites"], ["other-suite"])
        self.assertIn("`redistribute-x/brand-new`", report)
        self.assertIn("In the baseline, not in this run", report)
        # Cases of suites the results do not touch are not "absent".
        self.assertNotIn("layout-x", json.dumps([c for c in data["cases"] if c["outcome"] == "absent"]))

    def test_fixed_and_still_failing_do_not_gate(self):
        doc = results_doc(base_rows())
        by_id(doc["cases"])["layout-x/coalesce-a"].update(status="fail", message="old bug")
        chk = signals.check(doc, {**signals.extract_all(results_doc(base_rows())),
                                  "layout-x/coalesce-a": {"status": "fail"}})
        self.assertEqual(chk.by_outcome("still_failing")[0].id, "layout-x/coalesce-a")
        self.assertEqual(chk.exit_code(), 0)
        chk = signals.check(results_doc(base_rows()), {"layout-x/coalesce-a": {"status": "fail"}})
        self.assertEqual(chk.by_outcome("fixed")[0].id, "layout-x/coalesce-a")
        self.assertEqual(chk.exit_code(), 0)

    def test_unusable_input_exits_2(self):
        path = self.write(results_doc(base_rows()))
        code, _, err = self.meshgate("baseline", "check", path, "--signals", self.dir / "nowhere",
                                     "--out", self.dir / "r")
        self.assertEqual(code, 2)
        self.assertIn("nowhere", err)
        (self.signals_dir / "layout-x.json").write_text(json.dumps({"schema": "meshgate.signals/0", "cases": {}}))
        code, _, err = self.meshgate("baseline", "check", path, "--signals", self.signals_dir, "--out", self.dir / "r")
        self.assertEqual(code, 2)
        self.assertIn("meshgate.signals/0", err)
        code, _, err = self.meshgate("baseline", "check", self.write({"schema": "x"}, "bad.json"),
                                     "--signals", self.signals_dir)
        self.assertEqual(code, 2)


class UpdateTest(Workspace):
    def test_update_writes_timing_and_signals_and_signals_only_writes_no_timing(self):
        path = self.write(results_doc(with_timing(base_rows())))
        root = self.dir / "fresh"
        code, out, err = self.meshgate("baseline", "update", path, "--baselines", root)
        self.assertEqual(code, 0, err)
        self.assertTrue((root / "amd-epyc-7763-64-core-16c" / "redistribute-x.json").is_file())
        doc = json.loads((root / "signals" / "redistribute-x.json").read_text())
        self.assertEqual(doc["schema"], "meshgate.signals/1")
        self.assertEqual(doc["suite"], "redistribute-x")
        self.assertEqual(sorted(doc["cases"]), ["redistribute-x/ppp-to-rrr", "redistribute-x/s0-to-r"])
        self.assertNotIn('"time_s"', json.dumps(doc))
        only = self.dir / "only"
        code, out, err = self.meshgate("baseline", "update", "--signals-only", path, "--baselines", only)
        self.assertEqual(code, 0, err)
        self.assertEqual(sorted(p.name for p in only.iterdir()), ["signals"])
        # Same signals from another machine with other timings: nothing to rewrite.
        again = self.write(results_doc(with_timing(base_rows(), factor=2.0), host="b"), "again.json")
        code, out, _ = self.meshgate("baseline", "update", "--signals-only", again, "--baselines", only)
        self.assertIn("signals unchanged: 5 suite file(s)", out)
        self.assertNotIn("signals written", out)

    def test_update_refuses_failures_unless_accepted(self):
        rows = base_rows()
        by_id(rows)["layout-x/coalesce-a"].update(status="fail", message="wrong")
        path = self.write(results_doc(rows))
        before = (self.signals_dir / "layout-x.json").read_text()
        code, _, err = self.meshgate("baseline", "update", path, "--baselines", self.signals_dir.parent)
        self.assertEqual(code, 2)
        self.assertIn("layout-x/coalesce-a (fail)", err)
        self.assertIn("--accept-failures", err)
        self.assertEqual((self.signals_dir / "layout-x.json").read_text(), before)
        self.assertFalse((self.signals_dir.parent / "amd-epyc-7763-64-core-16c").exists())
        code, _, err = self.meshgate("baseline", "update", "--signals-only", "--accept-failures", path,
                                     "--baselines", self.signals_dir.parent)
        self.assertEqual(code, 0, err)
        self.assertEqual(json.loads((self.signals_dir / "layout-x.json").read_text())["cases"]
                         ["layout-x/coalesce-a"], {"status": "fail", "plan": [], "result": "(2,6):(1,2)"})

    def test_skipped_cases_keep_what_a_capable_machine_recorded_and_absent_cases_stay_unless_pruned(self):
        gpu = base_rows()
        by_id(gpu)["gemm-x/cuda-bias"].update(status="pass", plan=["lt_epilogue: epilogue BIAS, algo 3 tile 1"],
                                              message="", metrics={"impls": {"lt_epilogue": {
                                                  "device": "cuda", "executed": "lt_epilogue",
                                                  "algo": {"id": 3, "tile": 1, "splitk_num": 1}}}})
        store.update_signals_dir(results_doc(gpu, gpus=["NVIDIA H100"]), self.signals_dir)
        outcome = store.update_signals_dir(results_doc(base_rows()), self.signals_dir)  # a CPU machine
        self.assertEqual(outcome.kept_skipped, ["gemm-x/cuda-bias"])
        kept = json.loads((self.signals_dir / "gemm-x.json").read_text())["cases"]["gemm-x/cuda-bias"]
        self.assertEqual(kept["device"], "NVIDIA H100")
        self.assertEqual(kept["algorithm"], {"lt_epilogue": {"id": 3, "tile": 1, "splitk_num": 1}})
        fewer = [r for r in base_rows() if r["id"] != "redistribute-x/s0-to-r"]
        outcome = store.update_signals_dir(results_doc(fewer), self.signals_dir)
        self.assertEqual(outcome.kept_absent, ["redistribute-x/s0-to-r"])
        outcome = store.update_signals_dir(results_doc(fewer), self.signals_dir, prune=True)
        self.assertEqual(outcome.pruned, ["redistribute-x/s0-to-r"])
        self.assertNotIn("redistribute-x/s0-to-r",
                         json.loads((self.signals_dir / "redistribute-x.json").read_text())["cases"])


def baseline_checks(out_dir, baseline):
    """`meshgate run --baseline`'s checks (session.baseline_checks) of the run in out_dir, whose
    report.md is then written once with their sections: (exit code, summary lines)."""
    document = json.loads((out_dir / "results.json").read_text())
    found = session.baseline_checks(document, out_dir, baseline)
    report.write_run_report(out_dir, document, found.sections())
    return found.code, found.lines


class RunBaselineWiringTest(Workspace):
    """`meshgate run --baseline DIR`: the signal check gates, a stored timing informs."""

    def run_dir(self, rows):
        out_dir = self.dir / "run"
        out_dir.mkdir(exist_ok=True)
        (out_dir / "results.json").write_text(json.dumps(results_doc(rows)))
        (out_dir / "report.md").write_text("# meshgate run x: PASS\n\nfacts\n")
        return out_dir

    def test_changed_plan_gates_and_lands_in_the_run_report(self):
        rows = base_rows()
        by_id(rows)["redistribute-x/s0-to-r"]["plan"] = ["all_to_all(B, dim=0->1)"]
        out_dir = self.run_dir(rows)
        with mock.patch("meshgate.gate.checks.compare_with_baseline", return_value=checks.TimingCheck(0)) as timing:
            code, lines = baseline_checks(out_dir, self.signals_dir.parent)
        self.assertEqual(code, 1)
        timing.assert_not_called()  # the root holds no timing baseline for this machine
        self.assertIn("CHANGED (exit 1)", lines[0])
        self.assertTrue(any("+all_to_all(B, dim=0->1)" in line for line in lines))
        report = (out_dir / "report.md").read_text()
        self.assertIn("Deterministic signals: **FAIL: 1 plan change**", report.splitlines()[2])
        self.assertIn("## Deterministic signals: FAIL: 1 plan change", report)
        self.assertIn("-all_gather(B, dim=0)", report)
        self.assertTrue((out_dir / "signals-report.md").is_file())

    def test_a_stored_timing_regression_is_informational_and_combines_with_signals(self):
        machine_dir = self.signals_dir.parent / "amd-epyc-7763-64-core-16c"
        machine_dir.mkdir()
        out_dir = self.run_dir(base_rows())
        with mock.patch("meshgate.gate.checks.compare_with_baseline", return_value=checks.TimingCheck(1)) as timing:
            code, lines = baseline_checks(out_dir, machine_dir)
        timing.assert_called_once_with(mock.ANY, out_dir / "results.json", machine_dir, out_dir)
        self.assertEqual(code, 0)
        self.assertIn("no change (exit 0)", lines[0])
        self.assertIn("informational", lines[1])
        with mock.patch("meshgate.gate.checks.compare_with_baseline", return_value=checks.TimingCheck(2)):
            code, lines = baseline_checks(out_dir, machine_dir)
        self.assertEqual(code, 2)

    def test_without_signals_beside_it_only_timing_runs(self):
        out_dir = self.run_dir(base_rows())
        lone = self.dir / "lone" / "machine"
        lone.mkdir(parents=True)
        with mock.patch("meshgate.gate.checks.compare_with_baseline", return_value=checks.TimingCheck(0)) as timing:
            code, lines = baseline_checks(out_dir, lone)
        self.assertEqual((code, len(lines)), (0, 1))
        timing.assert_called_once()
        self.assertNotIn("signals", (out_dir / "report.md").read_text().lower())


class PremergeSignalStepTest(Workspace):
    """ci/premerge's first step, run as the script runs it, on results with a changed plan."""

    def premerge(self, results):
        env = dict(os.environ, MESHGATE_PREMERGE_STEPS="signals", MESHGATE_PREMERGE_RESULTS=str(results),
                   MESHGATE_SIGNALS=str(self.signals_dir), MESHGATE_PREMERGE_OUT=str(self.dir / "premerge"))
        return subprocess.run([str(REPO / "ci" / "premerge")], cwd=REPO, env=env, capture_output=True,
                              text=True, timeout=120)

    def test_a_changed_plan_string_fails_the_step_with_the_diff(self):
        rows = base_rows()
        by_id(rows)["redistribute-x/ppp-to-rrr"]["plan"] = ["all_reduce(A+C, sum)", "all_reduce(B, sum)"]
        proc = self.premerge(self.write(results_doc(rows)))
        self.assertEqual(proc.returncode, 1, proc.stdout + proc.stderr)
        self.assertIn("-all_reduce(A+B+C, sum)", proc.stdout)
        self.assertIn("+all_reduce(A+C, sum)", proc.stdout)
        self.assertIn("premerge: correctness/signals step failed", proc.stderr)
        self.assertNotIn("A/B", proc.stdout)
        self.assertIn("all_reduce(A+B+C, sum)", (self.dir / "premerge" / "signals-report.md").read_text())

    def test_unchanged_signals_pass_the_step(self):
        proc = self.premerge(self.write(results_doc(with_timing(base_rows(), factor=4.0), host="x")))
        self.assertEqual(proc.returncode, 0, proc.stdout + proc.stderr)
        self.assertIn("signals: PASS", proc.stdout)


class CommittedSignalsTest(unittest.TestCase):
    """baselines/signals: loads, covers the suites, and matches a fresh run."""

    def test_every_committed_file_loads(self):
        files = sorted(COMMITTED.glob("*.json"))
        self.assertTrue(files, f"no committed signals in {COMMITTED}")
        for path in files:
            doc = json.loads(path.read_text())
            self.assertEqual(doc["schema"], store.SIGNALS_SCHEMA, path)
            self.assertEqual(doc["suite"], path.stem, path)
            self.assertTrue(doc["cases"], path)
            for case_id, sig in doc["cases"].items():
                self.assertEqual(suite_of(case_id), path.stem, case_id)
                self.assertIn(sig["status"], ("pass", "skip"), case_id)
            self.assertEqual(path.read_text(), json.dumps(doc, indent=1, sort_keys=True) + "\n",
                             f"{path} is not in the form `meshgate baseline update` writes")
        baseline_signals, _, _ = store.load_signals_dir(COMMITTED)
        text = json.dumps(baseline_signals)
        for word in ('"time_s"', "GBps", "gflops", "seconds", "host"):
            self.assertFalse(word in text, f"{word} in the committed signals")

    def test_the_readme_says_how_to_update(self):
        text = (REPO / "baselines" / "README.md").read_text()
        self.assertIn("meshgate baseline update --signals-only", text)


REAL_RUNNER = os.environ.get("MESHGATE_RUNNER", "")
SMALL_SUITES = ["layout-coalesce", "mesh-slice", "compat-fsdp-hsdp", "collectives-all-to-all",
                "redistribute-2d", "gemm-cpu"]


@unittest.skipUnless(REAL_RUNNER and pathlib.Path(REAL_RUNNER).resolve() != FAKE_RUNNER.resolve(),
                     "MESHGATE_RUNNER is not set: build meshgate-runner and run through CTest "
                     "(or export MESHGATE_RUNNER=build/<preset>/harness/runner/meshgate-runner)")
@once("real runs of whole suites")
class CommittedSignalsMatchRealRunnerTest(unittest.TestCase):
    def test_a_fresh_run_of_small_suites_matches_the_committed_signals(self):
        with tempfile.TemporaryDirectory(prefix="meshgate-signals-real-") as tmp:
            argv = [REAL_RUNNER, "run", str(REPO / "cases"), "--out", tmp, "--case-timeout", "120"]
            for suite in SMALL_SUITES:
                argv += ["--suite", suite]
            proc = subprocess.run(argv, capture_output=True, text=True, timeout=600)
            self.assertIn(proc.returncode, (0, 1), proc.stderr[-2000:])
            results = json.loads((pathlib.Path(tmp) / "results.json").read_text())
        self.assertEqual({suite_of(r) for r in results["cases"]}, set(SMALL_SUITES))
        chk = checks.check_against_dir(results, COMMITTED)
        self.assertEqual(chk.lacking_suites, [])
        self.assertEqual(chk.exit_code(), 0, signal_report.text(chk))
        self.assertEqual(chk.count("new"), 0, signal_report.text(chk))
        self.assertEqual(chk.count("absent"), 0, signal_report.text(chk))
        self.assertGreater(chk.count("same"), 100)

    def test_every_suite_of_cases_has_committed_signals(self):
        proc = subprocess.run([REAL_RUNNER, "list", str(REPO / "cases"), "--json"], capture_output=True,
                              text=True, timeout=120)
        self.assertEqual(proc.returncode, 0, proc.stderr[-2000:])
        listed = json.loads(proc.stdout)
        entries = listed["cases"] if isinstance(listed, dict) else listed
        suites = {suite_of(e.get("id", "")) for e in entries}
        committed = {p.stem for p in COMMITTED.glob("*.json")}
        self.assertEqual(sorted(suites - committed), [], "suites without committed signals: run "
                         "`./meshgate run cases` and `./meshgate baseline update --signals-only`")
        baseline_signals, _, _ = store.load_signals_dir(COMMITTED)
        ids = {e.get("id") for e in entries}
        self.assertEqual(sorted(set(baseline_signals) - ids), [],
                         "committed signals of cases that no longer exist: update with --prune")


if __name__ == "__main__":
    unittest.main()
