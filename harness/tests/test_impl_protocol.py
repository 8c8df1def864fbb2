"""The meshgate.impl/1 protocol end to end: the real runner (MESHGATE_RUNNER) against a toy
implementation that is wrong, refuses, crashes, hangs, speaks garbage or floods its stdout and
stderr. The runner must judge a wrong answer `fail`, an unsupported case `skip`, and every
broken exchange an `error` row naming the implementation, and the suite must go on; whatever
the implementation prints lands in its log, never in the channel of requests and answers."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
import unittest
from pathlib import Path

HERE = Path(__file__).resolve().parent
TOY = HERE / "fixtures" / "impl" / "toy_impl.py"
PACKAGE_PARENT = HERE.parent  # harness/, which holds the meshgate package
RUNNER = os.environ.get("MESHGATE_RUNNER", "")

CASES = """\
suite: toy
cases:
  - name: coalesce
    kind: layout
    op: coalesce
    args: ["(2,4):(1,2)"]
    expect: "8:1"
  - name: composition
    kind: layout
    op: composition
    args: ["(4,2):(2,1)", "2:1"]
    expect: "2:2"
  - name: rejected-nesting
    kind: layout
    op: size
    args: ["(2,2):(1,2)"]
    expect_error: "toy rejects"
  - name: timed
    kind: layout
    op: cosize
    args: ["4:2"]
    expect: 7
    perf: {warmup: 1, iters: 3, runs: 1}
