"""The meshgate.impl/1 protocol end to end: the real runner (MESHGATE_RUNNER) against a toy
implementation that is wrong, refuses, crashes, hangs or speaks garbage. The runner must judge
a wrong answer `fail`, an unsupported case `skip`, and every broken exchange an `error` row
naming the implementation, and the suite must go on."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import tempfile
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

        stdin = io.StringIO("".join(json.dumps(r) + "\n" for r in requests))
        stdout = io.StringIO()
        saved = sys.stdout
        try:
            # A broken handler's traceback goes to stderr, as it would to the runner's file.
            with contextlib.redirect_stderr(io.StringIO()):
                protocol.serve("unit", "1.0", {"k": 1}, handlers, stdin=stdin, stdout=stdout)
        finally:
            sys.stdout = saved
        answers = [json.loads(line) for line in stdout.getvalue().splitlines()]
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

    def test_the_schema_refuses_an_answer_without_its_keys(self):
        from meshgate.core import schema

        with self.assertRaises(schema.SchemaError):
            schema.check({"type": "case", "status": "ok"}, "impl-1", "answer")
        with self.assertRaises(schema.SchemaError):
            schema.check({"type": "case", "status": "ok", "observables": {},
                          "samples": {"time_s": [-1]}}, "impl-1", "answer")


@unittest.skipUnless(_real_runner(), "needs MESHGATE_RUNNER: the built meshgate-runner")
class ToyImplementation(unittest.TestCase):
    def run_toy(self, mode: str, *extra: str) -> tuple[int, dict, str]:
        tmp = Path(tempfile.mkdtemp(prefix="meshgate-impl-test-"))
        self.addCleanup(subprocess.run, ["rm", "-rf", str(tmp)])
        (tmp / "toy.yaml").write_text(CASES)
        env = dict(os.environ, TOY_IMPL_PACKAGE_PARENT=str(PACKAGE_PARENT))
        proc = subprocess.run(
            [RUNNER, "run", str(tmp / "toy.yaml"), "--out", str(tmp / "out"), "--impl", "toy",
             "--impl-command", json.dumps([sys.executable, str(TOY), mode]), *extra],
            capture_output=True, text=True, env=env, timeout=300)
        results = json.loads((tmp / "out" / "results.json").read_text())
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
