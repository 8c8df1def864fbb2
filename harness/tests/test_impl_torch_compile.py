"""cases/redistribute/compiled.yaml on PyTorch (--impl torch): redistributions under
torch.compile issue the collectives and give the values eager DTensor does, read from the
compiled graph; graph breaks come back as metrics."""

from __future__ import annotations

import tempfile
import unittest
from pathlib import Path

from tests.support import requires_torch_runner, rows_on_torch

CASES = Path(__file__).resolve().parents[2] / "cases" / "redistribute" / "compiled.yaml"


@requires_torch_runner
class CompiledRedistributionsOnTorch(unittest.TestCase):
    NAMES = ["s0s1-to-s1s0", "pp-to-rr-flat-ab", "pp-to-s0s0-flat-ab-internal",
             "issue-194457-5x3-on-2x2"]

    @classmethod
    def setUpClass(cls) -> None:
        cls.tmp = tempfile.TemporaryDirectory()
        cls.rows = rows_on_torch(CASES, "redistribute-compiled", cls.NAMES,
                                 Path(cls.tmp.name) / "out")

    @classmethod
    def tearDownClass(cls) -> None:
        cls.tmp.cleanup()

    def test_the_compiled_graph_issues_what_eager_does(self):
        for name, plan in (("s0s1-to-s1s0", ["all_gather(B, dim=1)", "all_to_all(A, dim=0->1)"]),
                           ("pp-to-rr-flat-ab", ["all_reduce(A+B, sum)"]),
                           ("pp-to-s0s0-flat-ab-internal", ["reduce_scatter(A+B, sum, dim=0)"])):
            with self.subTest(name):
                row = self.rows[name]
                self.assertEqual(row["status"], "pass", row.get("message"))
                self.assertEqual(row["plan"], plan)

    def test_graph_breaks_and_graphs_are_metrics(self):
        public = self.rows["pp-to-rr-flat-ab"]["metrics"]
        self.assertEqual((public["graph_breaks"], public["graphs"]), (0, 1))
        internal = self.rows["pp-to-s0s0-flat-ab-internal"]["metrics"]
        self.assertGreaterEqual(internal["graphs"], 1)
        self.assertGreaterEqual(internal["graph_breaks"], 0)

    def test_the_uneven_merge_is_as_wrong_compiled_as_eager(self):
        row = self.rows["issue-194457-5x3-on-2x2"]
        self.assertEqual(row["status"], "fail")
        self.assertEqual(row["plan"], ["all_gather(A+B, dim=0)"])
        self.assertIn("24 wrong element(s)", row["message"])


if __name__ == "__main__":
    unittest.main()
