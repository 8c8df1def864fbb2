import argparse
import contextlib
import io
import json
import math
import os
import pathlib
import random
import subprocess
import sys
import tempfile
import unittest
import zlib
from unittest import mock

from meshgate import cli
from meshgate.commands import bisect as bisect_command
from meshgate.core import files
from meshgate.gate.compare import CaseVerdict
from meshgate.system import git as system_git
from meshgate.system import repeats
from meshgate.system.revisions import RevisionBuildError
from meshgate.timeline import bisection
from meshgate.timeline import culprit as timeline_culprit
from meshgate.timeline import render as timeline_render
from meshgate.timeline.bisection import BAD, GOOD, SKIP, Step

FAKE_PERF_RUNNER = pathlib.Path(__file__).parent / "fixtures" / "gate" / "fake_perf_runner.py"


def git(repo, *args):
    env = dict(os.environ, GIT_AUTHOR_NAME="Ada Lovelace", GIT_AUTHOR_EMAIL="ada@example.com",
               GIT_COMMITTER_NAME="Ada Lovelace", GIT_COMMITTER_EMAIL="ada@example.com")
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True,
                          env=env).stdout.strip()


def commits(n):
    return [f"{i:040x}" for i in range(1, n + 1)]


class FakeTester:
    """commit -> good/bad by position, some commits unbuildable (skip)."""

    def __init__(self, history, culprit, unbuildable=()):
        self.index = {c: i for i, c in enumerate(history)}
        self.culprit, self.unbuildable = culprit, set(unbuildable)
        self.tested = []

    def __call__(self, commit):
        self.tested.append(commit)
        i = self.index[commit]
        if i in self.unbuildable:
            return Step(commit, SKIP, "does not build", built=False)
        return Step(commit, BAD if i >= self.culprit else GOOD, "fake")


class SearchTest(unittest.TestCase):
    def test_every_culprit_within_ceil_log2_n_plus_2_tested_commits(self):
        for n in range(1, 65):
            history = commits(n)
            for culprit in range(n):
                tester = FakeTester(history, culprit)
                result = bisection.search(history, tester)
                self.assertEqual(result.culprit, history[culprit], (n, culprit))
                tested = 2 + len(result.steps)  # the endpoints and the probes
                self.assertLessEqual(tested, bisection.cost_bound(n), (n, culprit))
                self.assertEqual(bisection.cost_bound(n), math.ceil(math.log2(n)) + 2 if n > 1 else 2)
                self.assertEqual(len(set(tester.tested)), len(tester.tested))
                self.assertEqual(result.skipped, [])

    def test_unbuildable_commits_are_skipped_and_named(self):
        history = commits(16)
        tester = FakeTester(history, culprit=11, unbuildable={7, 8})
        result = bisection.search(history, tester)
        self.assertEqual(result.culprit, history[11])
        # 7 is the first middle, then its neighbours, the newer first
        self.assertEqual(tester.tested[:3], [history[7], history[8], history[6]])
        self.assertEqual(result.skipped, [history[7], history[8]])
        self.assertLessEqual(2 + len(result.steps), bisection.cost_bound(16) + len(result.skipped))
        self.assertEqual([s.verdict for s in result.steps][:2], [SKIP, SKIP])

    def test_one_unbuildable_commit_costs_its_build_and_nothing_more(self):
        for n in (2, 5, 8, 13, 32, 64):
            history = commits(n)
            for culprit in range(n):
                for broken in range(n - 1):
                    result = bisection.search(history, FakeTester(history, culprit, {broken}))
                    tested = 2 + sum(1 for step in result.steps if step.built)
                    self.assertLessEqual(tested, bisection.cost_bound(n), (n, culprit, broken))
                    self.assertLessEqual(len(result.skipped), 1)
                    if result.culprit is None:  # the unbuildable commit is the culprit or just before it
                        self.assertIn(broken, (culprit - 1, culprit), (n, culprit, broken))
                        self.assertEqual(result.suspects[:2], sorted({history[broken], history[culprit]}) + (
                            [history[culprit + 1]] if broken == culprit else []))
                        self.assertEqual(result.skipped, [history[broken]])
                    else:
                        self.assertEqual(result.culprit, history[culprit], (n, culprit, broken))

    def test_skip_right_after_the_culprit_still_isolates_it(self):
        history = commits(8)
        result = bisection.search(history, FakeTester(history, culprit=3, unbuildable={4}))
        self.assertEqual(result.culprit, history[3])

    def test_skip_right_before_the_culprit_leaves_the_range(self):
        history = commits(8)
        result = bisection.search(history, FakeTester(history, culprit=4, unbuildable={3}))
        self.assertIsNone(result.culprit)
        self.assertEqual(result.suspects, [history[3], history[4]])
        self.assertEqual(result.skipped, [history[3]])

    def test_probe_is_the_middle_or_the_nearest_testable(self):
        self.assertEqual(bisection.next_probe(-1, 15, set()), 7)
        self.assertEqual(bisection.next_probe(-1, 15, {7}), 8)
        self.assertEqual(bisection.next_probe(-1, 15, {7, 8}), 6)
        self.assertIsNone(bisection.next_probe(2, 5, {3, 4}))


