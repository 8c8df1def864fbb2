import contextlib
import datetime
import io
import json
import os
import re
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path
from unittest import mock

from meshgate import cli
from meshgate.commands import listing
from meshgate.commands import run as run_command
from meshgate.core import files, results
from meshgate.gate import checks
from meshgate.run import session
from meshgate.system import git, launch
from meshgate.system.launch import RunnerSetup, Selection

from .support import FAKE_RUNNER, FakeRunner, option_values

REPO = Path(__file__).resolve().parents[2]


class CliTestCase(unittest.TestCase):
    """Runs `meshgate ...` in-process against the fake runner, with the report and the
    comparison (other modules' work) replaced by recorders."""

    scenario = "passing"

    def setUp(self):
        self.fake = FakeRunner(self.scenario)
        self.addCleanup(self.fake.__exit__)
        self.root = self.fake.dir / "repo"
        (self.root / "cases").mkdir(parents=True)
        self.fake.env["MESHGATE_COMMIT"] = "59fa4d3deadbeef"
        for patcher in (self.fake.environ(),
                        mock.patch("meshgate.core.files.source_root", return_value=self.root)):
            patcher.start()
            self.addCleanup(patcher.stop)
        self.report = mock.patch("meshgate.run.report.write_run_report",
                                 side_effect=lambda out, doc, sections=(): [out / "report.md"]).start()
        self.addCleanup(mock.patch.stopall)
        self.compare = mock.patch("meshgate.gate.checks.compare_with_baseline",
                                  return_value=checks.TimingCheck(0)).start()

    def meshgate(self, *argv):
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = cli.main(list(argv))
        return code, out.getvalue(), err.getvalue()

    def results(self, out_dir: Path) -> dict:
        return json.loads((out_dir / "results.json").read_text())


class NothingTestedTest(CliTestCase):
    """A run where every case is skipped (--backend nccl on a machine without a GPU) tested
    nothing: it must not exit 0 unless the user says that is expected."""

    scenario = {"cases": [
        {"id": "coll/all-reduce", "kind": "collective", "tags": ["smoke"], "outcome": "skip",
         "message": "nccl backend: no GPU visible"},
        {"id": "coll/all-gather", "kind": "collective", "tags": ["smoke"], "outcome": "skip",
         "message": "nccl backend: no GPU visible"}]}

    def test_all_skipped_exits_2_saying_nothing_was_tested(self):
        code, out, err = self.meshgate("run")
        self.assertEqual(code, 2, out + err)
        self.assertIn("nothing was tested: all 2 case(s) were skipped", out)
        self.assertIn("nccl backend: no GPU visible", out)

    def test_allow_all_skipped(self):
        code, out, err = self.meshgate("run", "--allow-all-skipped")
        self.assertEqual(code, 0, out + err)
        self.assertNotIn("nothing was tested", out)


class ResumeTest(CliTestCase):
    def test_resume_keeps_the_finished_cases_and_runs_the_rest(self):
        run_dir = self.root / "reports" / "20261121-071500-59fa4d3"
        run_dir.mkdir(parents=True)
        kept = {"id": "layout-algebra/coalesce-a", "suite": "layout-algebra", "kind": "layout",
                "status": "pass", "message": "", "params": {}, "plan": [], "metrics": {},
                "samples": {}, "seconds": 0.1}
        (run_dir / "results.jsonl").write_text(json.dumps(kept) + "\n")
        code, out, err = self.meshgate("run", "--resume", str(run_dir))
        self.assertEqual(code, 0, out + err)
        argv = self.fake.run_launches()[0]
        self.assertIn("--resume", argv)
        self.assertEqual(option_values(argv, "--out"), [str(run_dir)])
        document = self.results(run_dir)
        self.assertEqual([c["id"] for c in document["cases"]],
                         ["layout-algebra/coalesce-a", "layout-algebra/composition-b", "mesh/hsdp-flatten"])
        self.assertEqual(document["cases"][0]["seconds"], 0.1)  # kept, not run again

    def test_resume_needs_a_run_to_continue(self):
        code, out, err = self.meshgate("run", "--resume", str(self.root / "nothing-here"))
        self.assertEqual(code, 2)
        self.assertIn("no results.jsonl", err)


