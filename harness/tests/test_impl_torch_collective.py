"""Collective cases with PyTorch as the implementation under test (--impl torch): the real runner
(MESHGATE_RUNNER, else a runner built under build/) hands each case's inputs to the torch
adapter, which runs torch.distributed's collectives on a gloo world, and counts the wrong
elements of every rank's output with meshgate's own check. No row may be an error; the cases
the adapter does not take are skips that say why, and the rows of a case it does not take (the
in-place rows of an op PyTorch has no in-place form of) are skips in the case's table while its
other rows run."""

from __future__ import annotations

import tempfile
import unittest
from pathlib import Path

from tests.support import requires_torch_runner, run_on_torch

REPO = Path(__file__).resolve().parents[2]

CASES = """\
suite: torch-collective
cases:
  - name: broadcast-root-2-of-5
    kind: collective
    op: broadcast
    mesh: {shape: [5], names: [x]}
    dtype: bfloat16
    root: 2
    bytes: [10, 2KiB]
    inplace: [false, true]
  - name: reduce-scatter-avg-over-tp
    kind: collective
    op: reduce_scatter
    mesh: {shape: [2, 3], names: [dp, tp]}
    group: tp
    dtype: float16
    reduce: avg
    bytes: [12, 6KiB]
  # PyTorch defines no in-place reduce_scatter_tensor or all_to_all_single: those rows are
  # skips saying so, the out-of-place rows beside them run, and a case of in-place rows alone is
  # a skip.
  - name: reduce-scatter-in-place
    kind: collective
    op: reduce_scatter
    mesh: {shape: [2], names: [x]}
    dtype: float32
    reduce: sum
    bytes: [8, 2KiB]
    inplace: [false, true]
  - name: all-to-all-in-place
    kind: collective
    op: all_to_all
    mesh: {shape: [3], names: [x]}
    dtype: float32
    bytes: 12
    inplace: true
  - name: all-reduce-int8-product
    kind: collective
    op: all_reduce
    mesh: {shape: [3], names: [x]}
    dtype: int8
    reduce: product
    bytes: [3, 3000]
    inplace: [false, true]
  # Group ranks in mesh order, not rank order: rank 3 is the group's rank 0.
  - name: all-gather-permuted-ranks
    kind: collective
    op: all_gather
    mesh: {shape: [2, 2], names: [dp, tp], ranks: [3, 1, 2, 0]}
    group: [dp, tp]
    dtype: int32
    bytes: [16, 4KiB]
    inplace: [false, true]
  # Rank 1 is in no group: it still takes part in creating the groups.
  - name: all-reduce-rank-outside-the-mesh
    kind: collective
    op: all_reduce
    mesh: {shape: [2], names: [x], ranks: [0, 2]}
    dtype: float64
    reduce: max
    bytes: [8, 8KiB]
  - name: all-to-all-out-of-place
    kind: collective
    op: all_to_all
    mesh: {shape: [3], names: [x]}
    dtype: float32
    bytes: [12, 12KiB]
  - name: timed
    kind: collective
    op: all_reduce
    mesh: {shape: [2], names: [x]}
    dtype: float32
    reduce: sum
    bytes: [1KiB, 64KiB]
    perf: {warmup: 1, iters: 3, runs: 1}
  - name: more-ranks-than-the-world
    kind: collective
    op: all_reduce
    mesh: {shape: [9], names: [x]}
    dtype: float32
    reduce: sum
    bytes: 36
  - name: inputs-over-the-limit
    kind: collective
    op: all_reduce
    mesh: {shape: [2], names: [x]}
    dtype: float32
    reduce: sum
    bytes: 160MiB
"""