def verdict(case_id, v, ratio=None, ci=None, p=None, gate=0.02, confirmed=None, confirm_ci=None, note="", **kw):
    return CaseVerdict(id=case_id, verdict=v, ratio=ratio, ci=ci, p=p, min_effect=gate, confirmed=confirmed,
                       confirm_ci=confirm_ci, confirm_ratio=(sum(confirm_ci) / 2 if confirm_ci else None),
                       confirm_p=0.0002 if confirm_ci else None, note=note, runs_base=9, runs_new=9, **kw)


class StepVerdictTest(unittest.TestCase):
    def test_perf_target_verdicts(self):
        self.assertEqual(bisection.judge_perf(verdict("a", "regression", 1.3, (1.25, 1.35)))[0], BAD)
        self.assertEqual(bisection.judge_perf(verdict("a", "pass", 1.0, (0.99, 1.01)))[0], GOOD)
        self.assertEqual(bisection.judge_perf(verdict("a", "improvement", 0.8, (0.78, 0.82)))[0], GOOD)
        self.assertIsNone(bisection.judge_perf(verdict("a", "inconclusive", 1.05, (0.9, 1.2)))[0])
        self.assertIsNone(bisection.judge_perf(verdict("a", "missing"))[0])
        timeout = verdict("a", "correctness", new_status="error", message="case timed out after 5 s")
        v, reason = bisection.judge_perf(timeout)
        self.assertEqual(v, BAD)
        self.assertIn("timeout or error counts as slow", reason)

    def test_nearer_endpoint_on_a_log_scale(self):
        self.assertEqual(bisection.nearer_endpoint(1.05, 1.3), GOOD)
        self.assertEqual(bisection.nearer_endpoint(1.2, 1.3), BAD)
        # sqrt(1.44) = 1.2 is the log-scale middle between 1 and 1.44; 1.21 lies past it
        self.assertEqual(bisection.nearer_endpoint(1.19, 1.44), GOOD)
        self.assertEqual(bisection.nearer_endpoint(1.21, 1.44), BAD)

    def test_combine_bad_wins_then_skip_then_good(self):
        good = {"id": "a", "verdict": GOOD, "ratio": 1.0, "ci": [0.99, 1.01], "p": 0.5, "note": "pass"}
        bad = {"id": "b", "verdict": BAD, "ratio": 1.4, "ci": [1.3, 1.5], "p": 0.001, "note": "regression"}
        skip = {"id": "c", "verdict": SKIP, "note": "skip: no GPU"}
        step = bisection.combine("x", [good, bad, skip])
        self.assertEqual((step.verdict, step.ratio, step.ci, step.p), (BAD, 1.4, (1.3, 1.5), 0.001))
        self.assertEqual(bisection.combine("x", [good, skip]).verdict, SKIP)
        self.assertEqual(bisection.combine("x", [good]).verdict, GOOD)


