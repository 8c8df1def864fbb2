"""The CPU gemm suite with PyTorch as the implementation under test (--impl torch): the real
runner (MESHGATE_RUNNER, else a runner built under build/) hands every case to the torch adapter
and judges torch_addmm and torch_unfused with meshgate's own checks (fp64 reference, per-dtype
tolerance, row cosine, each other). No row may be an error; the cases PyTorch cannot express
are skips that say why."""

from __future__ import annotations

import tempfile
import unittest
from pathlib import Path

from tests.support import requires_torch_runner, run_on_torch

REPO = Path(__file__).resolve().parents[2]


@requires_torch_runner
class TorchGemmCpu(unittest.TestCase):
    rows: dict[str, dict] = {}

    @classmethod
    def setUpClass(cls) -> None:
        cls.tmp = tempfile.TemporaryDirectory()
        document = run_on_torch([REPO / "cases" / "gemm", "--suite", "gemm-cpu"],
                                Path(cls.tmp.name) / "gemm", timeout=600)
        cls.header = document["run"]
        cls.rows = {row["id"]: row for row in document["cases"]}

    @classmethod
    def tearDownClass(cls) -> None:
        cls.tmp.cleanup()

    def row(self, case_id: str) -> dict:
        self.assertIn(case_id, self.rows)
        return self.rows[case_id]

    def test_no_row_is_an_error(self):
        errors = {i: r.get("message") for i, r in self.rows.items() if r["status"] == "error"}
        self.assertEqual(errors, {})

    def test_every_row_names_torch(self):
        self.assertIn("torch", self.header["impls"])
        for case_id, row in self.rows.items():
            self.assertEqual(row.get("impl"), "torch", case_id)

    def test_every_epilogue_dtype_and_layout_passes_for_both_paths(self):
        for dtype in ("float32", "float16", "bfloat16"):
            for epilogue in ("none", "bias", "relu_bias", "gelu_bias"):
                for layout in ("nt", "nn", "tn", "tt"):
                    row = self.row(f"gemm-cpu/{dtype}-{epilogue}-{layout}")
                    self.assertEqual(row["status"], "pass", row.get("message"))
                    impls = row["metrics"]["impls"]
                    self.assertEqual(set(impls), {"torch_addmm", "torch_unfused"})
                    for entry in impls.values():
                        self.assertTrue(entry["ok"], entry)
                        self.assertEqual(len(entry["fingerprint"]), 16)
                    self.assertFalse(impls["torch_unfused"]["fused"])
                    self.assertIn("torch_addmm/torch_unfused", row["metrics"]["pairs"])

    def test_the_fused_paths_are_torchs_own(self):
        bias = self.row("gemm-cpu/float32-bias-nt")["metrics"]["impls"]["torch_addmm"]
        self.assertTrue(bias["fused"])
        self.assertTrue(bias["executed"].startswith("torch.addmm"), bias["executed"])
        relu = self.row("gemm-cpu/bfloat16-relu_bias-nt")["metrics"]["impls"]["torch_addmm"]
        self.assertIn("torch._addmm_activation(use_gelu=False)", relu["executed"])
        # The erf GELU of torch._addmm_activation on the CPU is not the case's tanh GELU.
        gelu = self.row("gemm-cpu/float32-gelu_bias-nt")["metrics"]["impls"]["torch_addmm"]
        self.assertIn("gelu(approximate='tanh')", gelu["executed"])
        self.assertFalse(gelu["fused"])

    def test_pathological_shapes_pass(self):
        for case_id in ("m1-padded-bias-shape-float32", "m1-padded-bias-shape-bfloat16",
                        "m1-decode-gelu", "odd-n", "k-not-multiple-of-8", "odd-k-nt", "odd-k-tn",
                        "misaligned-bias-offset-1", "misaligned-bias-offset-2",
                        "alpha-half-bias-not-scaled-float32", "alpha-negative-relu", "tiny",
                        "tall-skinny", "empty-m", "empty-n", "empty-k-is-bias-broadcast-bias",
                        "empty-k-is-bias-broadcast-gelu_bias", "deep-k-float32", "deep-k-float16",
                        "deep-k-bfloat16", "padded-offsets-batched-nt", "padded-offsets-batched-tt",
                        "tf32-true"):
            row = self.row(f"gemm-cpu/{case_id}")
            self.assertEqual(row["status"], "pass", f"{case_id}: {row.get('message')}")

    def test_perf_cases_answer_timed_samples_of_the_fused_path(self):
        row = self.row("gemm-cpu/perf-float32-bias-256")
        self.assertEqual(row["status"], "pass", row.get("message"))
        samples = row["samples"]["time_s"][0]
        self.assertEqual(len(samples), 5)
        self.assertTrue(all(s > 0 for s in samples))

    def test_cases_torch_cannot_express_are_skips_that_say_why(self):
        row = self.row("gemm-cpu/split-k-drift-bf16-partials")
        self.assertEqual(row["status"], "skip")
        self.assertIn("configurations of workspace and split_k", row["message"])


if __name__ == "__main__":
    unittest.main()
