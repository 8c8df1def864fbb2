import json
import pathlib
import tempfile
import unittest

from meshgate.core import results
from meshgate.gate import store

FIXTURES = pathlib.Path(__file__).parent / "fixtures" / "gate"


class MachineClassTest(unittest.TestCase):
    def test_slug_from_cpu_cores_and_gpus(self):
        machine = {
            "host": "node-17",
            "cpu": "AMD EPYC 7763 64-Core Processor",
            "cores": 128,
            "gpus": [{"name": "NVIDIA H100 80GB HBM3"}] * 8,
            "fingerprint": "f00",
        }
        self.assertEqual(results.machine_class(machine), "amd-epyc-7763-64-core-128c-8x-nvidia-h100-80gb-hbm3")

    def test_host_and_fingerprint_do_not_matter(self):
        a = {"host": "a", "cpu": "Intel(R) Xeon(R) Platinum 8480C CPU @ 2.00GHz", "gpus": ["NVIDIA H200"], "fingerprint": "1"}
        b = dict(a, host="b", fingerprint="2")
        self.assertEqual(results.machine_class(a), results.machine_class(b))
        self.assertEqual(results.machine_class(a), "intel-xeon-platinum-8480c-1x-nvidia-h200")

    def test_unknown_machine(self):
        self.assertEqual(results.machine_class({}), "unknown")
        self.assertEqual(results.machine_class(None), "unknown")


class UpdateTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.root = pathlib.Path(self.tmp.name) / "baselines"
        self.results = json.loads((FIXTURES / "base.json").read_text())

    def tearDown(self):
        self.tmp.cleanup()

    def write_results(self, doc, name="results.json"):
        path = pathlib.Path(self.tmp.name) / name
        path.write_text(json.dumps(doc))
        return path

    def test_writes_one_file_per_suite(self):
        written = store.update_baseline(FIXTURES / "base.json", self.root)
        names = sorted(p.name for p in written)
        self.assertEqual(names, ["collectives.json", "gemm.json", "layout.json", "mesh.json", "redistribute.json"])
        self.assertEqual(written[0].parent.name, "amd-epyc-7763-64-core-16c")
        doc = json.loads((written[0].parent / "collectives.json").read_text())
        self.assertEqual(doc["schema"], "meshgate.results/1")
        self.assertEqual({c["id"] for c in doc["cases"]}, {"collectives/all-reduce-8MiB", "collectives/all-gather-sweep"})
        self.assertEqual(list(written[0].parent.glob(".*.tmp")), [])

    def test_previous_baseline_goes_to_history(self):
        first = store.update_baseline(FIXTURES / "base.json", self.root, suites=["gemm"])
        old = first[0].read_text()
        changed = dict(self.results, run=dict(self.results["run"], commit="abcdef0"))
        store.update_baseline(self.write_results(changed), self.root, suites=["gemm"])
        history = list((first[0].parent / "history").glob("gemm.*.json"))
        self.assertEqual(len(history), 1)
        self.assertEqual(history[0].read_text(), old)
        self.assertEqual(json.loads(first[0].read_text())["run"]["commit"], "abcdef0")

    def test_refuses_machine_class_mismatch_unless_forced(self):
        written = store.update_baseline(FIXTURES / "base.json", self.root, suites=["gemm"])
        before = written[0].read_text()
        other = dict(self.results, run=dict(self.results["run"], machine={"cpu": "Other CPU", "gpus": []}))
        path = self.write_results(other)
        with self.assertRaises(store.InputError) as e:
            store.update_baseline(path, self.root, machine_class_override="amd-epyc-7763-64-core-16c", suites=["gemm"])
        self.assertIn("--force", str(e.exception))
        self.assertEqual(written[0].read_text(), before)
        store.update_baseline(path, self.root, machine_class_override="amd-epyc-7763-64-core-16c", suites=["gemm"], force=True)
        self.assertEqual(json.loads(written[0].read_text())["run"]["machine"]["cpu"], "Other CPU")

    def test_refuses_schema_mismatch_unless_forced(self):
        target = self.root / "amd-epyc-7763-64-core-16c" / "gemm.json"
        target.parent.mkdir(parents=True)
        target.write_text(json.dumps({"schema": "meshgate.results/0", "run": {}, "cases": []}))
        with self.assertRaises(store.InputError) as e:
            store.update_baseline(FIXTURES / "base.json", self.root, suites=["gemm"])
        self.assertIn("meshgate.results/0", str(e.exception))
        store.update_baseline(FIXTURES / "base.json", self.root, suites=["gemm"], force=True)
        self.assertEqual(json.loads(target.read_text())["schema"], "meshgate.results/1")

    def test_rejects_results_of_another_schema(self):
        path = self.write_results({"schema": "meshgate.results/9", "run": {}, "cases": []})
        with self.assertRaises(store.InputError) as e:
            store.update_baseline(path, self.root)
        self.assertIn(str(path), str(e.exception))

    def test_unknown_suite(self):
        with self.assertRaises(store.InputError) as e:
            store.update_baseline(FIXTURES / "base.json", self.root, suites=["nope"])
        self.assertIn("nope", str(e.exception))

    def test_load_baseline_dir_merges_suites(self):
        written = store.update_baseline(FIXTURES / "base.json", self.root)
        merged, lacking = store.load_baseline_dir(written[0].parent, ["gemm", "layout", "absent"])
        self.assertEqual(lacking, ["absent"])
        self.assertEqual(
            sorted(c["id"] for c in merged["cases"]), ["gemm/bias-1024", "layout/coalesce-a", "layout/removed-case"]
        )


class SignalsRootTest(unittest.TestCase):
    def test_signals_beside_the_root_or_a_machine_class(self):
        with tempfile.TemporaryDirectory() as tmp:
            root = pathlib.Path(tmp) / "baselines"
            (root / "signals").mkdir(parents=True)
            (root / "amd-epyc-7763-64-core-16c").mkdir()
            self.assertEqual(store.signals_root_for(root), root / "signals")
            self.assertEqual(store.signals_root_for(root / "amd-epyc-7763-64-core-16c"), root / "signals")
            self.assertIsNone(store.signals_root_for(pathlib.Path(tmp) / "elsewhere" / "x"))

    def test_update_signals_refuses_failures_of_the_chosen_suites_only(self):
        with tempfile.TemporaryDirectory() as tmp:
            doc = json.loads((FIXTURES / "base.json").read_text())
            doc["cases"][0]["status"] = "fail"  # collectives/all-reduce-8MiB
            path = pathlib.Path(tmp) / "results.json"
            path.write_text(json.dumps(doc))
            with self.assertRaises(store.InputError) as e:
                store.update_signals(path, pathlib.Path(tmp) / "signals")
            self.assertIn("collectives/all-reduce-8MiB (fail)", str(e.exception))
            outcome = store.update_signals(path, pathlib.Path(tmp) / "signals", suites=["gemm"])
            self.assertEqual([p.name for p in outcome.written], ["gemm.json"])


if __name__ == "__main__":
    unittest.main()