class RecommendationTest(unittest.TestCase):
    CULPRIT = "c" * 40
    INFO = {"sha": "c" * 40, "subject": "layout: size walks the shape twice", "author": "Ada Lovelace <ada@example.com>",
            "date": "2025-01-02T03:04:05+00:00"}

    def doc(self, culprit, **evidence):
        ev = {"commits": 8, "first_parent": False, "tested": 5, "builds": 6, "bound": 5, "k": 9, "max_runs": 36,
              "revert_runs": 15, "seed": 1, "parent": "b" * 40, "targets": [{"id": "perf/size", "kind": "perf"}]}
        ev.update(evidence)
        return {"good": "a" * 40, "bad": "f" * 40, "culprit": culprit,
                "steps": [{"commit": "a" * 40, "verdict": "good", "reason": "the good endpoint", "ratio": None,
                           "ci": None, "p": None, "role": "good endpoint"},
                          {"commit": "f" * 40, "verdict": "bad", "reason": "confirmed regression", "ratio": 2.9,
                           "ci": [2.8, 3.0], "p": 0.0001, "role": "bad endpoint"}],
                "skipped": ["d" * 40], "evidence": ev}

    def render(self, culprit, perf, status, changes=None):
        rec = bisection.recommend(culprit, [culprit] if culprit else [], perf, status)
        machine = {"host": "ci-7", "cpu": "AMD EPYC 7B13", "class": "amd-epyc-7b13-2c", "backend": "threads"}
        return rec, timeline_render.revert_markdown(self.doc(culprit), self.INFO, rec, perf, status, changes or {}, machine)

    def test_isolated_and_past_the_gate_in_both_batches_recommends_the_revert(self):
        perf = [verdict("perf/size", "regression", 2.9, (2.8, 3.05), 0.0001, confirmed=True, confirm_ci=(2.7, 3.1),
                        noise_floor=0.004)]
        changes = {"perf/size": ["plan:", "```diff", "-a", "+b", "```"]}
        rec, md = self.render(self.CULPRIT, perf, [], changes)
        self.assertTrue(rec.revert)
        self.assertIn(f"git revert {self.CULPRIT}", md)
        for text in ("layout: size walks the shape twice", "Ada Lovelace", "2025-01-02", "[2.800, 3.050]",
                     "[2.700, 3.100]", "k = 15", "2.0 %", "0.4 %", "ci-7", "AMD EPYC 7B13", "amd-epyc-7b13-2c",
                     "perf/size", "plan:", "dddddddddddd", "bound ceil(log2 N) + 2 = 5"):
            self.assertIn(text, md)
        self.assertEqual(rec.to_json(self.CULPRIT)["command"], f"git revert {self.CULPRIT}")

    def test_ci_touching_the_gate_gives_no_recommendation_and_says_why(self):
        perf = [verdict("perf/size", "regression", 1.04, (1.015, 1.06), 0.004, confirmed=True, confirm_ci=(1.03, 1.05))]
        rec, md = self.render(self.CULPRIT, perf, [])
        self.assertFalse(rec.revert)
        self.assertNotIn("git revert", md)
        self.assertIn("# No revert recommendation", md)
        self.assertIn("first batch's 95 % CI [1.015, 1.060] reaches below the gate (1.020 = 1 + 2.0 %)", md)
        # revert.md states the level every other file of the folder states
        self.assertIn("regression, not revert-grade", md)
        self.assertEqual(perf[0].level(), "regression, not revert-grade")
        # the confirmation batch alone touching it is enough to refuse
        perf = [verdict("perf/size", "regression", 1.1, (1.05, 1.15), 0.004, confirmed=True, confirm_ci=(1.01, 1.2))]
        rec, _ = self.render(self.CULPRIT, perf, [])
        self.assertFalse(rec.revert)
        self.assertIn("confirmation batch", rec.why)
        unconfirmed = [verdict("perf/size", "inconclusive", 1.1, (1.05, 1.15), 0.004, confirmed=False)]
        self.assertFalse(bisection.recommend(self.CULPRIT, [self.CULPRIT], unconfirmed, []).revert)

    def test_correctness_culprit_recommends_the_revert_with_the_message(self):
        message = "cosize(8:1): expected 8, got 9"
        status = [{"id": "layout/cosize", "parent_status": "pass", "culprit_status": "fail", "message": message}]
        rec, md = self.render(self.CULPRIT, [], status)
        self.assertTrue(rec.revert)
        self.assertIn(f"git revert {self.CULPRIT}", md)
        self.assertIn(message, md)
        self.assertIn("| `layout/cosize` | pass | fail |", md)

    def test_no_isolated_culprit_and_nothing_reproducing(self):
        rec = bisection.recommend(None, ["d" * 40, "e" * 40], [], [])
        self.assertFalse(rec.revert)
        self.assertIn("not isolated", rec.why)
        self.assertIn("dddddddddddd, eeeeeeeeeeee", rec.why)
        rec = bisection.recommend(None, [], [], [], nothing="bad is not worse than good")
        self.assertIn("Nothing to revert", rec.why)


