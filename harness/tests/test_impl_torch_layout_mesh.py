"""The layout and mesh suites with PyTorch as the implementation under test (--impl torch): the
real runner (MESHGATE_RUNNER, else a runner built under build/) hands every case to the torch
adapter. No row may be an error, and every fail and skip must say why; the layout model this
torch lacks, meshgate's own model comparison and the int64 limits of meshgate's algebra are the
known reasons."""

from __future__ import annotations

import tempfile
import unittest
from pathlib import Path

from tests.support import requires_torch_runner, run_on_torch

REPO = Path(__file__).resolve().parents[2]


@requires_torch_runner
class TorchLayoutAndMesh(unittest.TestCase):
    rows: dict[str, dict[str, dict]] = {}

    @classmethod
    def setUpClass(cls) -> None:
        cls.tmp = tempfile.TemporaryDirectory()
        cls.rows = {}
        for suite in ("layout", "mesh", "mesh-compat"):
            document = run_on_torch([REPO / "cases" / suite], Path(cls.tmp.name) / suite,
                                    timeout=600)
            cls.rows[suite] = {row["id"]: row for row in document["cases"]}

    @classmethod
    def tearDownClass(cls) -> None:
        cls.tmp.cleanup()

    def test_no_row_is_an_error(self) -> None:
        for suite, rows in self.rows.items():
            errors = {i: r["message"] for i, r in rows.items() if r["status"] == "error"}
            self.assertEqual(errors, {}, suite)

    def test_every_row_names_torch(self) -> None:
        for rows in self.rows.values():
            for row in rows.values():
                self.assertEqual(row["impl"], "torch", row["id"])

    def test_known_cases_pass(self) -> None:
        layout, mesh = self.rows["layout"], self.rows["mesh"]
        for case in ("layout-coalesce/coalesce-drops-unit-modes",
                     "layout-coalesce/coalesce-row-major-becomes-int-layout",
                     "layout-mesh-layout/global-ranks-non-contiguous-flatten",
                     "layout-mesh-layout/remap-docstring-case-2-non-consecutive",
                     "layout-two-level/flat-canonical-row-major-is-one-tuple",
                     "layout-two-level/orthogonal-rejects-non-orthogonal"):
            self.assertEqual(layout[case]["status"], "pass", (case, layout[case]["message"]))
        for case in ("mesh-two-level/flatten-contiguous-is-one-axis",
                     "mesh-two-level/flatten-non-contiguous-is-one-axis",
                     "mesh-two-level/unflatten-world-into-3d",
                     "mesh-two-level/slice-transposed-still-rejected"):
            self.assertEqual(mesh[case]["status"], "pass", (case, mesh[case]["message"]))

    def test_every_skip_is_explained(self) -> None:
        known = ("layout model", "compare_models", "expect.warnings",
                 "before any implementation runs", "is not in this torch")
        for suite, rows in self.rows.items():
            for case, row in rows.items():
                if row["status"] != "skip":
                    continue
                self.assertTrue(row["message"].startswith("torch: "), (case, row["message"]))
                self.assertTrue(any(k in row["message"] for k in known), (case, row["message"]))

    def test_every_fail_is_explained(self) -> None:
        # Python's ints do not overflow: the int64 guards of meshgate's algebra have nothing to
        # catch in PyTorch's pycute.
        explained = {
            "layout-coordinates/crd2idx-int64-min-over-size-minus-one": "integer overflow",
            "layout-coordinates/idx2crd-int64-min-over-stride-minus-one": "integer overflow",
        }
        for suite, rows in self.rows.items():
            for case, row in rows.items():
                if row["status"] != "fail":
                    continue
                self.assertIn(case, explained, (case, row["message"]))
                self.assertIn(explained[case], row["message"], case)

    def test_the_model_torch_lacks_is_a_skip_naming_the_one_it_has(self) -> None:
        rows = [r for r in self.rows["mesh"].values()
                if r["status"] == "skip" and "layout model" in r["message"]]
        self.assertTrue(rows)
        for r in rows:
            self.assertRegex(r["message"], r"has the (2-level|1-level)")

if __name__ == "__main__":
    unittest.main()