class RunDefaultsTest(CliTestCase):
    def test_no_arguments_runs_the_smoke_cases_into_reports_run_id(self):
        code, out, err = self.meshgate("run")
        self.assertEqual(code, 0, out + err)
        runs = self.fake.run_launches()
        self.assertEqual(len(runs), 1)
        argv = runs[0]
        self.assertEqual(argv[1], str(self.root / "cases"))
        self.assertEqual(option_values(argv, "--tag"), ["smoke"])
        self.assertEqual(option_values(argv, "--backend"), ["threads"])
        self.assertIn("--progress", argv)
        out_dir = Path(option_values(argv, "--out")[0])
        self.assertEqual(out_dir.parent, self.root / "reports")
        self.assertRegex(out_dir.name, r"^\d{8}-\d{6}-59fa4d3$")
        self.assertEqual(option_values(argv, "--run-id"), [out_dir.name])
        document = self.results(out_dir)
        self.assertEqual([c["id"] for c in document["cases"]],
                         ["layout-algebra/coalesce-a", "layout-algebra/composition-b",
                          "mesh/hsdp-flatten"])
        self.report.assert_called_once()
        self.assertEqual(self.report.call_args.args[0], out_dir)
        self.assertEqual(self.report.call_args.args[1], document)
        self.compare.assert_not_called()
        self.assertIn(f"report:  {out_dir / 'report.md'}", out)
        self.assertIn("meshgate: 3 cases  pass 3  fail 0  error 0  skip 0", out)

    def test_run_id_is_utc_time_and_short_commit(self):
        now = datetime.datetime(2026, 11, 21, 7, 15, 0, tzinfo=datetime.timezone.utc)
        self.assertEqual(session.default_run_id(REPO, now, {"MESHGATE_COMMIT": "59fa4d3abcdef"}),
                         "20261121-071500-59fa4d3")
        head = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short=7", "HEAD"],
                              capture_output=True, text=True).stdout.strip()
        if head:
            self.assertEqual(git.short_commit(REPO, {}), head)
        self.assertEqual(git.short_commit(self.root, {}), "nocommit")

    def test_runs_started_in_the_same_second_get_folders_of_their_own(self):
        reports = self.root / "reports-claim"
        claimed = [files.claim_run_dir(reports, "20261121-071500-59fa4d3") for _ in range(3)]
        self.assertEqual([c[0] for c in claimed],
                         ["20261121-071500-59fa4d3", "20261121-071500-59fa4d3-2", "20261121-071500-59fa4d3-3"])
        self.assertTrue(all(path.is_dir() and path.name == rid for rid, path in claimed))
        with mock.patch.object(session, "default_run_id", return_value="20261121-071500-59fa4d3"):
            for _ in range(2):  # the same second, as far as the run id can tell
                code, out, err = self.meshgate("run")
                self.assertEqual(code, 0, out + err)
        folders = [Path(option_values(argv, "--out")[0]) for argv in self.fake.run_launches()]
        self.assertEqual(len(set(folders)), 2, folders)

    def test_filters_replace_the_smoke_default(self):
        code, out, err = self.meshgate("run", "--tag", "nightly", "--out",
                                       str(self.fake.dir / "o"))
        self.assertEqual(code, 1)
        self.assertEqual(option_values(self.fake.run_launches()[0], "--tag"), ["nightly"])
        self.assertIn("mesh/nightly-only  not selected by the smoke tag", out)

    def test_case_ids_as_arguments_select_by_id(self):
        code, out, err = self.meshgate("run", "mesh/hsdp-*", "--out", str(self.fake.dir / "o"))
        self.assertEqual(code, 0, err)
        argv = self.fake.run_launches()[0]
        self.assertEqual(option_values(argv, "--case"), ["mesh/hsdp-*"])
        self.assertEqual(option_values(argv, "--tag"), [])
        self.assertEqual([c["id"] for c in self.results(self.fake.dir / "o")["cases"]],
                         ["mesh/hsdp-flatten"])

    def test_a_missing_case_file_is_an_input_error(self):
        code, out, err = self.meshgate("run", "cases/nope.yaml")
        self.assertEqual(code, 2)
        self.assertIn("cases/nope.yaml: no such case file or folder", err)
        self.assertEqual(self.fake.run_launches(), [])

    def test_nothing_selected_is_an_input_error(self):
        code, out, err = self.meshgate("run", "--suite", "absent")
        self.assertEqual(code, 2)
        self.assertIn("no case matches", err)

    def test_ranks_and_case_timeout_reach_the_runner(self):
        self.meshgate("run", "--ranks", "4", "--case-timeout", "12.5", "--out",
                      str(self.fake.dir / "o"))
        argv = self.fake.run_launches()[0]
        self.assertEqual(option_values(argv, "--ranks"), ["4"])
        self.assertEqual(option_values(argv, "--case-timeout"), ["12.5"])
        self.assertEqual(option_values(argv, "--memory-limit"), [])

    def test_a_case_timeout_the_runner_would_refuse_is_a_usage_error_before_any_launch(self):
        for value in ("inf", "nan", "-1", "soon"):
            with contextlib.redirect_stderr(io.StringIO()) as err, self.assertRaises(SystemExit) as exit_:
                cli.main(["run", "--case-timeout", value, "--out", str(self.fake.dir / "o")])
            self.assertEqual(exit_.exception.code, 2, value)
            self.assertIn(f"'{value}': a finite number of seconds >= 0 (0 = no limit)", err.getvalue())
        self.assertEqual(self.fake.launches(), [])
        self.meshgate("run", "--case-timeout", "0", "--out", str(self.fake.dir / "o"))
        self.assertEqual(option_values(self.fake.run_launches()[0], "--case-timeout"), ["0"])

    def test_cpus_reach_every_run_launch(self):
        code, out, err = self.meshgate("run", "--cpus", "0", "--out", str(self.fake.dir / "o"))
        self.assertEqual(code, 0, err)
        self.assertEqual(option_values(self.fake.run_launches()[0], "--cpus"), ["0"])

    def test_a_bad_cpu_list_is_a_usage_error_naming_the_option_before_any_launch(self):
        for command in ("run", "ab", "calibrate", "bisect"):
            for value in ("1-0", "zero", "0,", ""):
                with contextlib.redirect_stderr(io.StringIO()) as err, self.assertRaises(SystemExit) as exit_:
                    cli.main([command, "--cpus", value, "--good", "a", "--bad", "b"] if command == "bisect"
                             else [command, "--cpus", value])
                self.assertEqual(exit_.exception.code, 2, (command, value))
                self.assertIn(f"--cpus: '{value}': a CPU list such as 0, 0-3 or 0,2", err.getvalue())
        self.assertEqual(self.fake.launches(), [])

    def test_a_rank_count_below_one_is_a_usage_error_that_leaves_no_folder(self):
        for value in ("0", "-2", "many"):
            with contextlib.redirect_stderr(io.StringIO()) as err, self.assertRaises(SystemExit) as exit_:
                cli.main(["run", "--ranks", value])
            self.assertEqual(exit_.exception.code, 2, value)
            self.assertIn(f"'{value}': a whole number of ranks >= 1", err.getvalue())
        self.assertEqual(self.fake.launches(), [])
        self.assertFalse((self.root / "reports").exists())

    def test_the_memory_limit_reaches_listing_and_run(self):
        self.meshgate("run", "--memory-limit", "64GiB", "--out", str(self.fake.dir / "o"))
        for argv in self.fake.launches():
            self.assertEqual(option_values(argv, "--memory-limit"), ["64GiB"], argv)
        self.assertEqual({argv[0] for argv in self.fake.launches()}, {"list", "run"})