class SyntheticLab:
    """The seams of culprit.Lab: builds that may fail, launches with known truth per commit."""

    def __init__(self, history, factor, status=None, unbuildable=(), noise=0.004, message="expected 8, got 9"):
        self.history, self.factor, self.status = history, factor, status or {}
        self.unbuildable, self.noise, self.message = set(unbuildable), noise, message
        self.built, self.launches = [], 0

    def build(self, commit, label):
        self.built.append(commit)
        if commit in self.unbuildable:
            raise RevisionBuildError(commit, "lib/layout/layout.cpp:3: error: expected ';'")
        return repeats.Side(label, commit[:12], commit)

    def launch(self, side, n, case_ids, folder):
        self.launches += 1
        rng = random.Random(zlib.crc32("/".join(pathlib.Path(folder).parts[-4:]).encode()))
        rows = []
        for case_id in case_ids:
            status = self.status.get((case_id, side.commit), "pass")
            row = {"id": case_id, "suite": case_id.split("/")[0], "name": case_id.split("/")[1], "kind": "layout",
                   "status": status, "message": self.message if status == "fail" else "", "plan": [],
                   "metrics": {"result": 9 if status == "fail" else 8}, "samples": {}}
            if case_id.startswith("perf/"):
                center = 1e-6 * self.factor(case_id, side.commit) * (1 + rng.gauss(0, self.noise))
                row["samples"] = {"time_s": [[center * (1 + rng.gauss(0, self.noise)) for _ in range(20)]]}
            rows.append(row)
        return {"schema": "meshgate.results/1",
                "run": {"id": f"{side.label}-{n}", "started": "2026-11-20T06:00:00Z",
                        "commit": side.commit, "dirty": False, "backend": "threads", "world_size": 1,
                        "machine": {"host": "ci-7", "cpu": "Fake CPU 3000", "gpus": [],
                                    "fingerprint": "ci-7"},
                        "versions": {"meshgate": "0.1.0", "cuda": None, "nccl": None, "mpi": None}},
                "cases": rows}


