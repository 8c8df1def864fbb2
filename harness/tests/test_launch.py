import io
import json
import math
import signal
import sys
import time
import unittest
from pathlib import Path
from unittest import mock

from meshgate.core import files, results
from meshgate.system import launch
from meshgate.system.launch import LaunchOutcome, RunnerSetup, Selection
from meshgate.system.progress import PlainView, Tally

from .support import FakeRunner, option_values, read_jsonl


class CommandLineTest(unittest.TestCase):
    def test_selection_arguments(self):
        selection = Selection(paths=["cases"], suites=["mesh"], tags=["smoke", "nightly"],
                              cases=["mesh/a*"])
        self.assertEqual(selection.args(), ["cases", "--suite", "mesh", "--tag", "smoke",
                                            "--tag", "nightly", "--case", "mesh/a*"])

    def test_threads_run_command(self):
        setup = RunnerSetup(runner=["/b/meshgate-runner"], ranks=4, case_timeout=30)
        command = setup.run_command(Selection(paths=["cases"], tags=["smoke"]), Path("/o"),
                                    "rid", resume=True)
        self.assertEqual(command, ["/b/meshgate-runner", "run", "cases", "--tag", "smoke",
                                   "--backend", "threads", "--out", "/o", "--run-id", "rid",
                                   "--progress", "--ranks", "4", "--case-timeout", "30",
                                   "--resume"])

    def test_cpus_reach_run_but_not_list(self):
        setup = RunnerSetup(runner=["r"], cpus="0,2-3")
        command = setup.run_command(Selection(paths=["cases"]), Path("/o"), "rid", resume=False)
        self.assertEqual(option_values(command, "--cpus"), ["0,2-3"])
        self.assertNotIn("--cpus", setup.list_command(Selection(paths=["cases"])))
        self.assertNotIn("--cpus", RunnerSetup(runner=["r"]).run_command(
            Selection(paths=["cases"]), Path("/o"), "rid", resume=False))

    def test_ab_calibrate_and_bisect_launches_carry_the_cpus(self):
        from meshgate.system import repeats

        side = repeats.Side("a", runner=["r"], case_paths=["cases"])
        self.assertEqual(repeats.DriverLauncher(cpus="1").setup(side).cpus, "1")
        self.assertIsNone(repeats.DriverLauncher().setup(side).cpus)

    def test_mpi_wraps_the_runner_in_mpirun(self):
        setup = RunnerSetup(runner=["r"], backend="mpi", ranks=8, env={})
        with mock.patch("shutil.which", return_value="/usr/bin/mpirun"), \
                mock.patch("os.geteuid", return_value=1000):
            command = setup.run_command(Selection(paths=["c"]), Path("/o"), "id", False)
        self.assertEqual(command[:6], ["mpirun", "-np", "8", "--oversubscribe", "r", "run"])
        self.assertEqual(command[command.index("--backend") + 1], "mpi")
        # The world size is mpirun's -np; the runner reads it from MPI.
        self.assertNotIn("--ranks", command)

    def test_mpirun_as_root_is_allowed_explicitly(self):
        setup = RunnerSetup(runner=["r"], backend="nccl", ranks=2, env={})
        with mock.patch("shutil.which", return_value="/usr/bin/mpirun"), \
                mock.patch("os.geteuid", return_value=0):
            self.assertEqual(setup.launcher(),
                             ["mpirun", "-np", "2", "--oversubscribe", "--allow-run-as-root"])

    def test_srun_inside_a_slurm_allocation(self):
        setup = RunnerSetup(runner=["r"], backend="nccl", ranks=2, env={"SLURM_JOB_ID": "7"})
        with mock.patch("shutil.which", return_value="/usr/bin/srun"):
            self.assertEqual(setup.launcher(), ["srun", "-n", "2"])

    def test_process_backends_need_ranks_and_mpirun(self):
        with self.assertRaisesRegex(launch.LaunchError, "--ranks N"):
            RunnerSetup(runner=["r"], backend="mpi").launcher()
        with mock.patch("shutil.which", return_value=None):
            with self.assertRaisesRegex(launch.LaunchError, "ci/bootstrap"):
                RunnerSetup(runner=["r"], backend="mpi", ranks=2, env={}).launcher()

    def test_one_rank_without_mpirun_starts_the_runner_alone(self):
        with mock.patch("shutil.which", return_value=None):
            self.assertEqual(RunnerSetup(runner=["r"], backend="nccl", ranks=1, env={}).launcher(),
                             [])
        with mock.patch("shutil.which", return_value="/usr/bin/mpirun"), \
                mock.patch("os.geteuid", return_value=1000):
            self.assertEqual(RunnerSetup(runner=["r"], backend="nccl", ranks=1, env={}).launcher(),
                             ["mpirun", "-np", "1", "--oversubscribe"])

    def test_silence_limit_follows_the_case_timeout(self):
        self.assertEqual(RunnerSetup(runner=["r"]).silence_limit(), 330.0)
        self.assertEqual(RunnerSetup(runner=["r"], case_timeout=2).silence_limit(), 4.0)
        self.assertEqual(RunnerSetup(runner=["r"], case_timeout=0).silence_limit(), math.inf)

    def test_death_descriptions(self):
        self.assertEqual(LaunchOutcome(returncode=-signal.SIGSEGV).death(), "crashed with SIGSEGV")
        self.assertEqual(LaunchOutcome(returncode=134).death(), "exited with code 134 (SIGABRT)")
        self.assertEqual(LaunchOutcome(returncode=3).death(), "exited with code 3")
        self.assertIn("stopped responding (no progress for 2.5 s)",
                      LaunchOutcome(returncode=-9, hung_after=2.5).death())


