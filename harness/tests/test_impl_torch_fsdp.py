"""cases/fsdp/fully-shard.yaml on PyTorch (--impl torch): FSDP2 (`fully_shard`) training a small
MLP on 2 and 4 gloo ranks, judged by meshgate-runner against the same model trained in one
process, and on the collectives of each step. The expected counts are FSDP2's design (one
all_gather per unit in forward, again in backward for every unit that resharded, one
reduce_scatter per unit, one all_reduce per unit over HSDP's replicate dim); a release that
issues others, or whose parameters leave the single-process ones, fails here. meshgate's own
run, which has no FSDP, answers each case skip."""

from __future__ import annotations

import tempfile
import unittest
from pathlib import Path

from tests.support import (built_runner, requires_torch_runner, run_on_torch,
                           torch_tests_skip_reason)

CASE_FILE = Path(__file__).resolve().parents[2] / "cases" / "fsdp" / "fully-shard.yaml"
SUITE = "fsdp-fully-shard"

# What each case's every step issues on PyTorch 2.15 (rank 0), by phase: the forward, the
# backward and the optimizer step.
COUNTS = {
    "per-layer-reshard-2-ranks": ({"all_gather": 3}, {"all_gather": 3, "reduce_scatter": 3}),
    "per-layer-keep-2-ranks": ({"all_gather": 3}, {"reduce_scatter": 3}),
    "root-only-reshard-2-ranks": ({"all_gather": 1}, {"all_gather": 1, "reduce_scatter": 1}),
    "per-layer-reshard-4-ranks": ({"all_gather": 3}, {"all_gather": 3, "reduce_scatter": 3}),
    "root-only-uneven-4-ranks": ({"all_gather": 1}, {"reduce_scatter": 1}),
    "hsdp-per-layer-2x2": ({"all_gather": 3},
                           {"all_gather": 3, "reduce_scatter": 3, "all_reduce": 3}),
}


@requires_torch_runner
class FullyShardOnTorch(unittest.TestCase):
    @classmethod
    def setUpClass(cls) -> None:
        cls.tmp = tempfile.TemporaryDirectory()
        document = run_on_torch([CASE_FILE], Path(cls.tmp.name) / "out")
        cls.rows = {row["name"]: row for row in document["cases"]}

    @classmethod
    def tearDownClass(cls) -> None:
        cls.tmp.cleanup()

    def test_every_case_passes_against_the_single_process_run(self):
        self.assertEqual(set(self.rows), set(COUNTS))
        for name, row in self.rows.items():
            with self.subTest(name):
                self.assertEqual(row["status"], "pass", row.get("message"))
                self.assertEqual(row["metrics"]["wrong_elements"], 0)
                self.assertGreater(row["metrics"]["parameter_elements"], 0)

    def test_each_step_issues_what_fsdp2_issues(self):
        for name, (forward, backward) in COUNTS.items():
            row = self.rows[name]
            steps = row["params"]["steps"]
            with self.subTest(name):
                self.assertEqual(len(row["metrics"]["phases"]), steps)
                for phases in row["metrics"]["phases"]:
                    self.assertEqual(phases["forward"], forward)
                    self.assertEqual(phases["backward"], backward)
                    self.assertEqual(phases["optimizer"], {})
                total = {op: forward.get(op, 0) + backward.get(op, 0)
                         for op in set(forward) | set(backward)}
                self.assertEqual(row["metrics"]["comms_per_step"], [total] * steps)

    def test_bytes_per_step_are_the_models_parameters(self):
        # 8 -> 16 -> 16 -> 4 with biases: 484 float32 elements, 1936 bytes, each divisible by
        # 2 and 4 ranks: every all_gather and reduce_scatter of a step together move the whole
        # model once; HSDP's all_reduce moves each rank's shard (half the model on 2x2).
        model_bytes = 4 * (8 * 16 + 16 + 16 * 16 + 16 + 16 * 4 + 4)
        row = self.rows["per-layer-reshard-2-ranks"]
        self.assertEqual(row["metrics"]["bytes_per_step"][0],
                         {"all_gather": 2 * model_bytes, "reduce_scatter": model_bytes})
        row = self.rows["hsdp-per-layer-2x2"]
        self.assertEqual(row["metrics"]["bytes_per_step"][0],
                         {"all_gather": 2 * model_bytes, "reduce_scatter": model_bytes,
                          "all_reduce": model_bytes // 2})


class FullyShardOnMeshgate(unittest.TestCase):
    def test_meshgates_own_run_skips_every_case_saying_why(self):
        import json
        import subprocess

        runner = built_runner()
        if runner is None:
            self.skipTest("meshgate-runner is not built")
        with tempfile.TemporaryDirectory() as tmp:
            # The runner itself exits 0 on a run of skips (the driver's --allow-all-skipped
            # is what turns that into a failure for `meshgate run`).
            proc = subprocess.run([str(runner), "run", str(CASE_FILE), "--out", tmp],
                                  capture_output=True, text=True, timeout=120)
            self.assertEqual(proc.returncode, 0, proc.stdout + proc.stderr)
            rows = json.loads((Path(tmp) / "results.json").read_text())["cases"]
        self.assertEqual(len(rows), len(COUNTS))
        for row in rows:
            self.assertEqual(row["status"], "skip")
            self.assertIn("meshgate has no FSDP", row["message"])


@unittest.skipIf(torch_tests_skip_reason(), torch_tests_skip_reason())
class ReleasesWithoutWhatACaseUses(unittest.TestCase):
    """The adapter answers unsupported, naming what is missing, before any rank starts."""

    REQUEST = {"world": 2, "mesh": {"shape": [2], "names": ["shard"]},
               "model": {"layers": [4, 2], "bias": True, "activation": "relu"}, "seed": 0,
               "dtype": "float32", "shard": "per_layer", "reshard_after_forward": True,
               "steps": 1, "batch": 2, "lr": 0.1}

    def handle(self, modules: dict, perf=None):
        import sys
        from unittest import mock

        # Imported before the patch, so that nothing is first imported under it (patch.dict
        # drops on exit what was imported meanwhile, and torch's modules must not be imported
        # twice in one process); CommDebugMode's module imports FSDP's in turn.
        import torch.distributed.fsdp  # noqa: F401
        import torch.distributed.tensor.debug  # noqa: F401

        from meshgate.impls import protocol
        from meshgate.impls.torch import fsdp

        with mock.patch.dict(sys.modules, modules), tempfile.TemporaryDirectory() as tmp:
            with self.assertRaises(protocol.Unsupported) as raised:
                fsdp.handle(dict(self.REQUEST), perf, tmp)
        return str(raised.exception)

    def test_a_release_without_fully_shard(self):
        import types

        # A None entry in sys.modules makes the import raise ImportError, as on a release
        # that never had the module.
        reason = self.handle({"torch.distributed.fsdp": types.ModuleType("torch.distributed.fsdp"),
                              "torch.distributed._composable.fsdp": None})
        self.assertIn("no fully_shard", reason)

    def test_a_fully_shard_without_reshard_after_forward(self):
        import types

        module = types.ModuleType("torch.distributed.fsdp")
        module.fully_shard = lambda module, *, mesh=None: module
        reason = self.handle({"torch.distributed.fsdp": module})
        self.assertIn("takes no 'reshard_after_forward'", reason)

    def test_timing_is_not_offered(self):
        self.assertIn("timing", self.handle({}, perf={"warmup": 1, "iters": 1}))


if __name__ == "__main__":
    unittest.main()