class RunExitCodesTest(CliTestCase):
    scenario = "mixed"

    def test_a_failure_exits_1_and_is_listed_in_the_summary(self):
        code, out, err = self.meshgate("run", "--out", str(self.fake.dir / "o"))
        self.assertEqual(code, 1)
        self.assertIn("[2/4] fail   layout-algebra/complement-b  0.1 ms  expected (2,6):(1,2)\n",
                      out)
        self.assertIn("failed (1):\n  layout-algebra/complement-b  expected (2,6):(1,2)\n", out)
        self.assertIn("meshgate: 4 cases  pass 2  fail 1  error 0  skip 1", out)
        self.assertRegex(out, r"layout-algebra\s+1\s+1\s+0\s+0\n")
        self.assertRegex(out, r"mesh\s+1\s+0\s+0\s+1\n")

    def test_a_regression_against_a_stored_timing_is_reported_not_gating(self):
        # A timing stored on another day is a blocked comparison (docs/gate.md): it informs;
        # `meshgate ab` and the signal check (tests/test_signals.py) gate.
        self.compare.return_value = checks.TimingCheck(1)
        code, out, err = self.meshgate("run", "mesh/slice-d", "--baseline", "baselines/ci",
                                       "--out", str(self.fake.dir / "o"))
        self.assertEqual(code, 0)
        out_dir = self.fake.dir / "o"
        self.compare.assert_called_once_with(mock.ANY, out_dir / "results.json", Path("baselines/ci"),
                                             out_dir)
        self.assertIn("baseline baselines/ci: regression (exit 1), informational", out)

    def test_a_clean_comparison_keeps_exit_0(self):
        code, out, err = self.meshgate("run", "mesh/slice-d", "--baseline", "b",
                                       "--out", str(self.fake.dir / "o"))
        self.assertEqual(code, 0)

    def test_a_broken_comparison_or_report_exits_2(self):
        self.compare.side_effect = FileNotFoundError("baselines/x/mesh.json")
        code, out, err = self.meshgate("run", "mesh/slice-d", "--baseline", "baselines/x",
                                       "--out", str(self.fake.dir / "o"))
        self.assertEqual(code, 2)
        self.assertIn("comparison with baselines/x failed: FileNotFoundError", out)
        self.compare.side_effect = None
        self.report.side_effect = RuntimeError("disk full")
        code, out, err = self.meshgate("run", "mesh/slice-d", "--out", str(self.fake.dir / "o"))
        self.assertEqual(code, 2)
        self.assertIn("the report could not be written: RuntimeError: disk full", out)