class RankFailureTest(unittest.TestCase):
    """The rank that died, as each launcher reports it (recorded stderr of each)."""

    OPEN_MPI_SIGNAL = [
        "[vm:31391] Read -1, expected 8388608, errno = 3",
        "-" * 74,
        "Primary job  terminated normally, but 1 process returned",
        "a non-zero exit code. Per user-direction, the job has been aborted.",
        "-" * 74,
        "-" * 74,
        "mpirun noticed that process rank 2 with PID 0 on node vm exited on signal 9 (Killed).",
        "-" * 74]
    OPEN_MPI_EXIT = [
        "mpirun detected that one or more processes exited with non-zero status, thus causing",
        "the job to be terminated. The first process to do so was:", "",
        "  Process name: [[40263,1],1]", "  Exit code:    3"]
    MPICH_SIGNAL = [
        "===================================================================================",
        "=   BAD TERMINATION OF ONE OF YOUR APPLICATION PROCESSES",
        "=   RANK 3 PID 4242 RUNNING AT node7",
        "=   KILLED BY SIGNAL: 11 (Segmentation fault)"]
    SRUN_SIGNAL = ["srun: error: node7: task 1: Segmentation fault (core dumped)",
                   "srun: Terminating StepId=12.0"]

    def test_each_launcher_names_the_rank_and_signal(self):
        self.assertEqual(launch.rank_failure(self.OPEN_MPI_SIGNAL),
                         "rank 2 killed by signal 9 (SIGKILL)")
        self.assertEqual(launch.rank_failure(self.OPEN_MPI_EXIT), "rank 1 exited with code 3")
        self.assertEqual(launch.rank_failure(self.MPICH_SIGNAL),
                         "rank 3 killed by signal 11 (SIGSEGV)")
        self.assertEqual(launch.rank_failure(self.SRUN_SIGNAL),
                         "rank 1 killed by signal 11 (SIGSEGV)")
        self.assertEqual(launch.rank_failure(["srun: error: n: task 0: Exited with exit code 2"]),
                         "rank 0 exited with code 2")
        self.assertIsNone(launch.rank_failure(["fake-runner: about to crash"]))

    def test_the_cause_names_the_rank_or_else_the_runner(self):
        killed = LaunchOutcome(returncode=137, stderr=self.OPEN_MPI_SIGNAL)
        self.assertEqual(killed.cause(), "rank 2 killed by signal 9 (SIGKILL)")
        self.assertEqual(LaunchOutcome(returncode=-signal.SIGSEGV).cause(),
                         "runner crashed with SIGSEGV")
        hung = LaunchOutcome(returncode=137, stderr=self.OPEN_MPI_SIGNAL, hung_after=3.0)
        self.assertTrue(hung.cause().startswith("runner stopped responding"), hung.cause())

    def test_the_error_row_names_the_rank_and_keeps_the_launcher_words(self):
        with FakeRunner({"cases": []}) as fake:
            jsonl = fake.dir / "results.jsonl"
            outcome = LaunchOutcome(returncode=137, stderr=self.OPEN_MPI_SIGNAL,
                                    running={"event": "start", "id": "coll/ar", "kind": "collective"},
                                    running_since=time.monotonic())
            launch._record_unfinished(outcome, [], jsonl, PlainView(io.StringIO()), Tally(), {})
            row = read_jsonl(jsonl)[0]
        self.assertEqual(row["status"], "error")
        self.assertEqual(row["message"].split("\n")[0],
                         "rank 2 killed by signal 9 (SIGKILL) while running this case")
        self.assertIn("mpirun noticed that process rank 2", row["message"])
        self.assertNotIn("-----", row["message"])


