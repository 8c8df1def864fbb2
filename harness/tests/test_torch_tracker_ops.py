"""The redistribute kind's ops on a DTensor beyond reductions (`reduce: {op: t | mm |
full_tensor}`) and the strided shard SS(d,k), on the real runner (a built meshgate-runner):
meshgate's own run skips them saying why, another implementation (here a fake one,
fixtures/impl/strided_impl.py) is sent the placements as written and the global tensor as every
rank's input and is judged against its single-process reference, and misuses of the new keys
are input errors naming the key."""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path

from tests.support import built_runner, run_cases_on_runner

HERE = Path(__file__).resolve().parent
FAKE = HERE / "fixtures" / "impl" / "strided_impl.py"
PACKAGE_PARENT = HERE.parent

CASES = """
suite: t
cases:
  - name: t-strided
    kind: redistribute
    mesh: {shape: [2, 2], names: [A, B]}
    tensor: {shape: [8, 4], dtype: float32}
    from: ["SS(0,2)", S(0)]
    reduce: {op: t}
    expect: {local_shape: [4, 8]}
  - name: mm
    kind: redistribute
    mesh: {shape: [2, 2], names: [A, B]}
    tensor: {shape: [4, 4], dtype: float32}
    from: "S(1),S(1)"
    reduce: {op: mm, other: ["SS(0,2)", S(0)]}
    expect: {local_shape: [4, 4]}
  - name: round-trip
    kind: redistribute
    mesh: {shape: [2], names: [A]}
    tensor: {shape: [5], dtype: float32}
    from: ["SS(0,2)"]
    reduce: {op: full_tensor}
    expect: {local_shape: [5]}
"""


