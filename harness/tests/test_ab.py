import argparse
import contextlib
import io
import json
import os
import pathlib
import random
import statistics
import subprocess
import sys
import tempfile
import unittest
import zlib

from unittest import mock

from meshgate.commands import ab as ab_command
from meshgate.gate import ab
from meshgate.system import repeats, revisions

FAKE_RUNNER = pathlib.Path(__file__).parent / "fixtures" / "gate" / "fake_perf_runner.py"


def run_ab(argv: list, env: dict = None) -> tuple:
    """`meshgate ab ARGV` in this process, with `env` added to the environment: (exit code,
    stdout, stderr)."""
    parser = argparse.ArgumentParser()
    ab_command.register(parser.add_subparsers())
    args = parser.parse_args(["ab", *argv])
    with mock.patch.dict(os.environ, env or {}), contextlib.redirect_stdout(io.StringIO()) as out, \
            contextlib.redirect_stderr(io.StringIO()) as err:
        code = args.func(args)
    return code, out.getvalue(), err.getvalue()


class AbbaOrderTest(unittest.TestCase):
    def test_k_runs_per_side_in_balanced_blocks(self):
        rng = random.Random(1)
        for k in (2, 5, 9, 15):
            order = repeats.abba_order(k, rng)
            self.assertEqual(order.count(0), k)
            self.assertEqual(order.count(1), k)
            for start in range(0, 4 * (k // 2), 4):
                self.assertIn(order[start : start + 4], ([0, 1, 1, 0], [1, 0, 0, 1]))
            if k % 2:
                self.assertIn(order[-2:], ([0, 1], [1, 0]))

    def test_seeded_and_randomised(self):
        self.assertEqual(repeats.abba_order(9, random.Random(3)), repeats.abba_order(9, random.Random(3)))
        blocks = {tuple(repeats.abba_order(2, random.Random(s))) for s in range(20)}
        self.assertEqual(blocks, {(0, 1, 1, 0), (1, 0, 0, 1)})

    def test_drift_cancels_in_mean_position(self):
        order = repeats.abba_order(8, random.Random(5))
        pos_a = statistics.mean(i for i, s in enumerate(order) if s == 0)
        pos_b = statistics.mean(i for i, s in enumerate(order) if s == 1)
        self.assertEqual(pos_a, pos_b)


class SyntheticLaunch:
    """A launch function with known truth: factor per (side label, case id, batch folder)."""

    def __init__(self, factors, noise=0.02):
        self.factors = factors
        self.noise = noise
        self.calls = []

    def __call__(self, side, n, case_ids, folder):
        batch = pathlib.Path(folder).parent.parent.name
        self.calls.append((batch, side.label, n, tuple(case_ids)))
        rng = random.Random(zlib.crc32("/".join(pathlib.Path(folder).parts[-3:]).encode()))
        rows = []
        for case_id in case_ids:
            factor = self.factors.get((side.label, case_id, batch), self.factors.get((side.label, case_id), 1.0))
            center = 1e-3 * factor * (1 + rng.gauss(0, self.noise))
            iters = [center * (1 + rng.gauss(0, self.noise)) for _ in range(20)]
            rows.append({"id": case_id, "suite": "s", "name": case_id[2:], "kind": "collective", "status": "pass",
                         "message": "", "plan": [], "metrics": {}, "samples": {"time_s": [iters]}})
        return {"schema": "meshgate.results/1", "run": {"id": f"{side.label}-{n}", "machine": {"cpu": "x"}}, "cases": rows}


class RunAbTest(unittest.TestCase):
    def sides(self):
        return [repeats.Side("base", "v1", "a" * 40), repeats.Side("candidate", "v2", "b" * 40)]

    def test_interleaved_batch_then_confirmation_of_flagged_cases(self):
        ids = ["s/same", "s/slow", "s/flaky", "s/fast"]
        launch = SyntheticLaunch({
            ("candidate", "s/slow"): 1.10,
            ("candidate", "s/flaky", "batch-1"): 1.10,  # slower in the first batch only
            ("candidate", "s/fast"): 0.90,
        }, noise=0.005)
        with tempfile.TemporaryDirectory() as tmp:
            comparison, record = ab.run_ab(self.sides(), {"base": ids, "candidate": ids}, launch, pathlib.Path(tmp), k=9, seed=11)
            self.assertTrue((pathlib.Path(tmp) / "batch-1" / "candidate" / "results.json").is_file())
            self.assertTrue((pathlib.Path(tmp) / "batch-2" / "base" / "results.json").is_file())
        verdicts = {v.id: v for v in comparison.cases}
        self.assertEqual(verdicts["s/same"].verdict, "pass")
        self.assertEqual(verdicts["s/slow"].verdict, "regression")
        self.assertTrue(verdicts["s/slow"].confirmed)
        self.assertIn("confirmed by a fresh batch", verdicts["s/slow"].note)
        self.assertEqual(verdicts["s/flaky"].verdict, "inconclusive")
        self.assertFalse(verdicts["s/flaky"].confirmed)
        self.assertIn("not confirmed by a fresh batch", verdicts["s/flaky"].note)
        self.assertEqual(verdicts["s/fast"].verdict, "improvement")
        self.assertTrue(verdicts["s/fast"].confirmed)  # improvements are confirmed like regressions
        self.assertEqual(verdicts["s/slow"].confirm_verdict, "regression")
        self.assertGreater(verdicts["s/slow"].confirm_ci[0], 1.05)
        self.assertEqual(verdicts["s/flaky"].confirm_verdict, "pass")
        self.assertEqual(comparison.exit_code(), 1)
        self.assertEqual(verdicts["s/slow"].runs_base, 9)
        # Batch 1: 18 launches in the recorded ABBA order; batch 2: only the flagged cases.
        first = [c for c in launch.calls if c[0] == "batch-1"]
        self.assertEqual(["AB"[0 if c[1] == "base" else 1] for c in first], record["order"])
        second = [c for c in launch.calls if c[0] == "batch-2"]
        self.assertEqual(len(second), 18)
        self.assertTrue(all(c[3] == ("s/slow", "s/flaky", "s/fast") for c in second))
        self.assertEqual(record["confirmation"]["s/flaky"]["confirmed"], False)

    def test_an_improvement_that_does_not_repeat_is_inconclusive(self):
        launch = SyntheticLaunch({("candidate", "s/a", "batch-1"): 0.90}, noise=0.005)
        with tempfile.TemporaryDirectory() as tmp:
            comparison, record = ab.run_ab(self.sides(), {"base": ["s/a"], "candidate": ["s/a"]}, launch,
                                           pathlib.Path(tmp), k=9, seed=6)
        v = comparison.cases[0]
        self.assertEqual(v.verdict, "inconclusive")
        self.assertFalse(v.confirmed)
        self.assertIn("not confirmed by a fresh batch", v.note)
        self.assertEqual(record["confirmation"]["s/a"]["verdict"], "pass")

    def test_no_confirmation_batch_without_flags(self):
        launch = SyntheticLaunch({})
        with tempfile.TemporaryDirectory() as tmp:
            comparison, record = ab.run_ab(self.sides(), {"base": ["s/a"], "candidate": ["s/a"]}, launch, pathlib.Path(tmp),
                                           k=5, seed=2, max_runs=5)
        self.assertEqual(len(launch.calls), 10)
        self.assertEqual(len(record["batches"]), 1)
        self.assertEqual(comparison.exit_code(), 0)

    def test_an_inconclusive_case_gets_adaptive_runs_until_the_rule_decides(self):
        # 6 % slower under 5.5 % noise: 9 runs a side cannot tell, 18 or 36 can.
        launch = SyntheticLaunch({("candidate", "s/slow"): 1.06}, noise=0.055)
        with tempfile.TemporaryDirectory() as tmp:
            comparison, record = ab.run_ab(self.sides(), {"base": ["s/slow"], "candidate": ["s/slow"]}, launch,
                                           pathlib.Path(tmp), k=9, seed=4, max_runs=36)
        v = comparison.cases[0]
        self.assertEqual(v.verdict, "regression", v.note)
        self.assertTrue(v.confirmed)
        self.assertGreater(v.looks, 1)
        self.assertIn(f"look {v.looks} of 3", v.note)
        self.assertIn(v.runs_base, (18, 36))
        runs = [c[2] for c in launch.calls if c[0] == "batch-1" and c[1] == "candidate"]
        self.assertEqual(runs, list(range(1, v.runs_base + 1)))  # the later looks continue the batch
        self.assertEqual([look["runs"] for look in record["looks"]], [18, 36][:v.looks - 1])
        self.assertEqual([look["alpha"] for look in record["looks"]], [0.0025, 0.0025][:v.looks - 1])
        # The confirmation batch runs as many runs as the flag took.
        self.assertEqual(record["confirmation"]["s/slow"]["runs"], v.runs_base)
        self.assertEqual(sum(1 for c in launch.calls if c[0] == "batch-2"), 2 * v.runs_base)

    def test_max_runs_equal_to_runs_turns_adaptation_off(self):
        launch = SyntheticLaunch({("candidate", "s/slow"): 1.06}, noise=0.05)
        with tempfile.TemporaryDirectory() as tmp:
            comparison, record = ab.run_ab(self.sides(), {"base": ["s/slow"], "candidate": ["s/slow"]}, launch,
                                           pathlib.Path(tmp), k=9, seed=4, max_runs=9)
        self.assertEqual(comparison.cases[0].verdict, "inconclusive")
        self.assertEqual(comparison.cases[0].looks, 1)
        self.assertEqual(record["looks"], [])
        self.assertEqual(len(launch.calls), 18)

    def test_untimed_cases_run_once_per_side_for_their_correctness(self):
        launch = SyntheticLaunch({})
        broken = SyntheticLaunch({})

        def launching(side, n, ids, folder):
            doc = launch(side, n, ids, folder)
            for row in doc["cases"]:
                if side.label == "candidate" and row["id"] == "s/broken":
                    row["status"], row["message"] = "fail", "expected 8, got 9"
                if "status" in pathlib.Path(folder).parts:
                    row["samples"] = {}
            return doc

        with tempfile.TemporaryDirectory() as tmp:
            comparison, record = ab.run_ab(self.sides(), {"base": ["s/a"], "candidate": ["s/a"]}, launching,
                                           pathlib.Path(tmp), k=5, seed=2, max_runs=5,
                                           status_ids={"base": ["s/ok", "s/broken"], "candidate": ["s/ok", "s/broken"]})
        verdicts = {v.id: v.verdict for v in comparison.cases}
        self.assertEqual(verdicts["s/broken"], "correctness")
        self.assertEqual(verdicts["s/ok"], "pass")
        self.assertEqual(comparison.exit_code(), 1)
        status_calls = [c for c in launch.calls if c[0] != "batch-1"]
        self.assertEqual(len(status_calls), 2)  # once per side
        self.assertEqual(len(launch.calls), 12)

    def test_calibrated_floors_apply(self):
        launch = SyntheticLaunch({("candidate", "s/a"): 1.05}, noise=0.005)
        with tempfile.TemporaryDirectory() as tmp:
            strict, _ = ab.run_ab(self.sides(), {"base": ["s/a"], "candidate": ["s/a"]}, launch, pathlib.Path(tmp), k=9, seed=3)
            lenient, _ = ab.run_ab(self.sides(), {"base": ["s/a"], "candidate": ["s/a"]}, launch, pathlib.Path(tmp), k=9, seed=3,
                                   floors_for=lambda doc: {"s/a": 0.03})
        self.assertEqual(strict.cases[0].verdict, "regression")
        self.assertEqual(lenient.cases[0].verdict, "pass")
        self.assertAlmostEqual(lenient.cases[0].min_effect, 0.09)


def git(repo, *args):
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout.strip()


class WorktreeTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.repo = pathlib.Path(self.tmp.name) / "repo"
        self.repo.mkdir()
        git(self.repo, "init", "-q", "-b", "main")
        git(self.repo, "config", "user.email", "t@example.com")
        git(self.repo, "config", "user.name", "t")
        for text in ("one", "two"):
            (self.repo / "file.txt").write_text(text)
            git(self.repo, "add", "file.txt")
            git(self.repo, "commit", "-q", "-m", text)

    def tearDown(self):
        self.tmp.cleanup()

    def test_resolve_and_create_then_reuse(self):
        old = ab.resolve_commit(self.repo, "HEAD~1")
        self.assertEqual(old, git(self.repo, "rev-parse", "HEAD~1"))
        path = revisions.ensure_worktree(self.repo, old)
        self.assertEqual(path, self.repo / "build" / "ab" / old[:12])
        self.assertEqual((path / "file.txt").read_text(), "one")
        (path / "build-marker").write_text("kept")
        again = revisions.ensure_worktree(self.repo, old)
        self.assertEqual(again, path)
        self.assertEqual((path / "build-marker").read_text(), "kept")  # reused, not recreated
        new = revisions.ensure_worktree(self.repo, ab.resolve_commit(self.repo, "main"))
        self.assertEqual((new / "file.txt").read_text(), "two")

    def test_both_sides_are_the_commits_their_revisions_named_when_the_ab_started(self):
        head = git(self.repo, "rev-parse", "HEAD")
        built = {}

        def side_for(repo, label, rev, preset, case_paths=None, verbose=False, benchmark=None,
                     commit=None):
            built[label] = commit
            if label == "base":  # a commit lands while the base side builds
                (self.repo / "file.txt").write_text("three")
                git(self.repo, "commit", "-q", "-am", "three")
                return repeats.Side(label, rev, commit, runner=["true"])
            raise revisions.RevisionBuildError(commit, "stops here")

        request = ab.AbRequest(base="HEAD~1", candidate="HEAD", cases=ab.CaseFilter(),
                               repo=self.repo, out=pathlib.Path(self.tmp.name) / "out")
        with mock.patch.object(ab, "side_for", side_for), contextlib.redirect_stderr(io.StringIO()):
            outcome = ab.run_request(request)
        self.assertEqual(outcome.code, 2)
        self.assertNotEqual(git(self.repo, "rev-parse", "HEAD"), head)
        self.assertEqual(built, {"base": git(self.repo, "rev-parse", "HEAD~2"), "candidate": head})

    def test_unknown_revision(self):
        with self.assertRaises(ab.AbError) as e:
            ab.resolve_commit(self.repo, "no-such-branch")
        self.assertIn("'no-such-branch'", str(e.exception))

    def test_relative_cases_of_a_project_folder_name_that_folder_of_the_revision(self):
        from meshgate.system.selection import case_arguments

        sub = self.repo / "project" / "cases"
        sub.mkdir(parents=True)
        (sub / "a.yaml").write_text("cases: []  # old\n")
        git(self.repo, "add", "project")
        git(self.repo, "commit", "-q", "-m", "project")
        old = ab.resolve_commit(self.repo, "HEAD")
        (sub / "a.yaml").write_text("cases: []  # working tree\n")
        folder = revisions.revision_folder(self.repo / "project", old)
        self.assertEqual(folder, revisions.ensure_worktree(self.repo / "project", old) / "project")
        cwd = os.getcwd()
        try:
            os.chdir(self.repo / "project")  # where a user of the project types CASES
            paths, patterns = case_arguments(["cases/a.yaml", "suite/case-*"], folder)
        finally:
            os.chdir(cwd)
        self.assertEqual(patterns, ["suite/case-*"])
        self.assertEqual(paths, [str((folder / "cases" / "a.yaml").resolve())])
        self.assertIn("# old", pathlib.Path(paths[0]).read_text())

    def test_worktree_of_another_commit_is_refused(self):
        old = ab.resolve_commit(self.repo, "HEAD~1")
        path = revisions.ensure_worktree(self.repo, old)
        git(path, "checkout", "-q", "--detach", "main")
        with self.assertRaises(ab.AbError) as e:
            revisions.ensure_worktree(self.repo, old)
        self.assertIn("git worktree remove", str(e.exception))


class DriverLaunchEndToEndTest(unittest.TestCase):
    """run_ab through the driver's launch module against a fake runner process."""

    def test_fake_runner_processes(self):
        with tempfile.TemporaryDirectory() as tmp:
            tmp = pathlib.Path(tmp)
            config = tmp / "config.json"
            config.write_text(json.dumps({"noise": 0.003, "cases": [
                {"id": "coll/all-reduce", "time_s": 1e-3, "factor": {"c" * 40: 1.15}},
                {"id": "coll/all-gather", "time_s": 2e-3},
            ]}))
            log = tmp / "launches.jsonl"
            env = dict(os.environ, FAKE_PERF_CONFIG=str(config), FAKE_PERF_LOG=str(log))
            runner = [sys.executable, str(FAKE_RUNNER)]
            sides = [
                repeats.Side("base", "v1", "b" * 40, runner=runner, env=repeats.env_for_commit("b" * 40, env), case_paths=[str(tmp)]),
                repeats.Side("candidate", "v2", "c" * 40, runner=runner, env=repeats.env_for_commit("c" * 40, env), case_paths=[str(tmp)]),
            ]
            launcher = repeats.DriverLauncher(run_prefix="ab", quiet=True, stamp="test")
            from meshgate.system.launch import Selection

            ids = repeats.perf_case_ids(launcher.list_cases(sides[0], Selection(paths=[str(tmp)])))
            self.assertEqual(ids, ["coll/all-reduce", "coll/all-gather"])
            comparison, record = ab.run_ab(sides, {"base": ids, "candidate": ids}, launcher, tmp / "out", k=5, seed=4)
            launches = [json.loads(line) for line in log.read_text().splitlines()]
        verdicts = {v.id: v.verdict for v in comparison.cases}
        self.assertEqual(verdicts, {"coll/all-reduce": "regression", "coll/all-gather": "pass"})
        self.assertEqual(comparison.new_run["commit"], "c" * 40)
        # 10 launches in batch 1 (ABBA order, commit passed through MESHGATE_COMMIT), then 10
        # confirmation launches of the flagged case only.
        self.assertEqual(len(launches), 20)
        self.assertEqual(["AB"[l["commit"] == "c" * 40] for l in launches[:10]], record["order"])
        self.assertTrue(all(l["cases"] == ["coll/all-reduce"] for l in launches[10:]))
        self.assertTrue(record["confirmation"]["coll/all-reduce"]["confirmed"])


class AbCliTest(unittest.TestCase):
    def test_unknown_revision_exits_2(self):
        code, _, err = run_ab(["--base", "no-such-rev-xyz", "--candidate", "HEAD"])
        self.assertEqual(code, 2)
        self.assertIn("no-such-rev-xyz", err)

    def test_prebuilt_runners_need_each_other_and_no_revision(self):
        for argv, said in ((["--base-runner", sys.executable], "give both --base-runner PATH and --candidate-runner"),
                           (["--base-runner", sys.executable, "--candidate-runner", sys.executable, "--base", "HEAD"],
                            "they replace --base, --candidate and --google-benchmark"),
                           (["--base-runner", "/no/such/runner", "--candidate-runner", sys.executable],
                            "base: --runner /no/such/runner is not an executable file")):
            code, _, err = run_ab(argv)
            self.assertEqual(code, 2, argv)
            self.assertIn(said, err)


class PrebuiltRunnersTest(unittest.TestCase):
    """`meshgate ab --base-runner A --candidate-runner B`: two runners built elsewhere (a user's
    own, say), run on the same cases with nothing built; a planted slowdown in B is caught."""

    def test_two_prebuilt_runners(self):
        with tempfile.TemporaryDirectory() as tmp:
            tmp = pathlib.Path(tmp)
            config = tmp / "config.json"
            config.write_text(json.dumps({"noise": 0.003, "cases": [
                {"id": "coll/all-reduce", "time_s": 1e-3, "factor": {"slow": 1.2}},
                {"id": "coll/all-gather", "time_s": 2e-3},
            ]}))
            (tmp / "cases").mkdir()
            (tmp / "cases" / "perf.yaml").write_text("cases: []\n")
            runners = {}
            for name, commit in (("fast", ""), ("slow", "slow")):
                runners[name] = tmp / f"{name}-runner"
                runners[name].write_text(f'#!/bin/sh\nMESHGATE_COMMIT={commit} exec "{sys.executable}" '
                                         f'"{FAKE_RUNNER}" "$@"\n')
                runners[name].chmod(0o755)
            log, out = tmp / "launches.jsonl", tmp / "report"
            env = {"FAKE_PERF_CONFIG": str(config), "FAKE_PERF_LOG": str(log)}
            code, stdout, stderr = run_ab(["--base-runner", str(runners["fast"]), "--candidate-runner",
                                           str(runners["slow"]), str(tmp / "cases"), "--runs", "5",
                                           "--seed", "3", "--out", str(out)], env)
            self.assertEqual(code, 1, stderr)
            self.assertIn("FAIL: 1 regression", stdout)
            self.assertIn("prebuilt: nothing is built", stderr)
            launches = [json.loads(line) for line in log.read_text().splitlines()]
            self.assertEqual({l["commit"] for l in launches}, {"", "slow"})
            by_id = {c["id"]: c for c in json.loads((out / "comparison.json").read_text())["cases"]}
            self.assertEqual(by_id["coll/all-reduce"]["verdict"], "regression")
            self.assertEqual(by_id["coll/all-gather"]["verdict"], "pass")
            record = json.loads((out / "ab.json").read_text())
            self.assertEqual(record["candidate"]["rev"], f"runner {runners['slow'].resolve()}")
            self.assertEqual(record["base"]["commit"], "")
            self.assertFalse((tmp / "build").exists())


if __name__ == "__main__":
    unittest.main()


class AbCommandEndToEndTest(unittest.TestCase):
    """`meshgate ab` on a temporary git repository whose CMake project "builds" a fake runner:
    worktrees, cmake --preset, MESHGATE_COMMIT, ABBA launches, confirmation and reports."""

    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.repo = pathlib.Path(self.tmp.name) / "repo"
        self.repo.mkdir()
        (self.repo / "CMakeLists.txt").write_text(
            "cmake_minimum_required(VERSION 3.25)\nproject(fake NONE)\n"
            "add_custom_target(meshgate-runner ALL COMMAND ${CMAKE_COMMAND} -E copy "
            "${CMAKE_SOURCE_DIR}/runner.sh ${CMAKE_BINARY_DIR}/meshgate-runner)\n")
        (self.repo / "CMakePresets.json").write_text(json.dumps({
            "version": 6,
            "configurePresets": [{"name": "cpu", "binaryDir": "${sourceDir}/build/${presetName}", "generator": "Unix Makefiles"}],
            "buildPresets": [{"name": "cpu", "configurePreset": "cpu"}],
        }))
        runner = self.repo / "runner.sh"
        runner.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{FAKE_RUNNER}" "$@"\n')
        runner.chmod(0o755)
        (self.repo / "cases").mkdir()
        (self.repo / "cases" / "perf.yaml").write_text("cases: []\n")
        git(self.repo, "init", "-q", "-b", "main")
        git(self.repo, "config", "user.email", "t@example.com")
        git(self.repo, "config", "user.name", "t")
        git(self.repo, "add", ".")
        git(self.repo, "commit", "-q", "-m", "base")
        (self.repo / "README").write_text("candidate\n")
        git(self.repo, "add", "README")
        git(self.repo, "commit", "-q", "-m", "candidate")
        self.base = git(self.repo, "rev-parse", "HEAD~1")
        self.candidate = git(self.repo, "rev-parse", "HEAD")

    def tearDown(self):
        self.tmp.cleanup()

    def test_ab_command(self):
        config = pathlib.Path(self.tmp.name) / "config.json"
        config.write_text(json.dumps({"noise": 0.003, "cases": [
            {"id": "coll/all-reduce", "time_s": 1e-3, "factor": {self.candidate: 1.2}},
            {"id": "coll/all-gather", "time_s": 2e-3},
        ]}))
        log = pathlib.Path(self.tmp.name) / "launches.jsonl"
        out = pathlib.Path(self.tmp.name) / "report"
        argv = ["--repo", str(self.repo), "--base", "HEAD~1", "--candidate", "main",
                "--runs", "5", "--seed", "7", "--preset", "cpu", "--out", str(out)]
        env = {"FAKE_PERF_CONFIG": str(config), "FAKE_PERF_LOG": str(log)}
        code, stdout, stderr = run_ab(argv, env)
        self.assertEqual(code, 1, stderr)
        self.assertIn("FAIL: 1 regression", stdout)
        for commit in (self.base, self.candidate):
            self.assertTrue((self.repo / "build" / "ab" / commit[:12] / "build" / "cpu" / "meshgate-runner").is_file())
        launches = [json.loads(line) for line in log.read_text().splitlines()]
        self.assertEqual(len(launches), 20)  # 2 x 5 interleaved, then 2 x 5 confirming one case
        self.assertEqual({l["commit"] for l in launches}, {self.base, self.candidate})
        verdicts = json.loads((out / "comparison.json").read_text())
        by_id = {c["id"]: c for c in verdicts["cases"]}
        self.assertEqual(by_id["coll/all-reduce"]["verdict"], "regression")
        self.assertTrue(by_id["coll/all-reduce"]["confirmed"])
        self.assertEqual(by_id["coll/all-gather"]["verdict"], "pass")
        record = json.loads((out / "ab.json").read_text())
        self.assertEqual(record["candidate"]["commit"], self.candidate)
        self.assertEqual(json.loads((out / "results.json").read_text())["run"]["commit"], self.candidate)
        for name in ("report.md", "report.html", "junit.xml"):
            self.assertTrue((out / name).is_file(), name)

        # A second A/B reuses both worktrees and their builds.
        self.assertEqual(run_ab(argv, env)[0], 1)


class PremergeSelectionTest(unittest.TestCase):
    """ci/premerge's timing step selects what plain `meshgate ab` selects: every case with a
    `perf:` block is timed before merge, whatever its tags (the CPU GEMM timed cases are tagged
    smoke, not perf)."""

    REPO = pathlib.Path(__file__).resolve().parents[2]

    def premerge_ab_arguments(self, *extra: str) -> list:
        with tempfile.TemporaryDirectory() as tmp:
            record = pathlib.Path(tmp) / "argv.json"
            driver = pathlib.Path(tmp) / "driver"
            driver.write_text(f"#!{sys.executable}\nimport json, sys\n"
                              f"open({str(record)!r}, 'w').write(json.dumps(sys.argv[1:]))\n")
            driver.chmod(0o755)
            env = dict(os.environ, MESHGATE_PREMERGE_STEPS="perf", MESHGATE_BASE="HEAD",
                       MESHGATE_DRIVER=str(driver))
            proc = subprocess.run([str(self.REPO / "ci" / "premerge"), *extra], cwd=self.REPO, env=env,
                                  capture_output=True, text=True)
            self.assertEqual(proc.returncode, 0, proc.stderr)
            return json.loads(record.read_text())

    @staticmethod
    def request(argv: list) -> ab.AbRequest:
        parser = argparse.ArgumentParser()
        ab_command.register(parser.add_subparsers())
        return ab_command.request_from_args(parser.parse_args(argv))

    def test_premerge_selects_what_ab_selects(self):
        argv = self.premerge_ab_arguments()
        self.assertEqual(argv, ["ab", "--base", "HEAD", "--candidate", "HEAD"])
        premerge = self.request(argv).cases
        plain = self.request(["ab", "--base", "HEAD", "--candidate", "HEAD"]).cases
        self.assertEqual(premerge, plain)
        self.assertFalse(premerge.asks())

        # On a listing like cases/'s: a perf case tagged smoke, one tagged perf, a smoke case
        # without timing, and an untagged, untimed case.
        listing = [{"id": "gemm/bias-cpu", "tags": ["smoke"], "perf": {"runs": 5}},
                   {"id": "coll/all-reduce-8MiB", "tags": ["perf"], "perf": {"runs": 5}},
                   {"id": "layout/coalesce", "tags": ["smoke"]},
                   {"id": "mesh/big", "tags": ["nightly"]}]

        class Listing:
            def list_cases(self, side, selection):
                return listing

        side = repeats.Side("base", "HEAD", "a" * 40, runner=["runner"], case_paths=["cases"])
        selected, timed = ab.experiment_cases(Listing(), side, [], premerge)
        self.assertEqual(timed, ["gemm/bias-cpu", "coll/all-reduce-8MiB"])
        self.assertEqual(selected, ["gemm/bias-cpu", "coll/all-reduce-8MiB", "layout/coalesce"])

    def test_extra_arguments_still_reach_ab(self):
        argv = self.premerge_ab_arguments("--runs", "15", "--tag", "perf")
        self.assertEqual(argv, ["ab", "--base", "HEAD", "--candidate", "HEAD", "--runs", "15", "--tag", "perf"])
