"""Redistribute cases with PyTorch as the implementation under test (--impl torch): the real
runner (MESHGATE_RUNNER, else a runner built under build/) hands each case of a few
cases/redistribute suites to the torch adapter, which redistributes real DTensors on a gloo
world and answers the collectives CommDebugMode counted and every rank's local tensor; the
runner judges them with the checks of meshgate's own run. No row may be an error."""

from __future__ import annotations

import tempfile
import unittest
from pathlib import Path

from tests.support import requires_torch_runner, run_on_torch

REPO = Path(__file__).resolve().parents[2]
SUITES = ["two-d.yaml", "api-and-errors.yaml", "upstream-bugs.yaml", "sum-avg.yaml"]


@requires_torch_runner
class TorchRedistribute(unittest.TestCase):
    rows: dict[str, dict] = {}

    @classmethod
    def setUpClass(cls) -> None:
        cls.tmp = tempfile.TemporaryDirectory()
        document = run_on_torch([REPO / "cases" / "redistribute" / s for s in SUITES],
                                Path(cls.tmp.name) / "out", MESHGATE_TORCH_MAX_RANKS="8")
        cls.rows = {row["id"]: row for row in document["cases"]}

    @classmethod
    def tearDownClass(cls) -> None:
        cls.tmp.cleanup()

    def row(self, case_id: str) -> dict:
        self.assertIn(case_id, self.rows)
        self.assertEqual(self.rows[case_id]["impl"], "torch")
        return self.rows[case_id]

    def assert_passes(self, case_id: str, plan: list[str]) -> dict:
        row = self.row(case_id)
        self.assertEqual(row["status"], "pass", row.get("message"))
        self.assertEqual(row["plan"], plan)
        return row

    def test_no_row_is_an_error(self):
        errors = {i: r.get("message") for i, r in self.rows.items() if r["status"] == "error"}
        self.assertEqual(errors, {})

    def test_a_merged_all_reduce_over_a_flattened_mesh(self):
        row = self.assert_passes("redistribute-2d/pp-to-rr-flat-ab-float32",
                                 ["all_reduce(A+B, sum)"])
        self.assertEqual(row["metrics"]["warnings"], 0)

    def test_without_a_flattened_mesh_every_dim_reduces_and_warns(self):
        row = self.assert_passes("redistribute-2d/pp-to-rr-no-flatten",
                                 ["all_reduce(A, sum)", "all_reduce(B, sum)"])
        self.assertEqual(row["metrics"]["warnings"], 1)

    def test_gloos_gathered_all_to_all_is_named_as_the_all_to_all_it_stands_for(self):
        self.assert_passes("redistribute-2d/s0s1-to-s1s0",
                           ["all_gather(B, dim=1)", "all_to_all(A, dim=0->1)"])

    def test_a_sum_avg_mix_merges_into_one_sum(self):
        self.assert_passes("redistribute-sum-avg/sum-avg-to-rr-flat", ["all_reduce(A+B, sum)"])

    def test_pytorchs_own_errors_are_judged_against_expect_error(self):
        self.assertEqual(self.row("redistribute-api/internal-r-to-pproduct-rejected")["status"],
                         "pass")
        self.assertEqual(self.row("redistribute-api/public-r-to-p-sum-rejected")["status"],
                         "pass")

    def test_the_internal_api_partitions_replicate_into_partial(self):
        self.assert_passes("redistribute-api/internal-r-to-psum-local-divide", [])

    def test_written_out_plans_are_skips_saying_why(self):
        row = self.row("redistribute-upstream-bugs/rs-after-chunk-pytorch")
        self.assertEqual(row["status"], "skip")
        self.assertIn("`steps:`", row["message"])

    def test_the_reduce_scatter_merge_after_a_chunk_corrupts_shapes_under_pytorch(self):
        # PyTorch merges the two reduce_scatters that meshgate keeps apart: the plan the
        # -pytorch twin replays, with the damage it expects.
        row = self.row("redistribute-upstream-bugs/rs-after-chunk-meshgate")
        self.assertEqual(row["status"], "fail")
        self.assertEqual(row["plan"], ["reduce_scatter(B+C, sum, dim=0)"])
        self.assertIn("4 rank(s) ended with a local shape other than the target shard's",
                      row["message"])


if __name__ == "__main__":
    unittest.main()
