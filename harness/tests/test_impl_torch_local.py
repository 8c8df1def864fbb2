"""The torch adapter's local world (--impl torch-local: every rank of a case in one process under
LocalTensorMode) against its gloo world (a worker process per rank): the same cases give the
same statuses and the same collectives on both, except where baselines/torch-local-parity.json
says why the local world answers otherwise; and a case of more ranks than the gloo world starts
runs in the local one."""

from __future__ import annotations

import json
import tempfile
import unittest
from pathlib import Path

from tests.support import requires_torch_runner, run_on_torch

ROOT = Path(__file__).resolve().parents[2]
CASES = [ROOT / "cases" / "redistribute" / name
         for name in ("uneven-merges.yaml", "size-one-dims.yaml")]
LOCAL_LIST = ROOT / "baselines" / "torch-local-parity.json"
# 32 ranks: more than the gloo world's MESHGATE_TORCH_MAX_RANKS (16).
BIG = "redistribute-large/mesh-8x2x2-s0pp-to-s0rr-flat-bc"


def _observed(row: dict) -> tuple:
    metrics = row.get("metrics", {})
    return (row["status"], metrics.get("plan") or row.get("plan"), metrics.get("warnings"),
            metrics.get("wrong_elements"))


@requires_torch_runner
class LocalWorldAgreesWithGloo(unittest.TestCase):
    @classmethod
    def setUpClass(cls) -> None:
        cls.tmp = tempfile.TemporaryDirectory()
        out = Path(cls.tmp.name)
        cls.gloo = {r["id"]: r for r in run_on_torch(CASES, out / "gloo")["cases"]}
        cls.local = {r["id"]: r for r in run_on_torch(CASES, out / "local",
                                                       world="local")["cases"]}
        cls.listed = {e["case"]: e for e in
                      json.loads(LOCAL_LIST.read_text())["disagreements"]}

    @classmethod
    def tearDownClass(cls) -> None:
        cls.tmp.cleanup()

    def test_both_worlds_ran_every_case(self):
        self.assertEqual(sorted(self.gloo), sorted(self.local))
        self.assertGreater(len(self.gloo), 40)
        self.assertEqual({r["impl"] for r in self.local.values()}, {"torch-local"})

    def test_same_status_and_collectives_unless_listed(self):
        for case, gloo in self.gloo.items():
            local = self.local[case]
            with self.subTest(case):
                if case in self.listed:
                    # Listed: the local world fails it for the reason the list gives.
                    self.assertEqual(local["status"], "fail", local.get("message"))
                    continue
                self.assertEqual(_observed(local), _observed(gloo),
                                 f"local: {local.get('message')}\ngloo: {gloo.get('message')}")
                self.assertEqual(local.get("plan"), gloo.get("plan"))

    def test_the_listed_divergence_is_the_local_worlds_own(self):
        case = "redistribute-uneven/ag-2-rows-on-2x2x2-empty-shards"
        self.assertIn("AssertionError", self.local[case]["message"])
        self.assertIn("LocalIntNode", self.local[case]["message"])
        self.assertNotIn("AssertionError", self.gloo[case]["message"])


@requires_torch_runner
class LocalWorldRunsBigMeshes(unittest.TestCase):
    def test_thirty_two_ranks_run_in_one_process(self):
        with tempfile.TemporaryDirectory() as tmp:
            document = run_on_torch([ROOT / "cases" / "redistribute" / "large-meshes.yaml",
                                     "--case", BIG], Path(tmp) / "out", world="local")
        [row] = document["cases"]
        self.assertEqual(row["status"], "pass", row.get("message"))
        self.assertEqual(row["params"]["mesh"]["shape"], [8, 2, 2])
        self.assertGreater(row["metrics"]["collectives"], 0)

    def test_collective_cases_are_left_to_gloo(self):
        with tempfile.TemporaryDirectory() as tmp:
            document = run_on_torch([ROOT / "cases" / "collectives" / "smoke.yaml"],
                                    Path(tmp) / "out", world="local")
        self.assertTrue(document["cases"])
        for row in document["cases"]:
            self.assertEqual(row["status"], "skip")
            self.assertIn("does not implement the collective kind", row["message"])


if __name__ == "__main__":
    unittest.main()