class BisectionTest(unittest.TestCase):
    def run_bisection(self, lab, history, ids, perf_ids, k=5):
        good, rest = history[0], history[1:]
        with tempfile.TemporaryDirectory() as tmp:
            real = timeline_culprit.Lab(lab.build, lab.launch, pathlib.Path(tmp), k=k, seed=3, revert_runs=k, log=io.StringIO())
            outcome = timeline_culprit.Bisection(real, good, rest[-1], rest, ids, perf_ids,
                                       info_for=lambda c: {"sha": c, "subject": "s", "author": "a", "date": "d"}).run()
            out = pathlib.Path(tmp) / "out"
            timeline_culprit.write_outputs(outcome, out, pathlib.Path(tmp) / "b.json")
            files = {p.name for p in out.iterdir()}
            written = json.loads((pathlib.Path(tmp) / "b.json").read_text())
        self.assertEqual(written, outcome.doc)
        return outcome, files

    def test_perf_culprit_found_confirmed_and_recommended(self):
        history = [f"{i:040x}" for i in range(1, 11)]  # good + 9 commits
        culprit, broken = history[6], history[4]

        def factor(case_id, commit):
            return 1.5 if case_id == "perf/size" and history.index(commit) >= 6 else 1.0

        lab = SyntheticLab(history, factor, unbuildable={broken})
        ids = ["perf/size", "perf/coalesce", "layout/cosize"]
        outcome, files = self.run_bisection(lab, history, ids, ["perf/size", "perf/coalesce"])
        doc = outcome.doc
        self.assertEqual(outcome.code, 0)
        self.assertEqual(doc["culprit"], culprit)
        self.assertEqual(set(doc), {"good", "bad", "culprit", "steps", "skipped", "evidence"})
        for step in doc["steps"]:
            self.assertLessEqual({"commit", "verdict", "reason", "ratio", "ci", "p"}, set(step))
            self.assertIn(step["verdict"], (GOOD, BAD, SKIP))
        self.assertEqual(doc["skipped"], [broken])
        ev = doc["evidence"]
        self.assertEqual(ev["commits"], 9)
        self.assertLessEqual(ev["tested"], bisection.cost_bound(9))
        self.assertEqual(ev["builds"], ev["tested"] + 1)
        self.assertEqual([t["id"] for t in ev["targets"]], ["perf/size"])
        self.assertEqual(ev["parent"], history[5])
        self.assertTrue(ev["recommendation"]["revert"])
        self.assertEqual(ev["recommendation"]["command"], f"git revert {culprit}")
        self.assertIn(f"git revert {culprit}", outcome.revert_md)
        self.assertLessEqual({"revert.md", "report.md", "comparison.json", "results.json", "bisect.json"}, files)
        bad_steps = [s for s in doc["steps"] if s["verdict"] == BAD]
        self.assertTrue(all(s["ratio"] > 1.4 for s in bad_steps))

    def test_correctness_culprit(self):
        history = [f"{i:040x}" for i in range(1, 8)]
        culprit = history[3]
        status = {("layout/cosize", c): "fail" for c in history[3:]}
        lab = SyntheticLab(history, lambda case_id, commit: 1.0, status=status)
        outcome, _ = self.run_bisection(lab, history, ["layout/cosize", "layout/size"], [])
        self.assertEqual(outcome.code, 0)
        self.assertEqual(outcome.doc["culprit"], culprit)
        self.assertEqual(outcome.doc["evidence"]["targets"][0]["kind"], "status")
        self.assertTrue(outcome.doc["evidence"]["recommendation"]["revert"])
        self.assertIn("expected 8, got 9", outcome.revert_md)
        self.assertLessEqual(outcome.doc["evidence"]["tested"], bisection.cost_bound(6))
        # a status-only bisection launches once per tested commit, then on parent and culprit again
        self.assertEqual(lab.launches, outcome.doc["evidence"]["tested"] + 2)

    def test_revert_md_lists_the_endpoint_cases_that_were_not_bisected(self):
        history = [f"{i:040x}" for i in range(1, 5)]

        def factor(case_id, commit):
            return 1.5 if case_id == "perf/size" and history.index(commit) >= 2 else 1.0

        skipped = {(f"perf/gpu-{i}", c): "skip" for i in range(3) for c in history}
        lab = SyntheticLab(history, factor, status=skipped)
        ids = ["perf/size", "perf/gpu-0", "perf/gpu-1", "perf/gpu-2"]
        outcome, _ = self.run_bisection(lab, history, ids, ids)
        self.assertEqual(outcome.doc["culprit"], history[2])
        md = outcome.revert_md
        self.assertIn("## Endpoint cases that were not bisected", md)
        self.assertIn("| `perf/*` (3 cases) | skip |", md)  # folded: one line per suite and reason
        self.assertNotIn("perf/gpu-1", md)
        self.assertEqual([c["id"] for c in outcome.doc["evidence"]["endpoint_cases"]],
                         ["perf/gpu-0", "perf/gpu-1", "perf/gpu-2"])

    def test_nothing_reproduces(self):
        history = [f"{i:040x}" for i in range(1, 6)]
        lab = SyntheticLab(history, lambda case_id, commit: 1.0)
        outcome, files = self.run_bisection(lab, history, ["perf/size", "layout/cosize"], ["perf/size"])
        self.assertEqual(outcome.code, 1)
        self.assertIsNone(outcome.doc["culprit"])
        self.assertEqual(outcome.doc["evidence"]["tested"], 2)
        self.assertIn("nothing reproduces", outcome.revert_md)
        self.assertIn("perf/size: pass", outcome.revert_md)
        self.assertIn("report.md", files)

    def endpoints_study(self, slowdown, noise):
        """A bisection over good + 3 commits whose last two are `slowdown` times slower; returns
        the outcome and the folders launched."""
        history = [f"{i:040x}" for i in range(1, 5)]
        lab = SyntheticLab(history, lambda case_id, commit: slowdown if history.index(commit) >= 2 else 1.0,
                           noise=noise)
        folders = []
        launch = lab.launch
        lab.launch = lambda side, n, ids, folder: folders.append(str(folder)) or launch(side, n, ids, folder)
        outcome, _ = self.run_bisection(lab, history, ["perf/size"], ["perf/size"], k=9)
        return history, outcome, folders

    def test_an_inconclusive_endpoint_a_b_gets_adaptive_runs(self):
        history, outcome, folders = self.endpoints_study(1.04, 0.04)
        self.assertTrue(any(f.endswith("endpoints/ab/batch-1/bad/run-18") for f in folders), folders)
        self.assertEqual((outcome.code, outcome.doc["culprit"]), (0, history[2]))

    def test_endpoints_that_stay_inconclusive_are_not_called_no_different(self):
        history, outcome, folders = self.endpoints_study(1.03, 0.05)
        self.assertEqual((outcome.code, outcome.doc["culprit"]), (1, None))
        bad = outcome.doc["steps"][1]
        self.assertEqual((bad["commit"], bad["verdict"]), (history[-1], SKIP))
        self.assertAlmostEqual(bad["ratio"], 1.03, delta=0.02)
        self.assertEqual(len(bad["ci"]), 2)
        self.assertIsNotNone(bad["p"])
        # The estimated need lies beyond --max-runs: no adaptive runs, and the reason says so.
        self.assertRegex(bad["reason"], r"need ~\d+ runs per side")
        self.assertFalse(any("batch-1/bad/run-10" in f for f in folders), folders)
        self.assertIn("cannot tell whether bad is worse than good", outcome.doc["evidence"]["reason"])
        self.assertNotIn("bad is not worse than good", outcome.revert_md)

    def test_unbuildable_commit_before_the_culprit_leaves_a_range(self):
        history = [f"{i:040x}" for i in range(1, 6)]  # good + 4
        lab = SyntheticLab(history, lambda case_id, commit: 1.0, unbuildable={history[2]},
                           status={("layout/cosize", c): "fail" for c in history[3:]})
        outcome, _ = self.run_bisection(lab, history, ["layout/cosize"], [])
        self.assertEqual(outcome.code, 1)
        self.assertIsNone(outcome.doc["culprit"])
        self.assertEqual(outcome.doc["evidence"]["suspects"], history[2:4])
        self.assertIn("not isolated", outcome.revert_md)

    def test_an_unbuildable_endpoint_is_unusable_input(self):
        history = [f"{i:040x}" for i in range(1, 4)]
        lab = SyntheticLab(history, lambda case_id, commit: 1.0, unbuildable={history[0]})
        with self.assertRaisesRegex(timeline_culprit.BisectError, "good endpoint .* does not build"):
            self.run_bisection(lab, history, ["layout/cosize"], [])

    def test_inconclusive_step_runs_again_then_takes_the_nearer_endpoint(self):
        history = [f"{i:040x}" for i in range(1, 4)]  # good, middle, bad

        def factor(case_id, commit):
            return {history[0]: 1.0, history[1]: 1.018, history[2]: 1.6}[commit]

        lab = SyntheticLab(history, factor, noise=0.02)
        outcome, _ = self.run_bisection(lab, history, ["perf/size"], ["perf/size"])
        middle = [s for s in outcome.doc["steps"] if s["commit"] == history[1]][0]
        self.assertEqual(middle["verdict"], GOOD, middle["reason"])
        if "nearer" in middle["reason"]:
            self.assertIn("on a log scale", middle["reason"])
            self.assertRegex(middle["reason"], r"inconclusive after (10|20|36) runs a side")
        self.assertEqual(outcome.doc["culprit"], history[2])


