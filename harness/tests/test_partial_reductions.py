"""The redistribute kind's Partial additions on the real runner (a built meshgate-runner):
`api: full_tensor`, `reduce:` cases (skipped by meshgate's own run, judged on another
implementation against its single-process reference: here a fake implementation,
fixtures/impl/reduce_impl.py, that answers right or in one way wrong), and integer averages,
which a case may expect to be refused and then runs so that other implementations are asked."""

from __future__ import annotations

import json
import sys
import unittest
from pathlib import Path

from tests.support import built_runner, run_cases_on_runner

HERE = Path(__file__).resolve().parent
FAKE = HERE / "fixtures" / "impl" / "reduce_impl.py"
LOCAL_INDICES = HERE / "fixtures" / "impl" / "local_indices_impl.py"
PACKAGE_PARENT = HERE.parent

REDUCE_CASE = """
suite: t
cases:
  - name: sum
    kind: redistribute
    mesh: {shape: [4], names: [A]}
    tensor: {shape: [4, 3], dtype: float32}
    from: [P(max)]
    reduce: {op: sum}
    expect: {placements: [P(sum)], comms: [], local_shape: []}
"""

MAX_INDICES_CASE = """
suite: t
cases:
  - name: max-indices-of-pmax
    kind: redistribute
    mesh: {shape: [4], names: [A]}
    tensor: {shape: [4, 8], dtype: float32}
    from: [P(max)]
    reduce: {op: max_indices, dim: 1}
    expect: {local_shape: [4]}
"""

CASES = """
suite: t
cases:
  - name: full-tensor-${op}
    kind: redistribute
    matrix: {op: [sum, avg, max, min]}
    mesh: {shape: [2, 2], names: [A, B]}
    flatten: [[A, B]]
    tensor: {shape: [6, 3], dtype: float32}
    api: full_tensor
    from: ["P(${op})", "P(${op})"]
    to: [R, R]
  - name: int-avg-refused
    kind: redistribute
    mesh: {shape: [4], names: [A]}
    tensor: {shape: [4, 3], dtype: int64}
    from: [P(avg)]
    to: [R]
    expect_error: "RuntimeError"
  - name: mixed-ops-refused
    kind: redistribute
    mesh: {shape: [2, 2], names: [A, B]}
    tensor: {shape: [4, 3], dtype: float32}
    from: [P(sum), P(max)]
    to: [R, R]
    expect_error: "ValueError"
  - name: reduce-skipped
    kind: redistribute
    mesh: {shape: [4], names: [A]}
    tensor: {shape: [4, 3], dtype: float32}
    from: [P(sum)]
    reduce: {op: amax, dim: 1}
    expect: {local_shape: [4]}
"""


