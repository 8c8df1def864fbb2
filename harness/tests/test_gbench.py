"""`meshgate ab` and `meshgate bisect` with --google-benchmark TARGET: each revision builds its
own benchmark binary (that target only), its benchmarks are the cases, one launch of the binary
is one run. A fake binary (fixtures/gate/fake_gbench.py) speaks Google Benchmark's flags and
JSON; a revision of a scratch repository plants a slowdown of BM_Coalesce in it."""

import argparse
import contextlib
import io
import json
import os
import pathlib
import shutil
import sys
import tempfile
import unittest
from unittest import mock

from meshgate import cli
from meshgate.commands import ab as ab_command
from meshgate.commands import bisect as bisect_command
from meshgate.core import schema, tool_results
from meshgate.gate import ab
from meshgate.system import gbench
from meshgate.system.launch import Selection
from meshgate.system.repeats import Side
from meshgate.timeline import bisection
from tests.support import once

FAKE_GBENCH = pathlib.Path(__file__).parent / "fixtures" / "gate" / "fake_gbench.py"
TARGET = "fake_bench"


def git(repo, *args):
    import subprocess
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout.strip()


def side(label, factor, *extra):
    return Side(label=label, rev=label, commit=f"{label}-commit",
                runner=[sys.executable, str(FAKE_GBENCH), "--factor", str(factor), *extra], env=dict(os.environ))


@once("real benchmark binaries, timed")
class LauncherTest(unittest.TestCase):
    def setUp(self):
        tmp = tempfile.TemporaryDirectory()
        self.addCleanup(tmp.cleanup)
        self.tmp = pathlib.Path(tmp.name)

    def test_benchmarks_are_selected_by_name_or_id_suite_and_never_by_tag(self):
        launcher = gbench.BenchmarkLauncher(TARGET)
        listed = lambda **kw: [e["id"] for e in launcher.list_cases(side("a", 1.0), Selection(paths=[], **kw))]
        self.assertEqual(listed(cases=["BM_Coalesce*"]), ["fake_bench/BM_Coalesce", "fake_bench/BM_CoalesceNested"])
        self.assertEqual(listed(cases=["fake_bench/BM_Complement"]), ["fake_bench/BM_Complement"])
        self.assertEqual(listed(cases=["BM_Shape/*"]), ["fake_bench/BM_Shape-8"])  # '/' is not an id character
        self.assertEqual(len(listed()), 4)
        self.assertEqual(listed(suites=["other"]), [])
        self.assertEqual(len(listed(suites=[TARGET])), 4)
        self.assertEqual(listed(tags=["perf"]), [])
        entry = launcher.list_cases(side("a", 1.0), Selection(paths=[], cases=["BM_Complement"]))[0]
        self.assertIsInstance(entry["perf"], dict)  # every benchmark is a timed case

    def test_one_launch_runs_exactly_the_asked_benchmarks_once(self):
        log = self.tmp / "flags.jsonl"
        launcher = gbench.BenchmarkLauncher(TARGET, clock="cpu", repetitions=4, min_time=0.05)
        with mock.patch.dict(os.environ, {"FAKE_GBENCH_LOG": str(log)}):
            a = side("a", 1.0)
            launcher.list_cases(a, Selection(paths=[]))
            doc = launcher(a, 1, ["fake_bench/BM_Shape-8", "fake_bench/BM_Coalesce"], self.tmp / "run-1")
        schema.check(doc, "results-1")
        self.assertEqual([r["id"] for r in doc["cases"]], ["fake_bench/BM_Shape-8", "fake_bench/BM_Coalesce"])
        self.assertEqual({r["status"] for r in doc["cases"]}, {"pass"})
        for row in doc["cases"]:
            self.assertEqual(len(row["samples"]["time_s"]), 1)      # one launch: one sample list
            self.assertEqual(len(row["samples"]["time_s"][0]), 4)   # of the repetitions
        coalesce = doc["cases"][1]["samples"]["time_s"][0]
        self.assertTrue(all(30e-9 < t < 36e-9 for t in coalesce), coalesce)  # cpu_time, not 1.05 x real_time
        flags = [json.loads(line) for line in log.read_text().splitlines()][-1]
        self.assertEqual(flags["benchmark_filter"], "^(BM_Shape/8|BM_Coalesce)$")
        self.assertEqual((flags["benchmark_repetitions"], flags["benchmark_min_time"]), ("4", "0.05"))
        self.assertEqual(flags["benchmark_out"], str(self.tmp / "run-1" / gbench.OUTPUT))
        self.assertEqual(doc["run"]["commit"], "a-commit")
        self.assertEqual(doc["run"]["benchmark"]["clock"], "cpu")

    def test_real_time_is_the_default_clock(self):
        launcher = gbench.BenchmarkLauncher(TARGET, repetitions=3)
        doc = launcher(side("a", 1.0), 1, ["fake_bench/BM_Coalesce"], self.tmp / "run-1")
        samples = doc["cases"][0]["samples"]["time_s"][0]
        self.assertTrue(all(33.0 < t * 1e9 < 36.5 for t in samples), samples)  # 1.05 x the cpu time

    def test_a_binary_that_crashes_gives_error_rows_naming_its_exit(self):
        launcher = gbench.BenchmarkLauncher(TARGET, repetitions=2)
        doc = launcher(side("a", 1.0, "--crash", "BM_Coalesce"), 1, ["fake_bench/BM_Coalesce"], self.tmp / "run-1")
        row = doc["cases"][0]
        self.assertEqual(row["status"], "error")
        self.assertIn("exited with code 139", row["message"])
        self.assertIn("Segmentation fault", row["message"])

    def test_cpus_pin_each_launch_with_taskset_and_are_recorded(self):
        launcher = gbench.BenchmarkLauncher(TARGET, cpus="0")
        a = side("a", 1.0)
        self.assertEqual(launcher.command(a, "--x")[:3], ["taskset", "-c", "0"])
        self.assertEqual(gbench.cpu_numbers("0-2,5,1"), [0, 1, 2, 5])
        if shutil.which("taskset"):
            doc = launcher(a, 1, ["fake_bench/BM_Complement"], self.tmp / "run-1")
            self.assertEqual((doc["cases"][0]["status"], doc["run"]["cpus"]), ("pass", [0]))

    def test_filter_escapes_regular_expression_characters(self):
        self.assertEqual(gbench.filter_for(["BM_a/8", "BM_b<int>(x)", "a.b*"]),
                         r"^(BM_a/8|BM_b<int>\(x\)|a\.b\*)$")

    def test_interleaved_ab_finds_the_planted_slowdown_of_one_benchmark(self):
        launcher = gbench.BenchmarkLauncher(TARGET, repetitions=3)
        sides = [side("base", 1.0), side("candidate", 1.15)]
        ids = [e["id"] for e in launcher.list_cases(sides[0], Selection(paths=[], cases=["BM_Coalesce*"]))]
        comparison, record = ab.run_ab(sides, {"base": ids, "candidate": ids}, launcher, self.tmp / "ab", k=5, seed=3)
        verdicts = {v.id: v for v in comparison.cases}
        self.assertEqual(verdicts["fake_bench/BM_Coalesce"].verdict, "regression")
        self.assertTrue(verdicts["fake_bench/BM_Coalesce"].confirmed)
        self.assertAlmostEqual(verdicts["fake_bench/BM_Coalesce"].ratio, 1.15, delta=0.02)
        self.assertEqual(verdicts["fake_bench/BM_CoalesceNested"].verdict, "pass")
        self.assertTrue((self.tmp / "ab" / "batch-1" / "candidate" / "run-5" / gbench.OUTPUT).is_file())