class ListCasesTest(unittest.TestCase):
    def test_listing_from_the_runner(self):
        with FakeRunner("perf") as fake:
            setup = RunnerSetup(runner=fake.command, env=fake.env)
            entries = launch.list_cases(setup, Selection(paths=["cases"], suites=["gemm"]))
        self.assertEqual([e["id"] for e in entries],
                         ["gemm/bias-fp32", "gemm/bias-bf16", "gemm/single-run"])
        self.assertEqual(entries[0]["perf"], {"warmup": 1, "iters": 3, "runs": 3})
        self.assertEqual(entries[0]["kind"], "gemm")
        self.assertEqual(entries[0]["tags"], ["smoke"])

    def test_listing_in_an_object_and_without_optional_fields(self):
        entries = launch.normalize_listing({"cases": [{"id": "s/a", "perf": None, "line": 3}]})
        self.assertEqual(entries, [{"id": "s/a", "suite": "s", "kind": "", "tags": [],
                                    "perf": None, "line": 3}])
        with self.assertRaises(ValueError):
            launch.normalize_listing({"cases": [{"kind": "layout"}]})

    def test_input_errors_keep_the_runner_stderr(self):
        with FakeRunner("input_error") as fake:
            setup = RunnerSetup(runner=fake.command, env=fake.env)
            with self.assertRaises(launch.RunnerInputError) as caught:
                launch.list_cases(setup, Selection(paths=["cases"]))
        self.assertEqual(caught.exception.returncode, 2)
        self.assertIn("algebra.yaml:12:7: case 'layout-algebra/coalesce-a': key 'op'",
                      caught.exception.stderr)


    def test_a_runner_that_dies_while_loading_is_named_with_its_signal(self):
        import sys
        import tempfile

        with tempfile.TemporaryDirectory() as tmp:
            runner = Path(tmp) / "runner.py"
            runner.write_text("import os, signal\nos.kill(os.getpid(), signal.SIGSEGV)\n")
            setup = RunnerSetup(runner=[sys.executable, str(runner)])
            with self.assertRaises(launch.RunnerInputError) as caught:
                launch.list_cases(setup, Selection(paths=["cases/evil.yaml"]))
        self.assertEqual(caught.exception.returncode, 2)
        self.assertIn("the runner crashed with SIGSEGV while loading cases/evil.yaml",
                      caught.exception.stderr)


class RunnerMachineTest(unittest.TestCase):
    def test_the_machine_of_version_json(self):
        with FakeRunner("passing") as fake, fake.environ():
            machine = launch.runner_machine(fake.command)
        self.assertEqual(machine["cpu"], "Fake CPU")

    def test_a_runner_that_cannot_say_is_a_launch_error(self):
        for script, said in (("print('{\"version\": \"0.1.0\"}')", "does not describe the machine"),
                             ("print('not json')", "not valid JSON"),
                             ("import sys; print('no such command', file=sys.stderr); sys.exit(2)",
                              "no such command")):
            with self.subTest(said=said), self.assertRaises(launch.LaunchError) as e:
                launch.runner_machine([sys.executable, "-c", script])
            self.assertIn(said, str(e.exception))


