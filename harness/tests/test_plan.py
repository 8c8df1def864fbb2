from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path
from unittest import mock

from meshgate import cli
from meshgate.commands import plan

REPO = Path(__file__).resolve().parents[2]

# A stand-in planner that records its arguments and answers like `meshgate-plan`.
FAKE_PLANNER = """\
import json, os, sys
with open(os.environ["FAKE_PLAN_LOG"], "w") as f:
    json.dump(sys.argv[1:], f)
if "--from" in sys.argv and sys.argv[sys.argv.index("--from") + 1] == "S(0)":
    sys.stderr.write("meshgate-plan: RuntimeError: redistribute from Shard(dim=0) to "
                     "Partial(sum) not supported yet\\n")
    sys.exit(2)
print("collectives issued: all_reduce(A+C, sum)")
"""


def find_built_planner() -> Path | None:
    """The planner CTest built (MESHGATE_PLAN), else the newest one built in this checkout."""
    given = os.environ.get("MESHGATE_PLAN")
    if given and Path(given).name == "meshgate-plan" and Path(given).is_file():
        return Path(given)
    found = sorted((REPO / "build").glob("*/harness/runner/meshgate-plan"),
                   key=lambda p: p.stat().st_mtime, reverse=True)
    return found[0] if found else None


class PlanArgumentsTest(unittest.TestCase):
    def parse(self, argv):
        return cli.build_parser().parse_args(argv)

    def test_forwards_every_option_in_order(self):
        args = self.parse(["plan", "--mesh", "2x2x2:A,B,C", "--flatten", "A,C",
                           "--flatten", "B,C=bc", "--from", "P(sum),R,P(sum)", "--to", "R,R,R",
                           "--shape", "8,6", "--dtype", "bfloat16", "--no-optimize",
                           "--planner", "min_cost", "--api", "public", "--coord", "1,0,1",
                           "--ranks-per-node", "4", "--json"])
        self.assertEqual(plan.planner_arguments(args), [
            "--mesh", "2x2x2:A,B,C", "--flatten", "A,C", "--flatten", "B,C=bc",
            "--from", "P(sum),R,P(sum)", "--to", "R,R,R", "--shape", "8,6",
            "--dtype", "bfloat16", "--coord", "1,0,1", "--planner", "min_cost",
            "--api", "public", "--ranks-per-node", "4", "--no-optimize", "--json"])

    def test_defaults_are_left_to_the_runner(self):
        args = self.parse(["plan", "--mesh", "4:A", "--from", "S(0)", "--to", "R"])
        self.assertEqual(plan.planner_arguments(args),
                         ["--mesh", "4:A", "--from", "S(0)", "--to", "R"])

    def test_rejects_unknown_planner(self):
        with contextlib.redirect_stderr(io.StringIO()), self.assertRaises(SystemExit):
            self.parse(["plan", "--mesh", "4:A", "--from", "R", "--to", "R",
                        "--planner", "dijkstra"])


class PlanCommandTest(unittest.TestCase):
    """`meshgate plan` against a fake planner: arguments reach it, its exit code comes back."""

    def setUp(self):
        tmp = tempfile.TemporaryDirectory(prefix="meshgate-plan-test-")
        self.addCleanup(tmp.cleanup)
        self.dir = Path(tmp.name)
        script = self.dir / "fake_planner.py"
        script.write_text(FAKE_PLANNER)
        wrapper = self.dir / "meshgate-plan"
        wrapper.write_text(f"#!/bin/sh\nexec {sys.executable} {script} \"$@\"\n")
        wrapper.chmod(0o755)
        self.log = self.dir / "argv.json"
        patcher = mock.patch.dict(os.environ, {"MESHGATE_PLAN": str(wrapper),
                                               "FAKE_PLAN_LOG": str(self.log)})
        patcher.start()
        self.addCleanup(patcher.stop)

    def run_cli(self, argv):
        # The planner writes straight to the inherited file descriptors, so capture those.
        completed = subprocess.run(
            [sys.executable, "-c", "import sys; from meshgate import cli; sys.exit(cli.main())"]
            + argv, cwd=REPO / "harness", capture_output=True, text=True, env=os.environ.copy())
        return completed

    def test_passes_output_and_success_through(self):
        done = self.run_cli(["plan", "--mesh", "2x2x2:A,B,C", "--flatten", "A,C",
                             "--from", "P(sum),R,P(sum)", "--to", "R,R,R"])
        self.assertEqual(done.returncode, 0, done.stderr)
        self.assertIn("all_reduce(A+C, sum)", done.stdout)
        self.assertEqual(json.loads(self.log.read_text()),
                         ["--mesh", "2x2x2:A,B,C", "--flatten", "A,C",
                          "--from", "P(sum),R,P(sum)", "--to", "R,R,R"])

    def test_passes_planner_errors_through(self):
        done = self.run_cli(["plan", "--mesh", "4:A", "--from", "S(0)", "--to", "P(sum)"])
        self.assertEqual(done.returncode, 2)
        self.assertIn("not supported yet", done.stderr)

    def test_bad_planner_path_is_a_usage_error(self):
        with mock.patch.dict(os.environ, {"MESHGATE_PLAN": str(self.dir / "missing")}):
            err = io.StringIO()
            with contextlib.redirect_stderr(err):
                code = cli.main(["plan", "--mesh", "4:A", "--from", "R", "--to", "R"])
        self.assertEqual(code, 2)
        self.assertIn("MESHGATE_PLAN", err.getvalue())