class RunCrashTest(CliTestCase):
    scenario = "crash"

    def test_crash_is_an_error_row_and_the_rest_still_runs(self):
        out_dir = self.fake.dir / "o"
        code, out, err = self.meshgate("run", "--out", str(out_dir))
        self.assertEqual(code, 2)
        document = self.results(out_dir)
        self.assertEqual([(c["id"], c["status"]) for c in document["cases"]],
                         [("layout-algebra/coalesce-a", "pass"),
                          ("redistribute/prp-to-rrr", "error"), ("mesh/slice-c", "pass"),
                          ("mesh/slice-d", "pass")])
        self.assertIn("errors (1):\n  redistribute/prp-to-rrr  runner crashed with SIGSEGV "
                      "while running this case\n", out)
        self.assertIn("runner relaunched 1 time(s) after it died", out)
        self.assertIn("meshgate: runner crashed with SIGSEGV; resuming with 2 case(s) left", err)


class RunnerDeathBeforePlanTest(CliTestCase):
    scenario = {"exit_before_plan": 3, "cases": [{"id": "s/a", "tags": ["smoke"]}]}

    def test_a_runner_that_dies_before_its_plan_is_an_error(self):
        code, out, err = self.meshgate("run", "--out", str(self.fake.dir / "o"))
        self.assertEqual(code, 2)
        self.assertIn("meshgate: meshgate-runner exited with code 3 before running any case",
                      err)
        self.assertEqual(len(self.fake.run_launches()), 1)
        self.report.assert_not_called()


class RunInputErrorTest(CliTestCase):
    scenario = "input_error"

    def test_runner_stderr_is_shown_as_is_and_exit_is_2(self):
        code, out, err = self.meshgate("run")
        self.assertEqual(code, 2)
        self.assertEqual(err, "cases/layout/algebra.yaml:12:7: case 'layout-algebra/coalesce-a'"
                              ": key 'op': unknown op 'coalesc' (did you mean 'coalesce'?)\n")
        self.assertEqual(self.fake.run_launches(), [])

    def test_list_shows_it_too(self):
        code, out, err = self.meshgate("list")
        self.assertEqual(code, 2)
        self.assertIn("key 'op': unknown op 'coalesc'", err)