class ClockTest(unittest.TestCase):
    def test_cpu_clock_reads_cpu_time(self):
        doc = {"benchmarks": [{"name": "BM_X", "run_type": "iteration", "real_time": 2.0, "cpu_time": 1.5,
                               "time_unit": "us"}]}
        rows, _ = tool_results.google_benchmark(doc, "s", clock="cpu")
        self.assertAlmostEqual(rows[0]["samples"]["time_s"][0][0], 1.5e-6)
        rows, _ = tool_results.google_benchmark(doc, "s")
        self.assertAlmostEqual(rows[0]["samples"]["time_s"][0][0], 2.0e-6)
        with self.assertRaises(ValueError):
            tool_results.google_benchmark(doc, "s", clock="wall")


def scratch_repo(root: pathlib.Path, factors: list) -> list:
    """A git repository whose CMake project "builds" TARGET (a copy of bench.sh, which runs the
    fake binary with the commit's --factor) with the preset `release`, configures only with
    benchmarks on, and has an ALL target that fails: a build of more than TARGET fails. One
    commit per factor; returns the commits, oldest first."""
    repo = root / "repo"
    repo.mkdir()
    (repo / "CMakeLists.txt").write_text(
        "cmake_minimum_required(VERSION 3.25)\nproject(fake NONE)\n"
        "if(NOT MESHGATE_BUILD_BENCHMARKS)\n  message(FATAL_ERROR \"benchmarks are off\")\nendif()\n"
        "add_custom_target(everything_else ALL COMMAND ${CMAKE_COMMAND} -E false)\n"
        f"add_custom_target({TARGET} COMMAND ${{CMAKE_COMMAND}} -E copy "
        f"${{CMAKE_SOURCE_DIR}}/bench.sh ${{CMAKE_BINARY_DIR}}/{TARGET})\n")
    (repo / "CMakePresets.json").write_text(json.dumps({
        "version": 6,
        "configurePresets": [{"name": "release", "binaryDir": "${sourceDir}/build/${presetName}",
                              "generator": "Unix Makefiles"}],
        "buildPresets": [{"name": "release", "configurePreset": "release"}]}))
    git(repo, "init", "-q", "-b", "main")
    git(repo, "config", "user.email", "t@example.com")
    git(repo, "config", "user.name", "t")
    commits = []
    for i, factor in enumerate(factors):
        bench = repo / "bench.sh"
        bench.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{FAKE_GBENCH}" --factor {factor} "$@"\n')
        bench.chmod(0o755)
        (repo / "step").write_text(f"{i}\n")
        git(repo, "add", ".")
        git(repo, "commit", "-q", "-m", f"step {i}: coalesce x{factor}")
        commits.append(git(repo, "rev-parse", "HEAD"))
    return commits


