"""The standalone reproductions of PyTorch bugs in docs/torch-bugs/ (each uses torch alone, no
meshgate code) still show their bug on the installed, pinned torch: each exits 1. When one
exits 0, PyTorch has fixed its bug: docs/torch-bugs/README.md, the case's entry in
baselines/torch-parity.json (which meshgate parity then reports as no longer happening) and
this list need updating. Exit 2 means the script could not tell (a rank raised, or its control
redistribution was wrong too).

The redistribution scripts start a gloo world of processes (the mesh ones use PyTorch's fake
process group in one process), so these run only where the torch tests run
(MESHGATE_TORCH_TESTS=1, torch importable), as the adapter's tests do."""

from __future__ import annotations

import subprocess
import sys
import unittest
from pathlib import Path

from tests.support import torch_tests_skip_reason

BUGS = Path(__file__).resolve().parents[2] / "docs" / "torch-bugs"

# script -> the case whose disagreement it reproduces, listed in baselines/torch-parity.json
# (or, for the local world's, baselines/torch-local-parity.json)
REPROS = {
    "local_tensor_reduce_scatter_avg_dtype.py":
        "redistribute-partial-ops/int-avg-to-S(0)-internal-int64-rejected",
    "reduce_scatter_merge_after_chunk.py": "redistribute-upstream-bugs/rs-after-chunk-meshgate",
    "sum_avg_merge_size_one_avg.py": "redistribute-upstream-bugs/sum-avg-size-one-avg-meshgate",
    "integer_avg_merge.py": "redistribute-partial-ops/int-P(sum),P(avg)-merged-to-rr-internal-rejected",
    "slice_flattened_name_from_root_copy.py": "mesh-slice/slice-flattened-name-from-a-copy-of-the-root",
    "unflatten_negative_dim.py": "mesh-unflatten/unflatten-negative-dim-last-where-pytorch-splices-wrongly",
    "argmax_tie_across_shards.py": "redistribute-torch-tracker/argmax-over-every-dim-of-s1",
}


@unittest.skipIf(torch_tests_skip_reason() is not None, torch_tests_skip_reason() or "")
class TorchBugRepros(unittest.TestCase):
    def run_repro(self, script: str) -> None:
        proc = subprocess.run([sys.executable, str(BUGS / script)], cwd=BUGS,
                              capture_output=True, text=True, timeout=900)
        shown = f"{script} exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr[-3000:]}"
        if proc.returncode == 0:
            self.fail(f"{shown}\nthe installed torch no longer shows this bug: update "
                      f"docs/torch-bugs/README.md and the entry of {REPROS[script]} in "
                      f"baselines/torch-parity.json (or torch-local-parity.json)")
        self.assertEqual(proc.returncode, 1, shown)
        self.assertIn("BUG:", proc.stdout, shown)

    def test_every_script_is_listed(self):
        self.assertEqual(sorted(p.name for p in BUGS.glob("*.py")), sorted(REPROS))

    def test_reduce_scatter_merge_after_chunk(self):
        self.run_repro("reduce_scatter_merge_after_chunk.py")

    def test_sum_avg_merge_size_one_avg(self):
        self.run_repro("sum_avg_merge_size_one_avg.py")

    def test_integer_avg_merge(self):
        self.run_repro("integer_avg_merge.py")

    def test_slice_flattened_name_from_root_copy(self):
        self.run_repro("slice_flattened_name_from_root_copy.py")

    def test_local_tensor_reduce_scatter_avg_dtype(self):
        self.run_repro("local_tensor_reduce_scatter_avg_dtype.py")

    def test_unflatten_negative_dim(self):
        self.run_repro("unflatten_negative_dim.py")

    def test_argmax_tie_across_shards(self):
        self.run_repro("argmax_tie_across_shards.py")


if __name__ == "__main__":
    unittest.main()