@requires_torch_runner
class TorchCollectives(unittest.TestCase):
    rows: dict[str, dict] = {}

    @classmethod
    def setUpClass(cls) -> None:
        cls.tmp = tempfile.TemporaryDirectory()
        cases = Path(cls.tmp.name) / "collectives.yaml"
        cases.write_text(CASES)
        document = run_on_torch([cases], Path(cls.tmp.name) / "out", timeout=600,
                                MESHGATE_TORCH_MAX_RANKS="8")
        cls.document = document
        cls.rows = {row["id"]: row for row in document["cases"]}

    @classmethod
    def tearDownClass(cls) -> None:
        cls.tmp.cleanup()

    def row(self, name: str) -> dict:
        case_id = f"torch-collective/{name}"
        self.assertIn(case_id, self.rows)
        return self.rows[case_id]

    def assert_passes(self, name: str, rows: int) -> dict:
        row = self.row(name)
        self.assertEqual(row["status"], "pass", row.get("message"))
        self.assertEqual(row["impl"], "torch")
        self.assertEqual(row["metrics"]["wrong"], 0)
        self.assertEqual(len(row["metrics"]["sizes"]), rows)
        for size in row["metrics"]["sizes"]:
            self.assertEqual(size["wrong"], 0)
            self.assertGreater(size["time_s"], 0)
            self.assertGreater(size["algbw_GBps"], 0)
        return row

    def test_the_results_match_their_schema(self):
        # Rows with skipped rows in their tables included.
        from meshgate.core import schema
        try:
            schema.check(self.document, "results-1", "results.json")
        except schema.ValidatorMissing as e:
            self.skipTest(str(e))

    def test_no_row_is_an_error(self):
        errors = {i: r.get("message") for i, r in self.rows.items() if r["status"] == "error"}
        self.assertEqual(errors, {})

    def test_broadcast_from_a_non_zero_root_in_and_out_of_place(self):
        self.assert_passes("broadcast-root-2-of-5", 4)

    def test_reduce_scatter_avg_on_the_groups_of_a_dim(self):
        row = self.assert_passes("reduce-scatter-avg-over-tp", 2)
        self.assertEqual(row["metrics"]["groups"], 2)
        self.assertEqual(row["metrics"]["group_size"], 3)

    def test_an_integer_product(self):
        self.assert_passes("all-reduce-int8-product", 4)

    def test_groups_keep_the_mesh_order_of_their_ranks(self):
        self.assert_passes("all-gather-permuted-ranks", 4)

    def test_a_rank_in_no_group_takes_part(self):
        row = self.assert_passes("all-reduce-rank-outside-the-mesh", 2)
        self.assertEqual(row["params"]["ranks"], 3)

    def test_all_to_all_out_of_place(self):
        self.assert_passes("all-to-all-out-of-place", 2)

    def test_no_aliasing_where_pytorch_defines_no_in_place_form(self):
        row = self.row("all-to-all-in-place")
        self.assertEqual(row["status"], "skip", row.get("message"))
        self.assertIn("torch: in place: torch.distributed.all_to_all_single defines no in-place "
                      "form", row["message"])

    def test_a_mixed_case_runs_its_out_of_place_rows_and_skips_its_in_place_ones(self):
        row = self.row("reduce-scatter-in-place")
        self.assertEqual(row["status"], "pass", row.get("message"))
        self.assertEqual(row["metrics"]["wrong"], 0)
        sizes = row["metrics"]["sizes"]
        self.assertEqual([(s["bytes"], s["inplace"]) for s in sizes],
                         [(8, False), (2048, False), (8, True), (2048, True)])
        for size in sizes[:2]:
            self.assertNotIn("status", size)
            self.assertEqual(size["wrong"], 0)
            self.assertGreater(size["time_s"], 0)
        for size in sizes[2:]:
            self.assertEqual(size["status"], "skip")
            self.assertIn("in place: torch.distributed.reduce_scatter_tensor defines no in-place "
                          "form", size["reason"])
            self.assertNotIn("wrong", size)
        self.assertIn("2 of 4 rows not run by the implementation; 8 B in-place, 2 KiB in-place: "
                      "in place: torch.distributed.reduce_scatter_tensor", row["message"])

    def test_a_perf_case_answers_the_timed_iterations_of_its_largest_size(self):
        row = self.assert_passes("timed", 2)
        samples = row["samples"]["time_s"]
        self.assertEqual(len(samples), 1)
        self.assertEqual(len(samples[0]), 3)
        # The largest size's row is the median of those same iterations.
        self.assertAlmostEqual(row["metrics"]["sizes"][1]["time_s"], sorted(samples[0])[1])

    def test_a_case_larger_than_the_world_is_a_skip_naming_the_limit(self):
        row = self.row("more-ranks-than-the-world")
        self.assertEqual(row["status"], "skip")
        self.assertIn("needs 9 gloo ranks, more than MESHGATE_TORCH_MAX_RANKS=8", row["message"])

    def test_inputs_over_the_limit_are_a_skip_saying_why(self):
        row = self.row("inputs-over-the-limit")
        self.assertEqual(row["status"], "skip")
        self.assertIn("its inputs hold 320 MiB over every rank and size, more than the 256 MiB",
                      row["message"])


if __name__ == "__main__":
    unittest.main()