@unittest.skipIf(find_built_planner() is None, "no meshgate-plan built in this checkout")
class PlanWithBuiltPlannerTest(unittest.TestCase):
    """End to end through a meshgate-plan built here, when one exists."""

    def plan_json(self, *argv):
        planner = find_built_planner()
        done = subprocess.run([str(planner), *argv, "--json"], capture_output=True,
                              text=True, check=False)
        self.assertEqual(done.returncode, 0, done.stderr)
        return json.loads(done.stdout)

    def test_merges_over_the_flattened_mesh(self):
        doc = self.plan_json("--mesh", "2x2x2:A,B,C", "--flatten", "A,C",
                             "--from", "P(sum),R,P(sum)", "--to", "R,R,R", "--shape", "8,6")
        self.assertEqual(doc["comms"], ["all_reduce(A+C, sum)"])
        self.assertEqual([s["op"] for s in doc["unmerged"]],
                         ["all_reduce(A, sum)", "all_reduce(C, sum)"])
        self.assertEqual(doc["runs"][0]["reason"], "merged")
        self.assertLess(doc["cost_s"], doc["unmerged_cost_s"])

    def test_links_no_gpu_or_mpi_library(self):
        # Start-up time: the runner loads CUDA, cuBLASLt, NCCL and MPI; planning needs none.
        done = subprocess.run(["ldd", str(find_built_planner())], capture_output=True, text=True,
                              check=False)
        if done.returncode != 0:
            self.skipTest("ldd cannot read the planner here")
        for library in ("libcuda", "libcublas", "libnccl", "libmpi", "libyaml", "blas"):
            self.assertNotIn(library, done.stdout)

    def test_merges_uneven_splits_that_coincide(self):
        doc = self.plan_json("--mesh", "2x1:A,B", "--flatten", "A,B",
                             "--from", "S(0),S(0)", "--to", "R,R", "--shape", "3")
        self.assertEqual(doc["comms"], ["all_gather(A+B, dim=0)"])
        self.assertEqual(doc["warnings"], [])

    def test_refuses_uneven_all_gather_of_194457(self):
        doc = self.plan_json("--mesh", "2x2:A,B", "--flatten", "A,B",
                             "--from", "S(0),S(0)", "--to", "R,R", "--shape", "5,3")
        self.assertEqual(doc["comms"], ["all_gather(B, dim=0)", "all_gather(A, dim=0)"])
        self.assertEqual([w["reason"] for w in doc["warnings"]], ["uneven_tensor_shape"])

    def test_a_node_without_ranks_is_a_usage_error(self):
        done = subprocess.run([str(find_built_planner()), "--mesh", "2x2:A,B", "--from", "R,R",
                               "--to", "R,R", "--ranks-per-node", "0"], capture_output=True,
                              text=True, check=False)
        self.assertEqual(done.returncode, 2, done.stdout)
        self.assertIn("--ranks-per-node 0: a node holds at least one rank", done.stderr)

    def test_plans_a_16k_rank_mesh(self):
        doc = self.plan_json("--mesh", "8x16x8x16:pp,dp,cp,tp", "--flatten", "dp,cp",
                             "--from", "R,P(avg),P(avg),S(1)", "--to", "R,R,R,R",
                             "--planner", "min_cost")
        self.assertEqual(doc["mesh"]["ranks"], 16384)
        # min_cost reduces over dp+cp before the tp gather; greedy gathers first.
        self.assertEqual(doc["comms"], ["all_reduce(dp+cp, sum)", "all_gather(tp, dim=1)"])
        self.assertEqual([s["op"] for s in doc["unmerged"]],
                         ["all_gather(tp, dim=1)", "all_reduce(cp, avg)", "all_reduce(dp, avg)"])
        self.assertLess(doc["cost_s"], doc["greedy_cost_s"])


if __name__ == "__main__":
    unittest.main()