class RunPerfTest(CliTestCase):
    scenario = "perf"

    def test_perf_cases_are_repeated_in_fresh_processes_and_merged(self):
        out_dir = self.fake.dir / "o"
        code, out, err = self.meshgate("run", "--out", str(out_dir))
        self.assertEqual(code, 0, out + err)
        runs = self.fake.run_launches()
        self.assertEqual(len(runs), 3)
        self.assertEqual(option_values(runs[0], "--case"), [])
        self.assertEqual(option_values(runs[1], "--case"), ["gemm/bias-fp32", "gemm/bias-bf16"])
        self.assertEqual(option_values(runs[1], "--out"), [str(out_dir / "runs" / "2")])
        self.assertEqual(option_values(runs[2], "--case"), ["gemm/bias-fp32"])
        self.assertEqual(option_values(runs[2], "--out"), [str(out_dir / "runs" / "3")])
        cases = {c["id"]: c for c in self.results(out_dir)["cases"]}
        fp32 = cases["gemm/bias-fp32"]
        self.assertEqual(fp32["samples"]["time_s"],
                         [[1.0, 2.0, 9.0], [4.0, 5.0, 6.0], [0.5, 3.0, 3.5]])
        self.assertEqual(fp32["metrics"]["time_s"]["median"], 3.0)
        self.assertEqual(fp32["metrics"]["time_s"]["min"], 0.5)
        self.assertEqual(fp32["metrics"]["time_s"]["max"], 9.0)
        bf16 = cases["gemm/bias-bf16"]
        self.assertEqual(bf16["metrics"]["time_s"]["median"], 5.0)
        self.assertEqual(bf16["metrics"]["time_s"]["run_medians"], [3.0, 7.0])
        single = cases["gemm/single-run"]
        self.assertEqual(single["samples"]["time_s"], [[7.0, 7.5]])
        self.assertNotIn("runs", single["metrics"]["time_s"])
        self.assertEqual(self.report.call_args.args[1]["cases"][0], fp32)
        self.assertIn("performance cases repeated in 2 more runner launch(es)", out)
        self.assertEqual([p.name for p in out_dir.iterdir() if p.name.endswith(".tmp")], [])

    def test_a_crash_in_a_later_run_makes_the_case_an_error(self):
        scenario = json.loads(self.fake.scenario.read_text())
        scenario["cases"][0]["outcome_by_run"] = {"3": "segv"}
        self.fake.scenario = self.fake.dir / "perf-crash.json"
        self.fake.scenario.write_text(json.dumps(scenario))
        os.environ["FAKE_RUNNER_SCENARIO"] = str(self.fake.scenario)
        out_dir = self.fake.dir / "o"
        code, out, err = self.meshgate("run", "--out", str(out_dir))
        self.assertEqual(code, 2)
        fp32 = {c["id"]: c for c in self.results(out_dir)["cases"]}["gemm/bias-fp32"]
        self.assertEqual(fp32["status"], "error")
        self.assertTrue(fp32["message"].startswith(
            "run 3 of 3: runner crashed with SIGSEGV while running this case"), fp32["message"])
        self.assertEqual(len(fp32["samples"]["time_s"]), 2)