@unittest.skipIf(built_runner() is None, "no meshgate-runner binary (MESHGATE_RUNNER or build/)")
class TorchTrackerOps(unittest.TestCase):
    def run_runner(self, text: str, *extra: str, env: dict | None = None):
        return run_cases_on_runner(text, *extra, env=env)

    def test_meshgate_skips_them_saying_why(self):
        code, rows, output = self.run_runner(CASES)
        self.assertEqual(code, 0, output)
        for name in ("t-strided", "round-trip"):
            self.assertEqual(rows[name]["status"], "skip")
            self.assertIn("meshgate has no strided shard (PyTorch's _StridedShard",
                          rows[name]["message"])
        self.assertIn("does not model torch.mm on DTensors", rows["mm"]["message"])
        self.assertEqual(rows["t-strided"]["params"]["from"], "SS(0,2),S(0)")
        self.assertEqual(rows["mm"]["params"]["reduce"],
                         {"op": "mm", "dim": None, "other": ["SS(0,2)", "S(0)"]})

    def run_fake(self, mode: str) -> tuple[dict, dict]:
        tmp = Path(tempfile.mkdtemp(prefix="meshgate-tracker-request-"))
        self.addCleanup(subprocess.run, ["rm", "-rf", str(tmp)])
        saved = tmp / "request.json"
        _, rows, output = self.run_runner(
            CASES, "--case", "t/t-strided", "--impl", "fake", "--impl-command",
            json.dumps([sys.executable, str(FAKE), mode]),
            env={"TOY_IMPL_PACKAGE_PARENT": str(PACKAGE_PARENT),
                 "STRIDED_IMPL_REQUEST": str(saved)})
        self.assertIn("t-strided", rows, output)
        return rows["t-strided"], json.loads(saved.read_text())

    def test_the_implementation_gets_the_placements_as_written_and_the_global_tensor(self):
        row, request = self.run_fake("right")
        self.assertEqual(row["status"], "pass", row.get("message"))
        self.assertEqual(request["from"], ["SS(0,2)", "S(0)"])
        self.assertEqual(request["reduce"]["op"], "t")
        self.assertEqual(sorted(request["inputs"]), ["0", "1", "2", "3"])
        for descriptor in request["inputs"].values():
            self.assertEqual(descriptor, request["global"])
        self.assertEqual(row["metrics"]["result_placements"], ["SS(0,2)", "S(0)"])

    def test_a_wrong_transpose_fails(self):
        row, _ = self.run_fake("untransposed")
        self.assertEqual(row["status"], "fail")
        self.assertIn("wrong element(s) against the single-process torch reference",
                      row["message"])

    def test_mistakes_are_input_errors_naming_the_key(self):
        base = ("suite: t\ncases:\n  - name: x\n    kind: redistribute\n"
                "    mesh: {shape: [2, 2], names: [A, B]}\n"
                "    tensor: {shape: %s, dtype: float32}\n"
                "    from: %s\n%s")
        mistakes = {
            "a shard order beside strided shards": (
                "[8, 4]", '["SS(0,2)", S(0)]',
                "    to: [R, R]\n    shard_order: [{dim: 0, mesh_dims: [B, A]}]\n",
                "key 'shard_order'", "is given by the strided shards of `from` already"),
            "strided shard as a target": (
                "[8, 4]", "[R, R]", '    to: ["SS(0,2)", R]\n',
                "key 'to'", "meshgate has no strided shard"),
            "malformed strided shard": (
                "[8, 4]", '["SS(0)", R]', "    reduce: {op: t}\n",
                "key 'from'", "written SS(dim, split_factor)"),
            "split factor below 1": (
                "[8, 4]", '["SS(0,0)", R]', "    reduce: {op: t}\n",
                "key 'from'", "split factor must be >= 1"),
            "strided shard with a Partial": (
                "[8, 4]", '["SS(0,2)", P(sum)]', "    reduce: {op: t}\n",
                "key 'from'", "takes no Partial"),
            "dim with t": ("[8, 4]", "[S(0), R]", "    reduce: {op: t, dim: 0}\n",
                           "key 'reduce.dim'", "applies to a reduction"),
            "mm without other": ("[4, 4]", "[S(0), R]", "    reduce: {op: mm}\n",
                                 "key 'reduce.op'", "mm needs `other`"),
            "other without mm": ("[8, 4]", "[S(0), R]", "    reduce: {op: t, other: [R, R]}\n",
                                 "key 'reduce.other'", "is the second operand of mm"),
            "other of another length": ("[4, 4]", "[S(0), R]",
                                        "    reduce: {op: mm, other: [R]}\n",
                                        "key 'reduce.other'", "1 placement(s) for a 2-D mesh"),
            "t of a 3-D tensor": ("[2, 2, 2]", "[S(0), R]", "    reduce: {op: t}\n",
                                  "key 'reduce.op'", "t takes a 2-D tensor"),
            "max_indices without dim": ("[8, 4]", "[S(1), R]",
                                        "    reduce: {op: max_indices}\n",
                                        "key 'reduce.op'", "max_indices needs `dim`"),
            "add without scalar": ("[8, 4]", "[P(sum), R]", "    reduce: {op: add}\n",
                                   "key 'reduce.op'", "add needs `scalar`"),
            "scalar with another op": ("[8, 4]", "[S(0), R]",
                                       "    reduce: {op: argmax, scalar: 2}\n",
                                       "key 'reduce.scalar'", "is what add adds"),
            "dim with add": ("[8, 4]", "[P(sum), R]", "    reduce: {op: add, scalar: 1, dim: 0}\n",
                             "key 'reduce.dim'", "applies to a reduction"),
            "local_shape that is not argmax's": (
                "[8, 4]", "[S(1), R]", "    reduce: {op: argmax, dim: 1}\n"
                "    expect: {local_shape: [4]}\n",
                "key 'expect.local_shape'", "is not the shape of argmax over dim 1 of [8, 4], [8]"),
            "local_shape that is not the transpose's": (
                "[8, 4]", "[S(0), R]", "    reduce: {op: t}\n    expect: {local_shape: [8, 4]}\n",
                "key 'expect.local_shape'", "is not the shape of DTensor.t() of [8, 4], [4, 8]"),
        }
        for what, (shape, source, rest, key, words) in mistakes.items():
            with self.subTest(what):
                code, _, output = self.run_runner(base % (shape, source, rest))
                self.assertEqual(code, 2, output)
                self.assertIn(words, output)
                self.assertIn(key, output)
                self.assertIn("case 't/x'", output)
                self.assertIn("c.yaml:", output)


if __name__ == "__main__":
    unittest.main()