"""


def _real_runner() -> bool:
    return bool(RUNNER) and not RUNNER.endswith(".py") and Path(RUNNER).exists()


class PythonServer(unittest.TestCase):
    """meshgate/impls/protocol.py, the server side every Python implementation uses: each line
    it writes is a meshgate.impl/1 answer (impl-1.schema.json)."""

    def serve(self, handlers: dict, *requests: dict) -> list[dict]:
        import io

        from meshgate.core import schema
        from meshgate.impls import protocol

        channel_in = io.StringIO("".join(json.dumps(r) + "\n" for r in requests))
        channel_out = io.StringIO()
        # A broken handler's traceback goes to stderr, as it would to the runner's log.
        with contextlib.redirect_stderr(io.StringIO()):
            protocol.serve("unit", "1.0", {"k": 1}, handlers, requests=channel_in,
                           answers=channel_out)
        answers = [json.loads(line) for line in channel_out.getvalue().splitlines()]
        for request in requests:
            schema.check(request, "impl-1", "request")
        for answer in answers:
            schema.check(answer, "impl-1", "answer")
        return answers

    def case(self, kind: str = "layout") -> dict:
        return {"type": "case", "id": "s/c", "kind": kind, "request": {"op": "size"},
                "perf": None, "dir": "/tmp"}

    def test_every_answer_matches_the_schema(self):
        from meshgate.impls import protocol

        def answer(request, perf, directory):
            return {"result": 4}, None

        def refuse(request, perf, directory):
            raise protocol.Unsupported("no meshes here")

        def reject(request, perf, directory):
            raise protocol.Rejected.of(ValueError("bad layout"))

        def broken(request, perf, directory):
            raise KeyError("oops")

        answers = self.serve(
            {"layout": answer, "mesh": refuse, "redistribute": reject, "gemm": broken},
            {"type": "hello", "protocol": protocol.PROTOCOL}, self.case("layout"),
            self.case("mesh"), self.case("redistribute"), self.case("gemm"),
            self.case("collective"), {"type": "bye"}, self.case("layout"))
        self.assertEqual(answers[0]["kinds"], ["gemm", "layout", "mesh", "redistribute"])
        self.assertEqual([a["status"] for a in answers[1:]],
                         ["ok", "unsupported", "rejected", "error", "unsupported"])
        self.assertEqual(answers[1]["observables"], {"result": 4})
        self.assertEqual((answers[3]["error"], answers[3]["message"]), ("ValueError", "bad layout"))
        self.assertIn("KeyError", answers[4]["message"])
        # Nothing is answered after bye.
        self.assertEqual(len(answers), 6)

    def test_progress_is_written_only_while_a_case_runs(self):
        from meshgate.impls import protocol

        def answer(request, perf, directory):
            protocol.progress("loading the kind's module")
            return {"result": 4}, None

        protocol.progress("before any case")  # no channel yet: nothing is written
        answers = self.serve({"layout": answer}, {"type": "hello", "protocol": protocol.PROTOCOL},
                             self.case("layout"), {"type": "bye"})
        self.assertEqual([a["type"] for a in answers], ["hello", "progress", "case"])
        self.assertEqual(answers[1]["doing"], "loading the kind's module")
        protocol.progress("after the run")  # the channel is gone again
        self.assertIsNone(protocol._progress_channel)

    def test_the_channel_comes_from_the_environment(self):
        from meshgate.impls import protocol

        with self.assertRaises(protocol.ChannelError) as e:
            protocol.channel_fds({})
        self.assertIn("MESHGATE_IMPL_FDS", str(e.exception))
        self.assertIn("meshgate-runner", str(e.exception))
        for value in ("3", "a,b", "3,4,5", "0,4", "3,1"):
            with self.assertRaises(protocol.ChannelError, msg=value):
                protocol.channel_fds({"MESHGATE_IMPL_FDS": value})
        read_fd, write_fd = os.pipe()
        os.close(write_fd)
        os.close(read_fd)
        with self.assertRaisesRegex(protocol.ChannelError, "not open"):
            protocol.channel_fds({"MESHGATE_IMPL_FDS": f"{read_fd},{write_fd}"})

    def test_the_channel_moves_to_fds_no_child_inherits(self):
        from meshgate.impls import protocol

        request_r, request_w = os.pipe()
        answer_r, answer_w = os.pipe()
        for fd in (request_r, answer_w):
            os.set_inheritable(fd, True)  # as the runner's exec leaves fds 3 and 4
        requests, answers = protocol.open_channel({"MESHGATE_IMPL_FDS": f"{request_r},{answer_w}"})
        try:
            for fd in (request_r, answer_w):
                with self.assertRaises(OSError, msg=f"fd {fd} should be closed"):
                    os.fstat(fd)
            self.assertFalse(os.get_inheritable(requests.fileno()))
            self.assertFalse(os.get_inheritable(answers.fileno()))
            os.write(request_w, b'{"type": "bye"}\n')
            self.assertEqual(requests.readline(), '{"type": "bye"}\n')
            answers.write("x\n")
            answers.flush()
            self.assertEqual(os.read(answer_r, 10), b"x\n")
        finally:
            requests.close()
            answers.close()
            os.close(request_w)
            os.close(answer_r)

    def test_stdout_pointed_at_the_answer_pipe_goes_to_stderr(self):
        """A launcher that hands the implementation its answer pipe as stdout too: what Python
        and C print must still not reach the channel."""
        request_r, request_w = os.pipe()
        answer_r, answer_w = os.pipe()
        script = (
            "import os, sys\n"
            f"sys.path.insert(0, {str(PACKAGE_PARENT)!r})\n"
            "from meshgate.impls import protocol\n"
            "def layout(request, perf, directory):\n"
            "    print('{\"type\": \"case\", \"status\": \"ok\", \"observables\": {}}')\n"
            "    sys.stdout.flush()\n"
            "    os.write(1, b'from fd 1\\n')\n"
            "    return {'result': 4}, None\n"
            "print('before serve', flush=True)\n"
            "sys.exit(protocol.serve('unit', '1', {}, {'layout': layout}))\n")
        env = dict(os.environ, MESHGATE_IMPL_FDS=f"{request_r},{answer_w}")
        proc = subprocess.Popen([sys.executable, "-c", script], stdin=subprocess.DEVNULL,
                                stdout=answer_w, stderr=subprocess.PIPE,
                                pass_fds=(request_r, answer_w), env=env)
        os.close(request_r)
        os.close(answer_w)
        with os.fdopen(request_w, "w") as out:
            for request in ({"type": "hello", "protocol": "meshgate.impl/1"},
                            {"type": "case", "id": "s/c", "kind": "layout",
                             "request": {"op": "size"}, "perf": None, "dir": "/tmp"},
                            {"type": "bye"}):
                out.write(json.dumps(request) + "\n")
        with os.fdopen(answer_r) as channel:
            lines = channel.read().splitlines()
        _, err = proc.communicate(timeout=60)
        self.assertEqual(proc.returncode, 0, err)
        # Python imported before serve() wrote there; from then on only answers.
        self.assertEqual(lines[0], "before serve")
        answers = [json.loads(line) for line in lines[1:]]
        self.assertEqual([a.get("type") for a in answers], ["hello", "case"])
        self.assertEqual(answers[1]["observables"], {"result": 4})
        self.assertIn(b"from fd 1", err)
        self.assertIn(b'"observables": {}', err)

    def test_a_program_started_outside_the_runner_says_so(self):
        env = {k: v for k, v in os.environ.items() if k != "MESHGATE_IMPL_FDS"}
        env["TOY_IMPL_PACKAGE_PARENT"] = str(PACKAGE_PARENT)
        proc = subprocess.run([sys.executable, str(TOY), "wrong"], input="", capture_output=True,
                              text=True, env=env, timeout=60)
        self.assertEqual(proc.returncode, 2)
        self.assertEqual(proc.stdout, "")
        self.assertIn("toy: this program implements meshgate.impl/1 for meshgate-runner",
                      proc.stderr)
        self.assertIn("MESHGATE_IMPL_FDS", proc.stderr)

    def test_rows_a_handler_does_not_run_are_answered_unsupported_one_by_one(self):
        from meshgate.core import schema
        from meshgate.impls import protocol

        tensor = {"path": "/tmp/out-0.bin", "dtype": "float32", "shape": [2]}

        def some_rows(request, perf, directory):
            return {"sizes": [{"outputs": {"0": tensor}, "time_s": [1e-6]},
                              protocol.unsupported_row("in place: no such form")]}, None

        answers = self.serve({"collective": some_rows}, self.case("collective"))
        self.assertEqual(answers[0]["status"], "ok")
        self.assertEqual(answers[0]["observables"]["sizes"][1],
                         {"unsupported": "in place: no such form"})
        with self.assertRaises(ValueError):
            protocol.unsupported_row("")
        # A declined row has a reason and nothing else.
        for entry in ({"unsupported": ""}, {"unsupported": 3},
                      {"unsupported": "why", "outputs": {"0": tensor}}):
            with self.assertRaises(schema.SchemaError, msg=entry):
                schema.check({"type": "case", "status": "ok",
                              "observables": {"sizes": [entry]}}, "impl-1", "answer")

    def test_the_schema_refuses_an_answer_without_its_keys(self):
        from meshgate.core import schema

        with self.assertRaises(schema.SchemaError):
            schema.check({"type": "case", "status": "ok"}, "impl-1", "answer")
        with self.assertRaises(schema.SchemaError):
            schema.check({"type": "case", "status": "ok", "observables": {},
                          "samples": {"time_s": [-1]}}, "impl-1", "answer")


@unittest.skipUnless(_real_runner(), "needs MESHGATE_RUNNER: the built meshgate-runner")
class ToyImplementation(unittest.TestCase):
    def run_toy(self, mode: str, *extra: str, env: dict | None = None) -> tuple[int, dict, str]:
        tmp = Path(tempfile.mkdtemp(prefix="meshgate-impl-test-"))
        self.addCleanup(subprocess.run, ["rm", "-rf", str(tmp)])
        (tmp / "toy.yaml").write_text(CASES)
        env = dict(os.environ, TOY_IMPL_PACKAGE_PARENT=str(PACKAGE_PARENT), **(env or {}))
        proc = subprocess.run(
            [RUNNER, "run", str(tmp / "toy.yaml"), "--out", str(tmp / "out"), "--impl", "toy",
             "--impl-command", json.dumps([sys.executable, str(TOY), mode]), *extra],
            capture_output=True, text=True, env=env, timeout=300)
        results = json.loads((tmp / "out" / "results.json").read_text())
        self.log = (tmp / "out" / "impl-toy.stderr").read_text(errors="replace")
        return proc.returncode, results, proc.stdout + proc.stderr

    def statuses(self, results: dict) -> dict:
        return {row["name"]: row["status"] for row in results["cases"]}

    def test_a_wrong_implementation_fails(self):
        code, results, _ = self.run_toy("wrong")
        self.assertEqual(code, 1)
        rows = {row["name"]: row for row in results["cases"]}
        self.assertEqual(rows["coalesce"]["status"], "fail")
        self.assertIn("expected 8:1, got 1:0", rows["coalesce"]["message"])
        self.assertEqual(rows["composition"]["status"], "fail")
        # It computed what the case expects to be rejected.
        self.assertEqual(rows["rejected-nesting"]["status"], "fail")
        self.assertIn("toy computed it", rows["rejected-nesting"]["message"])
        self.assertTrue(all(row["impl"] == "toy" for row in results["cases"]))
        self.assertEqual(results["run"]["impls"]["toy"]["version"], "0.1")
        self.assertEqual(results["run"]["impls"]["toy"]["mode"], "wrong")

    def test_rejections_are_judged_against_expect_error(self):
        _, results, _ = self.run_toy("rejects")
        rows = {row["name"]: row for row in results["cases"]}
        self.assertEqual(rows["rejected-nesting"]["status"], "pass")
        self.assertEqual(rows["coalesce"]["status"], "fail")
        self.assertIn("rejected: ValueError: toy rejects coalesce", rows["coalesce"]["message"])

    def test_unsupported_cases_are_skipped_with_the_reason(self):
        code, results, _ = self.run_toy("unsupported")
        self.assertEqual(set(self.statuses(results).values()), {"skip"})
        self.assertIn("toy: toy cannot express layouts", results["cases"][0]["message"])
        self.assertEqual(code, 0)

    def test_a_crash_is_an_error_row_and_the_suite_goes_on(self):
        code, results, _ = self.run_toy("crash")
        self.assertEqual(code, 2)
        rows = {row["name"]: row for row in results["cases"]}
        self.assertEqual(rows["composition"]["status"], "error")
        self.assertIn("implementation 'toy' exited with code 7", rows["composition"]["message"])
        # A fresh process answers the next cases.
        self.assertEqual(rows["coalesce"]["status"], "fail")
        self.assertEqual(rows["rejected-nesting"]["status"], "fail")
        self.assertEqual(len(rows), 4)

    def test_an_exit_is_seen_at_once_when_a_leftover_process_holds_the_channel(self):
        pid_file = Path(tempfile.mkdtemp(prefix="meshgate-impl-orphan-")) / "pid"
        self.addCleanup(subprocess.run, ["rm", "-rf", str(pid_file.parent)])
        start = time.monotonic()
        _, results, _ = self.run_toy("orphan", "--case-timeout", "120",
                                     env={"TOY_IMPL_ORPHAN_PID": str(pid_file)})
        self.assertLess(time.monotonic() - start, 60)
        rows = {row["name"]: row for row in results["cases"]}
        self.assertEqual(rows["composition"]["status"], "error")
        self.assertIn("implementation 'toy' exited with code 7", rows["composition"]["message"])
        self.assertEqual(rows["rejected-nesting"]["status"], "fail")
        # The forked process went with the implementation's process group.
        orphan = int(pid_file.read_text())
        for _ in range(100):
            try:
                os.kill(orphan, 0)
            except ProcessLookupError:
                break
            time.sleep(0.05)
        else:
            os.kill(orphan, 9)
            self.fail(f"process {orphan} of the implementation outlived it")

    def test_a_flood_of_output_is_judged_as_if_silent(self):
        """stdout and stderr full of lines, answers of the protocol among them, from Python, C
        and child processes: the same verdicts as the quiet `wrong`, everything in the log."""
        code, results, output = self.run_toy("flood")
        self.assertEqual(code, 1, output)
        rows = {row["name"]: row for row in results["cases"]}
        self.assertEqual({name: row["status"] for name, row in rows.items()},
                         {"coalesce": "fail", "composition": "fail", "rejected-nesting": "fail",
                          "timed": "pass"})
        self.assertIn("expected 8:1, got 1:0", rows["coalesce"]["message"])
        self.assertEqual(results["run"]["impls"]["toy"]["version"], "0.1")
        self.assertNotIn("flood", output)
        for source in ("python-stdout", "python-stderr", "c-printf", "child-stdout",
                       "child-stderr"):
            for where in ("start", "case-4"):
                self.assertIn(f"flood {source} {where} 1998", self.log)
        self.assertIn('{"type": "case", "status": "ok", "observables": {"result": "8:1"}}',
                      self.log)

    def test_the_stdio_transport_is_refused_with_a_pointer_to_the_channel(self):
        _, results, _ = self.run_toy("stdio")
        self.assertEqual({row["status"] for row in results["cases"]}, {"error"})
        message = results["cases"][0]["message"]
        self.assertIn("implementation 'toy' exited with code 0 before answering hello", message)
        self.assertIn("MESHGATE_IMPL_FDS", message)

    def test_garbage_is_an_error_row_naming_the_implementation(self):
        _, results, _ = self.run_toy("garbage", "--case-timeout", "20")
        row = results["cases"][0]
        self.assertEqual(row["status"], "error")
        self.assertIn("implementation 'toy' answered case 'toy/coalesce' with a line that is not "
                      "JSON: this is not json", row["message"])

    def test_a_hang_is_stopped_at_the_case_timeout(self):
        _, results, _ = self.run_toy("hang", "--case-timeout", "2")
        self.assertEqual(len(results["cases"]), 4)
        for row in results["cases"]:
            self.assertEqual(row["status"], "error", row)
            self.assertIn("did not answer", row["message"])
            self.assertIn("within 2 s", row["message"])

    def test_progress_lines_restart_the_case_timeout(self):
        code, results, _ = self.run_toy("slowsetup", "--case-timeout", "2")
        self.assertEqual(code, 1)
        rows = {row["name"]: row for row in results["cases"]}
        self.assertEqual(rows["coalesce"]["status"], "fail", rows["coalesce"])
        self.assertIn("expected 8:1, got 1:0", rows["coalesce"]["message"])

    def test_progress_lines_extend_an_answer_to_four_case_timeouts_at_most(self):
        started = time.monotonic()
        _, results, _ = self.run_toy("chatter", "--case-timeout", "1", "--case", "*coalesce")
        self.assertLess(time.monotonic() - started, 60)
        row = results["cases"][0]
        self.assertEqual(row["status"], "error", row)
        self.assertIn("within 4 s (4 case timeouts, the most that progress lines extend it to)",
                      row["message"])

    def test_a_foreign_protocol_is_refused_at_hello(self):
        _, results, _ = self.run_toy("badhello")
        self.assertEqual({row["status"] for row in results["cases"]}, {"error"})
        self.assertIn("speaks protocol 'other/9'", results["cases"][0]["message"])
        self.assertIn("speaks protocol 'other/9'", results["run"]["impls"]["toy"]["error"])

    def test_perf_samples_come_from_the_implementation(self):
        _, results, _ = self.run_toy("wrong")
        timed = results["cases"][3]
        self.assertEqual(timed["status"], "pass", timed)
        self.assertEqual(timed["samples"], {"time_s": [[1e-6, 1e-6, 1e-6]]})
        self.assertEqual(timed["metrics"]["time_s"]["median"], 1e-6)


if __name__ == "__main__":
    unittest.main()