class ListTest(CliTestCase):
    scenario = "perf"

    def test_table_of_ids_kinds_tags(self):
        code, out, err = self.meshgate("list")
        self.assertEqual(code, 0, err)
        lines = out.splitlines()
        self.assertEqual(re.split(r"\s{2,}", lines[0]), ["id", "kind", "tags", "perf runs"])
        self.assertEqual(re.split(r"\s{2,}", lines[1]), ["gemm/bias-fp32", "gemm", "smoke", "3"])
        self.assertEqual(re.split(r"\s{2,}", lines[4]),
                         ["layout-algebra/coalesce-a", "layout", "smoke", "-"])
        self.assertEqual(lines[-1], "4 case(s)")
        argv = self.fake.launches()[0]
        self.assertEqual(argv, ["list", str(self.root / "cases"), "--json"])

    def test_json_and_filters(self):
        code, out, err = self.meshgate("list", "--suite", "layout-algebra", "--json")
        self.assertEqual(code, 0)
        self.assertEqual(json.loads(out), [{"id": "layout-algebra/coalesce-a",
                                            "suite": "layout-algebra", "kind": "layout",
                                            "tags": ["smoke"], "perf": None}])


class ParserTest(unittest.TestCase):
    def test_every_command_module_registers_a_subcommand(self):
        self.assertEqual(list(cli.COMMANDS)[:2], ["run", "list"])
        parser = cli.build_parser()
        args = parser.parse_args(["run", "--backend", "mpi", "--ranks", "8"])
        self.assertIs(args.func, run_command.run_command)
        self.assertEqual((args.backend, args.ranks), ("mpi", 8))
        self.assertIs(parser.parse_args(["list"]).func, listing.list_command)

    def test_commands_that_time_cases_take_cpus(self):
        parser = cli.build_parser()
        for argv in (["run"], ["ab"], ["calibrate"], ["bisect", "--good", "a", "--bad", "b"]):
            self.assertEqual(parser.parse_args(argv + ["--cpus", "0,2-3"]).cpus, "0,2-3", argv)
            self.assertIsNone(parser.parse_args(argv).cpus, argv)

    def test_a_command_is_required(self):
        with contextlib.redirect_stderr(io.StringIO()), self.assertRaises(SystemExit) as caught:
            cli.build_parser().parse_args([])
        self.assertEqual(caught.exception.code, 2)

    def test_entry_point_script_runs(self):
        proc = subprocess.run([sys.executable, str(REPO / "meshgate"), "--help"],
                              capture_output=True, text=True)
        self.assertEqual(proc.returncode, 0, proc.stderr)
        self.assertIn("run", proc.stdout)
        self.assertIn("list", proc.stdout)


REAL_RUNNER = os.environ.get("MESHGATE_RUNNER", "")


@unittest.skipUnless(REAL_RUNNER and Path(REAL_RUNNER).resolve() != FAKE_RUNNER,
                     "MESHGATE_RUNNER is not set: build meshgate-runner and run through CTest "
                     "(or export MESHGATE_RUNNER=build/<preset>/harness/runner/meshgate-runner)")
class RealRunnerTest(unittest.TestCase):
    """The driver on the real meshgate-runner, end to end (the report is replaced)."""

    def test_run_and_list_agree_and_results_are_complete(self):
        # testdata/ also holds deliberately broken files for the runner's own tests.
        smoke = REPO / "harness" / "runner" / "testdata" / "smoke.yaml"
        cases = REPO / "cases"
        if smoke.is_file():
            selection = Selection(paths=[str(smoke)])
        elif any(cases.rglob("*.yaml")):
            selection = Selection(paths=[str(cases)], tags=["smoke"])
        else:
            self.skipTest("no case files yet: neither harness/runner/testdata/smoke.yaml nor "
                          "cases/*/*.yaml")
        setup = RunnerSetup(runner=[REAL_RUNNER])
        try:
            listed = {e["id"]: e for e in launch.list_cases(setup, selection)}
        except launch.RunnerInputError as e:
            self.fail(f"meshgate-runner rejected {selection.paths}:\n{e.stderr}")
        with tempfile.TemporaryDirectory(prefix="meshgate-real-") as tmp:
            out_dir = Path(tmp) / "run"
            argv = ["run", *selection.paths, "--out", str(out_dir), "--case-timeout", "120"]
            for tag in selection.tags:
                argv += ["--tag", tag]
            out = io.StringIO()
            with mock.patch("meshgate.run.report.write_run_report", return_value=[]), \
                    contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
                code = cli.main(argv)
            document = json.loads((out_dir / "results.json").read_text())
        self.assertEqual(document["schema"], "meshgate.results/1")
        self.assertEqual(sorted(c["id"] for c in document["cases"]), sorted(listed),
                         out.getvalue())
        for row in document["cases"]:
            self.assertIn(row["status"], results.STATUSES, row)
            runs = (listed[row["id"]].get("perf") or {}).get("runs", 1)
            if row["status"] == "pass" and runs > 1:
                # One sample list per runner process, merged by the driver.
                self.assertEqual(len(row["samples"]["time_s"]), runs, row)
                self.assertEqual(row["metrics"]["time_s"]["runs"], runs, row)
        self.assertEqual(code, results.exit_code(document["cases"]), out.getvalue())