def run_cli(register, argv):
    parser = argparse.ArgumentParser()
    register(parser.add_subparsers())
    args = parser.parse_args(argv)
    with contextlib.redirect_stdout(io.StringIO()) as stdout, contextlib.redirect_stderr(io.StringIO()) as stderr:
        code = args.func(args)
    return code, stdout.getvalue(), stderr.getvalue()


@once("real builds and benchmark runs")
class CommandEndToEndTest(unittest.TestCase):
    """Both commands through worktrees, cmake --build --target TARGET and the fake binary."""

    def setUp(self):
        tmp = tempfile.TemporaryDirectory()
        self.addCleanup(tmp.cleanup)
        self.tmp = pathlib.Path(tmp.name)

    def test_bisect_finds_the_commit_that_slowed_one_benchmark(self):
        history = scratch_repo(self.tmp, [1.0, 1.0, 1.0, 1.2, 1.2, 1.2])
        out = self.tmp / "report"
        code, stdout, stderr = run_cli(bisect_command.register, [
            "bisect", "--repo", str(self.tmp / "repo"), "--good", history[0], "--bad", "main",
            "--google-benchmark", TARGET, "--case", "BM_Coalesce*", "--benchmark-repetitions", "3",
            "--runs", "5", "--revert-runs", "5", "--seed", "5", "--out", str(out)])
        self.assertEqual(code, 0, stderr)
        doc = json.loads((out / "bisect.json").read_text())
        self.assertEqual(doc["culprit"], history[3])
        self.assertEqual([t["id"] for t in doc["evidence"]["targets"]], ["fake_bench/BM_Coalesce"])
        self.assertLessEqual(doc["evidence"]["tested"], bisection.cost_bound(5))
        self.assertIn(f"culprit: {history[3]}", stdout)
        revert = (out / "revert.md").read_text()
        self.assertIn(f"git revert {history[3]}", revert)
        self.assertIn("coalesce x1.2", revert)
        binary = self.tmp / "repo" / "build" / "ab" / history[3][:12] / "build" / "release" / TARGET
        self.assertTrue(binary.is_file())  # the default preset of a benchmark, target only
        self.assertTrue((binary.parent / ".meshgate-built-fake_bench.json").is_file())

    def test_ab_command_and_its_refusals(self):
        history = scratch_repo(self.tmp, [1.0, 1.2])
        repo, out = str(self.tmp / "repo"), self.tmp / "report"
        common = ["ab", "--repo", repo, "--base", history[0], "--candidate", history[1], "--google-benchmark", TARGET,
                  "--benchmark-repetitions", "3", "--runs", "5", "--seed", "1", "--out", str(out)]
        code, stdout, stderr = run_cli(ab_command.register, common + ["BM_Coalesce", "--benchmark-clock", "cpu"])
        self.assertEqual(code, 1, stderr)
        self.assertIn("FAIL: 1 regression", stdout)
        results = json.loads((out / "results.json").read_text())
        self.assertEqual([r["id"] for r in results["cases"]], ["fake_bench/BM_Coalesce"])
        self.assertEqual(results["run"]["commit"], history[1])

        code, _, stderr = run_cli(ab_command.register, common + ["--impl", "torch"])
        self.assertEqual(code, 2)
        self.assertIn("--google-benchmark", stderr)
        code, _, stderr = run_cli(ab_command.register, common + ["--case", "BM_Nothing*"])
        self.assertEqual(code, 2)
        self.assertIn("no case is selected", stderr)

    def test_bad_benchmark_options_are_usage_errors(self):
        for extra in (["--benchmark-repetitions", "0"], ["--benchmark-min-time", "-1"],
                      ["--benchmark-clock", "wall"]):
            with contextlib.redirect_stderr(io.StringIO()), self.assertRaises(SystemExit) as exit_:
                cli.main(["bisect", "--good", "a", "--bad", "b", "--google-benchmark", TARGET, *extra])
            self.assertEqual(exit_.exception.code, 2, extra)


if __name__ == "__main__":
    unittest.main()
