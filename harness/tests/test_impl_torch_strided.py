"""cases/redistribute/torch-tracker.yaml on PyTorch (--impl torch): ops on DTensors with a
strided shard (SS(d,k), _StridedShard) judged against the adapter's single-process reference.
The pinned release has every bug the file tracks fixed, so every case passes here; an older
release fails them (docs/torch-bugs/README.md)."""

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


if __name__ == "__main__":
    unittest.main()
