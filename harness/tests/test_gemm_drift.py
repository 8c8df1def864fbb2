"""PyTorch #180875 emulated on the CPU, end to end: the same GEMM case run by the real runner,
once plain and once with split-K whose partial sums are stored in bf16. Both pass the bf16
tolerance; the deterministic signals catch the drift through the output fingerprint, and only
on the same numerics environment."""

import json
import os
import pathlib
import subprocess
import tempfile
import unittest

from meshgate.gate import signal_report, signals
from tests.support import once

ROOT = pathlib.Path(__file__).resolve().parents[2]

CASE = """suite: drift
cases:
  - name: bf16-deep-k
    kind: gemm
    m: 32
    n: 64
    k: 2048
    dtype: bfloat16
    epilogue: bias
    impls: [cpu_epilogue, cpu_beta_bias]
{extra}"""


def runner() -> pathlib.Path:
    given = os.environ.get("MESHGATE_RUNNER")
    path = pathlib.Path(given) if given else ROOT / "build" / "cpu" / "harness" / "runner" / "meshgate-runner"
    return path


@unittest.skipUnless(runner().exists(), "meshgate-runner is not built (set MESHGATE_RUNNER)")
@once("simulated split-K sums")
class SplitKDriftTest(unittest.TestCase):
    def run_case(self, folder: pathlib.Path, extra: str) -> dict:
        case = folder / "drift.yaml"
        case.write_text(CASE.format(extra=extra))
        out = folder / "out"
        proc = subprocess.run([str(runner()), "run", str(case), "--out", str(out)],
                              capture_output=True, text=True, timeout=120)
        self.assertEqual(proc.returncode, 0, proc.stdout + proc.stderr)
        return json.loads((out / "results.json").read_text())

    def test_bf16_partial_sums_pass_the_tolerance_but_change_the_fingerprint(self):
        with tempfile.TemporaryDirectory() as tmp:
            tmp = pathlib.Path(tmp)
            (tmp / "a").mkdir()
            (tmp / "b").mkdir()
            base = self.run_case(tmp / "a", "")
            drifted = self.run_case(tmp / "b", "    split_k: 8\n    split_k_partials: bfloat16\n")
        self.assertEqual(base["cases"][0]["status"], "pass")
        self.assertEqual(drifted["cases"][0]["status"], "pass")
        baseline = signals.extract_all(base)
        check = signals.check(drifted, baseline)
        self.assertEqual(check.exit_code(), 1, signal_report.text(check))
        changed = {c.signal for c in check.cases[0].changes}
        self.assertIn("fingerprints.cpu_epilogue", changed)
        self.assertIn("fingerprints.cpu_beta_bias", changed)
        # The same run checked against itself is clean: the fingerprint is deterministic.
        self.assertEqual(signals.check(base, baseline).exit_code(), 0)

    def test_fingerprints_are_not_compared_across_numerics_environments(self):
        sig = {"status": "pass", "fingerprints": {"cpu_epilogue": "00ff"}, "numerics_env": "cpu: A"}
        other = {"status": "pass", "fingerprints": {"cpu_epilogue": "11ee"}, "numerics_env": "cpu: B"}
        changes, _, notes = signals.diff(sig, other)
        self.assertEqual(changes, [])
        self.assertIn("fingerprints not compared", notes[0])
        changes, _, _ = signals.diff(sig, dict(other, numerics_env="cpu: A"))
        self.assertEqual([c.signal for c in changes], ["fingerprints.cpu_epilogue"])


if __name__ == "__main__":
    unittest.main()