@unittest.skipIf(built_runner() is None, "no meshgate-runner binary (MESHGATE_RUNNER or build/)")
class PartialReductions(unittest.TestCase):
    def run_runner(self, text: str, *extra: str, env: dict | None = None):
        return run_cases_on_runner(text, *extra, env=env)

    def run_fake(self, mode: str) -> dict:
        _, rows, output = self.run_runner(
            REDUCE_CASE, "--impl", "fake", "--impl-command",
            json.dumps([sys.executable, str(FAKE), mode]),
            env={"TOY_IMPL_PACKAGE_PARENT": str(PACKAGE_PARENT)})
        self.assertIn("sum", rows, output)
        return rows["sum"]

    def test_meshgate_runs_full_tensor_skips_reduce_and_raises_integer_avg(self):
        code, rows, output = self.run_runner(CASES)
        self.assertEqual(code, 0, output)
        for op in ("sum", "avg", "max", "min"):
            row = rows[f"full-tensor-{op}"]
            self.assertEqual(row["status"], "pass", row.get("message"))
            self.assertEqual(row["params"]["api"], "full_tensor")
            self.assertEqual(row["plan"], [f"all_reduce(A+B, {'sum' if op == 'avg' else op})"])
        self.assertEqual(rows["int-avg-refused"]["status"], "pass")
        self.assertIn("RuntimeError", rows["int-avg-refused"]["metrics"]["rejected"])
        self.assertNotEqual(rows["int-avg-refused"]["params"].get("rejected_at"), "validation")
        mixed = rows["mixed-ops-refused"]
        self.assertEqual(mixed["status"], "pass")
        self.assertIn("ValueError: Partial placements of different reduce ops",
                      mixed["metrics"]["rejected"])
        self.assertNotEqual(mixed["params"].get("rejected_at"), "validation")
        skipped = rows["reduce-skipped"]
        self.assertEqual(skipped["status"], "skip")
        self.assertIn("does not model torch.amax", skipped["message"])
        self.assertEqual(skipped["params"]["reduce"], {"op": "amax", "dim": 1})

    def test_a_right_answer_passes(self):
        row = self.run_fake("right")
        self.assertEqual(row["status"], "pass", row.get("message"))
        self.assertEqual(row["metrics"]["result_placements"], ["P(sum)"])

    def test_wrong_answers_fail_naming_what_is_wrong(self):
        for mode, words in {"wrong-values": "1 wrong element(s) against the single-process",
                            "wrong-reference": "4 wrong element(s)",
                            "wrong-placements": "expect.placements [P(sum)] but rank 0",
                            "replicas-differ": "differs bitwise from the lowest rank's",
                            "wrong-dtype": "rank 0 holds float64"}.items():
            with self.subTest(mode):
                row = self.run_fake(mode)
                self.assertEqual(row["status"], "fail")
                self.assertIn(words, row["message"])

    def test_indices_read_from_each_ranks_contribution_are_caught(self):
        # The runner's Partial(max) contributions put each rank's row maxima elsewhere than the
        # global ones, so indices taken per rank and combined by max (pytorch/pytorch#175776)
        # are wrong; while every rank's local maxima were the global ones, they passed.
        rows = {}
        for mode in ("global", "local"):
            _, answered, output = self.run_runner(
                MAX_INDICES_CASE, "--impl", "fake", "--impl-command",
                json.dumps([sys.executable, str(LOCAL_INDICES), mode]),
                env={"TOY_IMPL_PACKAGE_PARENT": str(PACKAGE_PARENT)})
            self.assertIn("max-indices-of-pmax", answered, output)
            rows[mode] = answered["max-indices-of-pmax"]
        self.assertEqual(rows["global"]["status"], "pass", rows["global"].get("message"))
        self.assertEqual(rows["local"]["status"], "fail")
        self.assertIn("wrong element(s) against the single-process", rows["local"]["message"])

    def test_mistakes_are_input_errors_naming_the_key(self):
        base = ("suite: t\ncases:\n  - name: x\n    kind: redistribute\n"
                "    mesh: {shape: [4], names: [A]}\n    tensor: {shape: [4, 3], dtype: %s}\n"
                "    from: [%s]\n%s")
        mistakes = {
            "api full_tensor with a Partial target": (
                "float32", "P(sum)", "    api: full_tensor\n    to: [P(sum)]\n",
                "api full_tensor gathers to Replicate on every mesh dim"),
            "to with reduce": ("float32", "P(sum)", "    to: [R]\n    reduce: {op: sum}\n",
                               "does not apply to a `reduce` case"),
            "unknown reduction": ("float32", "P(sum)", "    reduce: {op: median}\n",
                                  "unknown reduction 'median'"),
            "dim outside the tensor": ("float32", "P(sum)", "    reduce: {op: sum, dim: 2}\n",
                                       "dim 2 is outside the tensor's 2 dims"),
            "placements without reduce": (
                "float32", "P(sum)", "    to: [R]\n    expect: {placements: [R]}\n",
                "describes the result of `reduce`"),
            "local_shape that is not the reduced shape": (
                "float32", "P(sum)", "    reduce: {op: sum, dim: 0}\n"
                "    expect: {local_shape: [4]}\n", "is not the shape of sum over dim 0"),
            "integer avg without expect_error": ("int64", "P(avg)", "    to: [R]\n",
                                                 "avg reduction of int64"),
            "mixed reduce ops without expect_error": (
                "float32", "P(max)", "    to: [R]\n",
                "key 'from': ValueError: Partial placements of different reduce ops"),
        }
        for what, (dtype, source, rest, words) in mistakes.items():
            with self.subTest(what):
                text = base % (dtype, source, rest)
                if what.startswith("mixed"):
                    text = text.replace("shape: [4], names: [A]", "shape: [2, 2], names: [A, B]")
                    text = text.replace("from: [P(max)]", "from: [P(sum), P(max)]")
                    text = text.replace("to: [R]", "to: [R, R]")
                code, _, output = self.run_runner(text)
                self.assertEqual(code, 2, output)
                self.assertIn(words, output)


if __name__ == "__main__":
    unittest.main()