class RecoveryTest(unittest.TestCase):
    def run_fake(self, scenario, *, tags=("smoke",), case_timeout=None, max_launches=None):
        fake = FakeRunner(scenario)
        self.addCleanup(fake.__exit__)
        out = io.StringIO()
        setup = RunnerSetup(runner=fake.command, env=fake.env, case_timeout=case_timeout)
        catalogue = {e["id"]: e for e in launch.list_cases(setup, Selection(paths=["cases"]))}
        tally = Tally()
        outcome = launch.run_with_recovery(setup, Selection(paths=["cases"], tags=list(tags)),
                                           fake.dir / "out", "run-1", PlainView(out, out),
                                           tally, catalogue, max_launches=max_launches)
        return fake, outcome, tally, out.getvalue()

    def test_a_clean_run_is_one_launch(self):
        fake, outcome, tally, text = self.run_fake("passing")
        self.assertEqual(len(outcome.launches), 1)
        self.assertEqual(outcome.plan_ids, ["layout-algebra/coalesce-a",
                                            "layout-algebra/composition-b", "mesh/hsdp-flatten"])
        self.assertEqual(tally.counts["pass"], 3)
        self.assertEqual(outcome.last.done["exit_code"], 0)
        # Human lines of the runner, stdout and stderr, are passed through.
        self.assertIn("fake-runner: loaded 3 cases from 1 file\n", text)
        self.assertIn("stderr: fake-runner: loaded 3 cases from 1 file\n", text)
        self.assertIn("[3/3] pass   mesh/hsdp-flatten  0.1 ms\n", text)

    def test_crash_appends_an_error_row_and_resumes_the_rest(self):
        fake, outcome, tally, text = self.run_fake("crash")
        rows = read_jsonl(fake.dir / "out" / "results.jsonl")
        self.assertEqual([r["id"] for r in rows],
                         ["layout-algebra/coalesce-a", "redistribute/prp-to-rrr", "mesh/slice-c",
                          "mesh/slice-d"])
        crashed = rows[1]
        self.assertEqual(crashed["status"], "error")
        self.assertEqual(crashed["kind"], "redistribute")
        self.assertEqual(crashed["params"], {"mesh": {"shape": [2, 2, 2]},
                                             "from": ["P(sum)", "R", "P(sum)"]})
        self.assertTrue(crashed["message"].startswith(
            "runner crashed with SIGSEGV while running this case"), crashed["message"])
        self.assertIn("fake-runner: about to crash", crashed["message"])
        self.assertEqual(crashed["tags"], ["smoke"])
        self.assertEqual([r["status"] for r in rows], ["pass", "error", "pass", "pass"])
        runs = fake.run_launches()
        self.assertEqual(len(runs), 2)
        self.assertNotIn("--resume", runs[0])
        self.assertIn("--resume", runs[1])
        self.assertEqual(option_values(runs[1], "--run-id"), ["run-1"])
        self.assertEqual(tally.counts, {"pass": 3, "fail": 0, "error": 1, "skip": 0})
        self.assertEqual(tally.done, 4)
        self.assertIn("[2/4] error  redistribute/prp-to-rrr", text)
        document = json.loads((fake.dir / "out" / "results.json").read_text())
        self.assertEqual(len(document["cases"]), 4)

    def test_a_hung_runner_is_killed_and_resumed(self):
        start = time.monotonic()
        fake, outcome, tally, text = self.run_fake("hang", case_timeout=1)
        self.assertLess(time.monotonic() - start, 15)
        rows = read_jsonl(fake.dir / "out" / "results.jsonl")
        self.assertEqual([r["status"] for r in rows], ["pass", "error", "pass"])
        self.assertIn("stopped responding (no progress for", rows[1]["message"])
        self.assertIn("killed by meshgate while running this case", rows[1]["message"])
        self.assertEqual(rows[1]["params"], {"op": "all_reduce"})
        self.assertEqual(len(outcome.launches), 2)

    def test_the_runners_own_timeout_row_is_not_duplicated(self):
        scenario = {"cases": [
            {"id": "s/a", "tags": ["smoke"], "outcome": "pass"},
            {"id": "s/slow", "tags": ["smoke"], "outcome": "timeout"},
            {"id": "s/c", "tags": ["smoke"], "outcome": "pass"}]}
        fake, outcome, tally, text = self.run_fake(scenario)
        rows = read_jsonl(fake.dir / "out" / "results.jsonl")
        self.assertEqual([(r["id"], r["status"]) for r in rows],
                         [("s/a", "pass"), ("s/slow", "error"), ("s/c", "pass")])
        self.assertEqual(rows[1]["message"], "case timed out after 300 s")
        self.assertEqual(tally.counts["error"], 1)

    def test_relaunching_is_bounded_when_nothing_progresses(self):
        scenario = {"exit_after_plan": 3, "cases": [
            {"id": "s/a", "tags": ["smoke"], "outcome": "pass"},
            {"id": "s/b", "tags": ["smoke"], "outcome": "pass"}]}
        fake, outcome, tally, text = self.run_fake(scenario)
        self.assertEqual(len(outcome.launches), 2)
        self.assertIn("launched 2 time(s) without reaching this case (last launch: runner "
                      "exited with code 3)", outcome.gave_up)
        rows = read_jsonl(fake.dir / "out" / "results.jsonl")
        self.assertEqual([(r["id"], r["status"]) for r in rows],
                         [("s/a", "error"), ("s/b", "error")])
        self.assertTrue(rows[0]["message"].startswith("not run: meshgate-runner was launched"))

    def test_max_launches_caps_a_crash_per_launch(self):
        scenario = {"cases": [{"id": f"s/{i}", "tags": ["smoke"], "outcome": "segv"}
                              for i in range(5)]}
        fake, outcome, tally, text = self.run_fake(scenario, max_launches=3)
        self.assertEqual(len(outcome.launches), 3)
        rows = read_jsonl(fake.dir / "out" / "results.jsonl")
        self.assertEqual(len(rows), 5)
        self.assertTrue(all(r["status"] == "error" for r in rows))
        self.assertIn("SIGSEGV while running this case", rows[2]["message"])
        self.assertIn("not run: meshgate-runner was launched 3 time(s) without reaching this "
                      "case (last launch: runner crashed with SIGSEGV)", rows[3]["message"])

    def test_input_error_stops_before_any_relaunch(self):
        fake = FakeRunner("input_error")
        self.addCleanup(fake.__exit__)
        out = io.StringIO()
        setup = RunnerSetup(runner=fake.command, env=fake.env)
        outcome = launch.run_with_recovery(setup, Selection(paths=["cases"]), fake.dir / "o",
                                           "id", PlainView(out, out), Tally())
        self.assertFalse(outcome.started)
        self.assertEqual(len(outcome.launches), 1)
        self.assertEqual(outcome.last.returncode, 2)
        self.assertIn("key 'op': unknown op 'coalesc'", out.getvalue())


