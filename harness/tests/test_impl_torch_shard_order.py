"""cases/redistribute/shard-order.yaml on PyTorch (--impl torch): sources sharded in a shard
order (DTensorSpec.shard_order) or by a strided shard, built by the adapter from the global
tensor, redistributed and judged by the target's shards."""

from __future__ import annotations

import tempfile
import unittest
from pathlib import Path

from tests.support import requires_torch_runner, rows_on_torch

CASES = Path(__file__).resolve().parents[2] / "cases" / "redistribute" / "shard-order.yaml"


@requires_torch_runner
class ShardOrderOnTorch(unittest.TestCase):
    NAMES = ["s0s0-order-ba-to-rr-6-rows-internal", "ss0-s0-to-rr-6-rows",
             "s0s0s0-order-bca-to-s1rr-8-rows", "s0s0s0-order-bca-to-s1rr-6-rows"]

    @classmethod
    def setUpClass(cls) -> None:
        cls.tmp = tempfile.TemporaryDirectory()
        cls.rows = rows_on_torch(CASES, "redistribute-shard-order", cls.NAMES,
                                 Path(cls.tmp.name) / "out")

    @classmethod
    def tearDownClass(cls) -> None:
        cls.tmp.cleanup()

    def test_an_order_is_undone_in_reverse(self):
        for name in ("s0s0-order-ba-to-rr-6-rows-internal", "ss0-s0-to-rr-6-rows"):
            with self.subTest(name):
                row = self.rows[name]
                self.assertEqual(row["status"], "pass", row.get("message"))
                self.assertEqual(row["plan"], ["all_gather(A, dim=0)", "all_gather(B, dim=0)"])
                self.assertNotIn("meshgate_plan", row["metrics"])

    def test_the_uneven_merge_bug_is_reached_through_a_shard_order(self):
        even = self.rows["s0s0s0-order-bca-to-s1rr-8-rows"]
        self.assertEqual(even["status"], "pass", even.get("message"))
        uneven = self.rows["s0s0s0-order-bca-to-s1rr-6-rows"]
        self.assertEqual(uneven["status"], "fail")
        self.assertEqual(uneven["plan"], ["all_gather(A, dim=0)", "all_gather(B+C, dim=0)"])
        self.assertIn("wrong element(s)", uneven["message"])


if __name__ == "__main__":
    unittest.main()
