"""cases/redistribute/torch-tracker.yaml on PyTorch (--impl torch): ops on DTensors, with a
strided shard (SS(d,k), _StridedShard) or plain, judged against the adapter's single-process
reference. The pinned release has every bug reported upstream that the file tracks fixed, so
those cases pass here, and an older release fails them; the argmax tie-break across ranks,
which no upstream report names, still fails here (docs/torch-bugs/README.md)."""

from __future__ import annotations

import tempfile
import unittest
from pathlib import Path

from tests.support import requires_torch_runner, rows_on_torch


@requires_torch_runner
class StridedOpsOnTorch(unittest.TestCase):
    CASES = ["mm-s1s1-by-strided-contraction-dim", "strided-uneven-5-on-2-full-tensor",
             "strided-ss0-s0-t", "strided-ss0-s0-sum-dim1"]

    @classmethod
    def setUpClass(cls) -> None:
        cls.tmp = tempfile.TemporaryDirectory()
        cls.rows = rows_on_torch(
            Path(__file__).resolve().parents[2] / "cases" / "redistribute" / "torch-tracker.yaml",
            "redistribute-torch-tracker", cls.CASES, Path(cls.tmp.name) / "out")

    @classmethod
    def tearDownClass(cls) -> None:
        cls.tmp.cleanup()

    def test_the_fixed_bugs_pass(self):
        for name in self.CASES:
            with self.subTest(name):
                self.assertEqual(self.rows[name]["status"], "pass", self.rows[name].get("message"))
                self.assertEqual(self.rows[name]["metrics"]["wrong_elements"], 0)

    def test_the_strided_source_is_built_and_reported(self):
        # full_tensor's result is the source itself: its placements name the strided shard
        self.assertEqual(self.rows["strided-uneven-5-on-2-full-tensor"]["metrics"]
                         ["result_placements"], ["SS(0,2)"])
        self.assertEqual(self.rows["strided-ss0-s0-t"]["params"]["from"], "SS(0,2),S(0)")


@requires_torch_runner
class TrackedOpsOnTorch(unittest.TestCase):
    FIXED = ["mean-of-uneven-s0-3x4-on-2", "mean-of-uneven-s0-1x4-on-2", "max-indices-over-s1-dim",
             "min-indices-over-s1-dim", "max-indices-of-pmax", "min-indices-of-pmin",
             "psum-plus-scalar", "argmax-over-every-dim-of-s0-control",
             "all-of-s0-with-zeros-on-one-rank", "all-dim0-of-s0-with-zeros-on-one-rank"]
    TIE_BREAK = ["argmax-over-every-dim-of-s1", "argmin-over-every-dim-of-s1"]

    @classmethod
    def setUpClass(cls) -> None:
        cls.tmp = tempfile.TemporaryDirectory()
        cls.rows = rows_on_torch(
            Path(__file__).resolve().parents[2] / "cases" / "redistribute" / "torch-tracker.yaml",
            "redistribute-torch-tracker", cls.FIXED + cls.TIE_BREAK, Path(cls.tmp.name) / "out")

    @classmethod
    def tearDownClass(cls) -> None:
        cls.tmp.cleanup()

    def test_the_fixed_bugs_pass(self):
        for name in self.FIXED:
            with self.subTest(name):
                self.assertEqual(self.rows[name]["status"], "pass", self.rows[name].get("message"))
                self.assertEqual(self.rows[name]["metrics"]["wrong_elements"], 0)

    def test_the_ops_reach_pytorch_as_written(self):
        self.assertEqual(self.rows["max-indices-over-s1-dim"]["params"]["reduce"],
                         {"op": "max_indices", "dim": 1})
        # a whole scalar stays an integer
        self.assertEqual(self.rows["psum-plus-scalar"]["params"]["reduce"],
                         {"op": "add", "dim": None, "scalar": 10})
        self.assertIsInstance(self.rows["psum-plus-scalar"]["params"]["reduce"]["scalar"], int)

    def test_the_tie_break_across_ranks_is_caught(self):
        # Every rank holds the other extreme's index: one wrong element per rank. When this
        # fails because they pass, PyTorch has fixed the tie-break: update
        # docs/torch-bugs/README.md and the two entries in baselines/torch-parity.json.
        for name in self.TIE_BREAK:
            with self.subTest(name):
                self.assertEqual(self.rows[name]["status"], "fail", self.rows[name].get("message"))
                self.assertEqual(self.rows[name]["metrics"]["wrong_elements"], 2)


if __name__ == "__main__":
    unittest.main()