def make_args(argv):
    parser = argparse.ArgumentParser()
    bisect_command.register(parser.add_subparsers())
    return parser.parse_args(["bisect", *argv])


class CommandInputTest(unittest.TestCase):
    def setUp(self):
        tmp = tempfile.TemporaryDirectory()
        self.addCleanup(tmp.cleanup)
        self.repo = pathlib.Path(tmp.name) / "repo"
        self.repo.mkdir()
        git(self.repo, "init", "-q", "-b", "main")
        for name in ("one", "two"):
            (self.repo / name).write_text(name)
            git(self.repo, "add", name)
            git(self.repo, "commit", "-q", "-m", name)
        git(self.repo, "checkout", "-q", "-b", "side", "HEAD~1")
        (self.repo / "three").write_text("three")
        git(self.repo, "add", "three")
        git(self.repo, "commit", "-q", "-m", "three")

    def run_command(self, *argv):
        args = make_args(["--repo", str(self.repo), "--out", str(self.repo / "out"), *argv])
        with contextlib.redirect_stderr(io.StringIO()) as err, contextlib.redirect_stdout(io.StringIO()):
            code = args.func(args)
        return code, err.getvalue()

    def test_unknown_revision_exits_2(self):
        code, err = self.run_command("--good", "no-such-rev", "--bad", "main")
        self.assertEqual(code, 2)
        self.assertIn("no-such-rev", err)

    def test_good_not_an_ancestor_of_bad_exits_2(self):
        code, err = self.run_command("--good", "main", "--bad", "side")
        self.assertEqual(code, 2)
        self.assertIn("is not an ancestor", err)
        code, err = self.run_command("--good", "main", "--bad", "main")
        self.assertEqual((code, "same commit" in err), (2, True))
        self.assertFalse((self.repo / "build").exists())  # nothing was built

    def test_without_repo_the_checkout_of_the_driver_is_bisected(self):
        # --repo defaults to the driver's source root (or the current folder when installed).
        args = make_args(["--out", str(self.repo / "out"), "--good", "main", "--bad", "main"])
        with mock.patch.object(files, "source_root", return_value=self.repo), \
                contextlib.redirect_stderr(io.StringIO()) as err, contextlib.redirect_stdout(io.StringIO()):
            code = args.func(args)
        self.assertEqual((code, "same commit" in err.getvalue()), (2, True), err.getvalue())
        # Refused input leaves no report folder behind, with --out or without.
        args.out = None
        with mock.patch.object(files, "source_root", return_value=self.repo), \
                contextlib.redirect_stderr(io.StringIO()), contextlib.redirect_stdout(io.StringIO()):
            self.assertEqual(args.func(args), 2)
        self.assertFalse((self.repo / "reports").exists())
        self.assertFalse((self.repo / "out").exists())

    def test_runs_too_few_to_reach_alpha_are_refused_by_every_command(self):
        for argv in (["bisect", "--good", "main", "--bad", "main", "--runs", "3"],
                     ["bisect", "--good", "main", "--bad", "main", "--revert-runs", "4"],
                     ["ab", "--base", "main", "--candidate", "main", "--runs", "2"],
                     ["nightly", "--runs", "4"]):
            with contextlib.redirect_stderr(io.StringIO()) as err, self.assertRaises(SystemExit) as exit_:
                cli.main(argv)
            self.assertEqual(exit_.exception.code, 2, argv)
            self.assertIn("at least 5 runs per side, since fewer can never reach alpha = 0.01", err.getvalue())
        self.assertFalse((self.repo / "out").exists())

    def test_commit_range_follows_first_parents_through_merges(self):
        git(self.repo, "checkout", "-q", "main")
        git(self.repo, "merge", "-q", "--no-ff", "-m", "merge side", "side")
        base = git(self.repo, "rev-parse", "HEAD~1~1")
        history, first_parent = system_git.commit_range(self.repo, base, git(self.repo, "rev-parse", "HEAD"))
        self.assertTrue(first_parent)
        self.assertEqual(history, [git(self.repo, "rev-parse", "HEAD~1"), git(self.repo, "rev-parse", "HEAD")])
        linear, merged = system_git.commit_range(self.repo, base, git(self.repo, "rev-parse", "HEAD~1"))
        self.assertEqual((len(linear), merged), (1, False))