class ResultsFileTest(unittest.TestCase):
    def test_truncated_last_line_is_dropped_and_appending_starts_a_new_line(self):
        with FakeRunner("passing") as fake:
            path = fake.dir / "results.jsonl"
            path.write_text('{"id": "s/a", "status": "pass"}\n{"id": "s/b", "sta')
            self.assertEqual([r["id"] for r in results.read_rows(path)], ["s/a"])
            results.append_row(path, results.error_row("s/c", "boom"))
            self.assertEqual([r["id"] for r in results.read_rows(path)], ["s/a", "s/c"])

    def test_assemble_prefers_results_json_and_keeps_plan_order(self):
        rows = [{"id": "s/b", "status": "error"}, {"id": "s/a", "status": "pass", "v": 1}]
        written = {"schema": "meshgate.results/1", "run": {"id": "r", "commit": "c"},
                   "cases": [{"id": "s/a", "status": "pass", "v": 2}]}
        document = results.assemble(written, rows, ["s/a", "s/b"], {"id": "r"})
        self.assertEqual({k: document["run"][k] for k in ("id", "commit")}, {"id": "r", "commit": "c"})
        # The keys the runner did not write are completed so the document meets the schema.
        self.assertEqual(document["run"]["machine"]["fingerprint"], "unknown")
        self.assertIsNone(document["run"]["versions"]["cuda"])
        self.assertEqual(document["cases"], [{"id": "s/a", "status": "pass", "v": 2},
                                             {"id": "s/b", "status": "error"}])

    def test_exit_code(self):
        self.assertEqual(results.exit_code([{"status": "pass"}, {"status": "skip"}]), 0)
        self.assertEqual(results.exit_code([{"status": "pass"}, {"status": "fail"}]), 1)
        self.assertEqual(results.exit_code([{"status": "fail"}, {"status": "error"}]), 2)

    def test_atomic_write_leaves_no_temporary_file(self):
        with FakeRunner("passing") as fake:
            files.write_json_atomic(fake.dir / "results.json", {"cases": []})
            self.assertEqual([p.name for p in fake.dir.iterdir() if p.name.startswith(".")], [])
            self.assertEqual(json.loads((fake.dir / "results.json").read_text()), {"cases": []})


if __name__ == "__main__":
    unittest.main()