if __name__ == "__main__":
    unittest.main()


def _options(parser, prefix):
    """(command, action) for every option and argument of every command, subcommands walked."""
    import argparse

    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _options(sub, f"{prefix} {name}")
        else:
            yield prefix, action


class HelpTextTest(unittest.TestCase):
    def test_every_option_of_every_command_has_help(self):
        import argparse

        from meshgate import cli

        missing = [f"{prefix}: {action.option_strings or action.dest}"
                   for prefix, action in _options(cli.build_parser(), "meshgate")
                   if not isinstance(action, argparse._HelpAction) and not action.help]
        self.assertEqual(missing, [])

    def test_rendered_help_shows_single_percent_signs(self):
        """argparse formats option help with %, but descriptions verbatim: '%%' is right in
        the one and shows doubled in the other."""
        import argparse

        from meshgate import cli

        doubled = []

        def walk(parser, prefix):
            if "%%" in parser.format_help():
                doubled.append(prefix)
            for action in parser._actions:
                if isinstance(action, argparse._SubParsersAction):
                    for name, sub in action.choices.items():
                        walk(sub, f"{prefix} {name}")

        walk(cli.build_parser(), "meshgate")
        self.assertEqual(doubled, [])

    def test_version_names_driver_and_runner(self):
        from meshgate.system import version

        with mock.patch.dict(os.environ, {"MESHGATE_RUNNER": "/nonexistent/meshgate-runner"}):
            text = version.describe()
        self.assertRegex(text.splitlines()[0], r"^meshgate \d+\.\d+\.\d+ ")
        self.assertIn("runner: /nonexistent/meshgate-runner does not start", text)


class CommandTableTest(unittest.TestCase):
    def test_each_command_is_registered_by_the_module_the_table_names(self):
        import argparse

        from meshgate import cli

        for name in cli.COMMANDS:
            parser = cli.build_parser(only=name)
            choices = next(a.choices for a in parser._actions if isinstance(a, argparse._SubParsersAction))
            self.assertEqual(list(choices), [name])
        full = cli.build_parser()
        choices = next(a.choices for a in full._actions if isinstance(a, argparse._SubParsersAction))
        self.assertEqual(list(choices), list(cli.COMMANDS))


class UsageErrorTest(unittest.TestCase):
    def test_a_usage_error_is_one_line_and_a_hint(self):
        import contextlib
        import io

        from meshgate import cli

        for argv, said in ((["plan", "--mesh", "2x2"], "meshgate plan: error: the following "
                            "arguments are required: --from, --to"),
                           (["run", "--ranks", "many"], "meshgate run: error: argument --ranks")):
            with self.subTest(argv=argv):
                err = io.StringIO()
                with contextlib.redirect_stderr(err), self.assertRaises(SystemExit) as stop:
                    cli.main(argv)
                self.assertEqual(stop.exception.code, 2)
                lines = err.getvalue().splitlines()
                self.assertEqual(len(lines), 2, lines)
                self.assertTrue(lines[0].startswith(said), lines)
                self.assertEqual(lines[1], f"(see meshgate {argv[0]} --help)")

    def test_case_timeout_help_says_what_0_means(self):
        from meshgate import cli

        helps = [(prefix, action.help) for prefix, action in _options(cli.build_parser(), "meshgate")
                 if "--case-timeout" in action.option_strings]
        self.assertGreaterEqual(len(helps), 3, helps)
        for prefix, text in helps:
            self.assertIn("0: no limit", text, prefix)