class CommandEndToEndTest(unittest.TestCase):
    """`meshgate bisect` through worktrees, cmake and the driver's launcher on a repository whose
    CMake project "builds" the fake perf runner; one commit does not configure."""

    def test_bisect_command(self):
        with tempfile.TemporaryDirectory() as tmp:
            tmp = pathlib.Path(tmp)
            repo = tmp / "repo"
            repo.mkdir()
            (repo / "CMakeLists.txt").write_text(
                "cmake_minimum_required(VERSION 3.25)\nproject(fake NONE)\n"
                "if(EXISTS ${CMAKE_SOURCE_DIR}/broken)\n  message(FATAL_ERROR \"broken on purpose\")\nendif()\n"
                "add_custom_target(meshgate-runner ALL COMMAND ${CMAKE_COMMAND} -E copy "
                "${CMAKE_SOURCE_DIR}/runner.sh ${CMAKE_BINARY_DIR}/meshgate-runner)\n")
            (repo / "CMakePresets.json").write_text(json.dumps({
                "version": 6,
                "configurePresets": [{"name": "cpu", "binaryDir": "${sourceDir}/build/${presetName}",
                                      "generator": "Unix Makefiles"}],
                "buildPresets": [{"name": "cpu", "configurePreset": "cpu"}]}))
            runner = repo / "runner.sh"
            runner.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{FAKE_PERF_RUNNER}" "$@"\n')
            runner.chmod(0o755)
            (repo / "cases").mkdir()
            (repo / "cases" / "perf.yaml").write_text("cases: []\n")
            git(repo, "init", "-q", "-b", "main")
            git(repo, "add", ".")
            git(repo, "commit", "-q", "-m", "base")
            # the first probe (the middle of six) lands on the commit that does not build
            steps = [("neutral 1", "a", None), ("neutral 2", "c", None), ("break the build", "broken", None),
                     ("fix the build", None, "broken"), ("make all-reduce slower", "b", None), ("neutral 3", "d", None)]
            for message, add, remove in steps:
                if add:
                    (repo / add).write_text(message)
                    git(repo, "add", add)
                if remove:
                    git(repo, "rm", "-q", remove)
                git(repo, "commit", "-q", "-m", message)
            history = git(repo, "rev-list", "--reverse", "HEAD").split()
            culprit, broken = history[5], history[3]
            config = tmp / "config.json"
            config.write_text(json.dumps({"noise": 0.003, "cases": [
                {"id": "coll/all-reduce", "time_s": 1e-3, "factor": {c: 1.3 for c in history[5:]}},
                {"id": "coll/all-gather", "time_s": 2e-3}]}))
            out = tmp / "report"
            args = make_args(["--repo", str(repo), "--good", history[0], "--bad", "main", "--runs", "5",
                              "--revert-runs", "5", "--seed", "5", "--preset", "cpu", "--out", str(out),
                              "--json", str(tmp / "bisect.json")])
            env = {"FAKE_PERF_CONFIG": str(config), "FAKE_PERF_LOG": str(tmp / "launches.jsonl")}
            with mock.patch.dict(os.environ, env), contextlib.redirect_stdout(io.StringIO()) as stdout, \
                    contextlib.redirect_stderr(io.StringIO()) as stderr:
                code = args.func(args)
            self.assertEqual(code, 0, stderr.getvalue())
            doc = json.loads((tmp / "bisect.json").read_text())
            self.assertEqual(doc["culprit"], culprit)
            self.assertEqual(doc["skipped"], [broken])
            self.assertEqual(doc["good"], history[0])
            self.assertEqual(doc["bad"], history[-1])
            self.assertLessEqual(doc["evidence"]["tested"], bisection.cost_bound(6))
            self.assertIn(f"culprit: {culprit}", stdout.getvalue())
            revert = (out / "revert.md").read_text()
            self.assertIn(f"git revert {culprit}", revert)
            self.assertIn("make all-reduce slower", revert)
            self.assertIn("Ada Lovelace", revert)
            for name in ("report.md", "comparison.json", "results.json", "bisect.json"):
                self.assertTrue((out / name).is_file(), name)
            comparison = json.loads((out / "comparison.json").read_text())
            self.assertEqual({c["id"]: c["verdict"] for c in comparison["cases"]}, {"coll/all-reduce": "regression"})


if __name__ == "__main__":
    unittest.main()
