"""cases/redistribute/partial-ops.yaml on PyTorch (--impl torch), a few of its cases: the
full_tensor path, reductions of Partial tensors judged against the adapter's single-process
reference, the refusals PyTorch shares with meshgate, and the merged integer sum/avg that
PyTorch computes (a float32 local tensor, or no refusal) where its unmerged path refuses."""

from __future__ import annotations

import tempfile
import unittest
from pathlib import Path

from tests.support import requires_torch_runner, rows_on_torch


@requires_torch_runner
class PartialOpsOnTorch(unittest.TestCase):
    """A few cases of cases/redistribute/partial-ops.yaml on PyTorch: the full_tensor path, a
    reduction judged against the adapter's single-process reference, the refusals PyTorch
    shares with meshgate, and the merged integer sum/avg that PyTorch computes instead."""

    CASES = ["p-max-to-r-full_tensor", "int-avg-to-R-public-int64-rejected",
             "2d-mixed-p-max-p-min-rejected", "reduce-vector_norm-of-2d-S(0),P(sum)",
             "reduce-amax-of-p-max-stays-partial",
             "int-P(sum),P(avg)-merged-to-rr-internal-rejected",
             "int-P(sum),P(avg)-merged-to-rr-public-rejected"]

    @classmethod
    def setUpClass(cls) -> None:
        cls.tmp = tempfile.TemporaryDirectory()
        cls.rows = rows_on_torch(
            Path(__file__).resolve().parents[2] / "cases" / "redistribute" / "partial-ops.yaml",
            "redistribute-partial-ops", cls.CASES, Path(cls.tmp.name) / "out")

    @classmethod
    def tearDownClass(cls) -> None:
        cls.tmp.cleanup()

    def test_the_shared_answers_pass(self):
        for name in self.CASES[:5]:
            with self.subTest(name):
                self.assertEqual(self.rows[name]["status"], "pass", self.rows[name].get("message"))
        self.assertEqual(self.rows["p-max-to-r-full_tensor"]["plan"], ["all_reduce(A, max)"])
        norm = self.rows["reduce-vector_norm-of-2d-S(0),P(sum)"]
        self.assertEqual(norm["metrics"]["result_placements"],
                         ["_NormPartial(sum, norm=2)", "_NormPartial(sum, norm=2)"])

    def test_the_merged_integer_average_is_pytorch_s_bug(self):
        internal = self.rows["int-P(sum),P(avg)-merged-to-rr-internal-rejected"]
        self.assertEqual(internal["status"], "fail")
        self.assertIn("holds float32", internal["message"])
        public = self.rows["int-P(sum),P(avg)-merged-to-rr-public-rejected"]
        self.assertEqual(public["status"], "fail")
        self.assertIn("torch computed it", public["message"])



if __name__ == "__main__":
    unittest.main()
