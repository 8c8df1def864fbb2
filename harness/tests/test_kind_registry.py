"""The driver's tables of case kinds agree with the runner's registry, which describes every kind
(`meshgate-runner list --kinds --json`):

- the `kind` enum of cases-1.schema.json is the built-in kinds, and each kind's keys there are
  the runner's common keys and the kind's own (its registry keys, to the first dot);
- the kinds of impl-1.schema.json's hello are the built-in kinds that speak the implementation
  protocol, and the torch adapter's kind table (KIND_MODULES) names only such kinds;
- the gate's signal table (gate/signals.py) covers exactly the kinds with signals of their own,
  with the registry's names;
- a run's results record the kinds the runner registered (`run.kinds`), and the results schema
  takes rows of any kind so named, a project's own included, and no other.

A new built-in kind fails here until every table names it as the registry describes it.
"""

from __future__ import annotations

import ast
import copy
import json
import subprocess
import tempfile
import unittest
from pathlib import Path

from meshgate.core import schema
from meshgate.gate import signals
from tests.support import built_runner

REPO = Path(__file__).resolve().parents[2]
TORCH_ADAPTER = REPO / "harness" / "meshgate" / "impls" / "torch" / "__main__.py"
LAYOUT_CASE = """suite: kinds
cases:
  - {name: size, kind: layout, op: size, args: ['(2,3):(3,1)'], expect: 6}
"""


def registry() -> dict:
    runner = built_runner()
    if runner is None:
        raise unittest.SkipTest("no built meshgate-runner (build/cuda or build/cpu)")
    proc = subprocess.run([str(runner), "list", "--kinds", "--json"], capture_output=True,
                          text=True, timeout=60)
    if proc.returncode != 0:
        raise AssertionError(f"list --kinds --json exited {proc.returncode}: {proc.stderr}")
    return json.loads(proc.stdout)


def torch_adapter_kinds() -> set[str]:
    """The keys of KIND_MODULES, read from the adapter's source: importing it needs torch."""
    tree = ast.parse(TORCH_ADAPTER.read_text(encoding="utf-8"))
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "KIND_MODULES"
                                                for t in node.targets):
            return set(ast.literal_eval(node.value))
    raise AssertionError(f"{TORCH_ADAPTER} has no KIND_MODULES")


class RegistryTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.described = registry()
        cls.kinds = {k["name"]: k for k in cls.described["kinds"]}
        cls.built_in = [k["name"] for k in cls.described["kinds"] if k["built_in"]]

    def test_every_kind_is_described(self):
        self.assertIn("layout", self.built_in)
        for kind in self.described["kinds"]:
            self.assertEqual(set(kind), {"name", "built_in", "impl_protocol", "signals", "keys"})
            self.assertTrue(kind["keys"], kind["name"])

    def test_the_case_file_schema_names_the_built_in_kinds(self):
        case = schema.load("cases-1")["$defs"]["case"]
        self.assertEqual(sorted(case["properties"]["kind"]["enum"]), sorted(self.built_in))

    def test_the_case_file_schema_gives_each_kind_its_keys(self):
        common = set(self.described["common_keys"])
        by_kind = {block["if"]["properties"]["kind"]["const"]: set(block["then"]["propertyNames"]["enum"])
                   for block in schema.load("cases-1")["$defs"]["case"]["allOf"]}
        self.assertEqual(sorted(by_kind), sorted(self.built_in))
        for name, allowed in by_kind.items():
            with self.subTest(kind=name):
                own = {key.split(".")[0] for key in self.kinds[name]["keys"]}
                self.assertEqual(allowed - common, own)
                self.assertLessEqual(allowed, common | own)

    def test_the_protocol_schema_names_the_kinds_that_speak_it(self):
        hello = schema.load("impl-1")["$defs"]["hello_answer"]
        speaking = {k for k in self.built_in if self.kinds[k]["impl_protocol"]}
        self.assertEqual(set(hello["properties"]["kinds"]["items"]["enum"]), speaking)
        self.assertIn("layout", speaking)
        self.assertNotIn("command", speaking)

    def test_the_torch_adapter_implements_only_kinds_that_speak_the_protocol(self):
        adapter = torch_adapter_kinds()
        self.assertTrue(adapter)
        speaking = {k for k, d in self.kinds.items() if d["impl_protocol"]}
        self.assertLessEqual(adapter, speaking)

    def test_the_gate_reads_the_signals_each_kind_emits(self):
        with_signals = {k for k in self.built_in if self.kinds[k]["signals"]}
        self.assertEqual(set(signals.KIND_METRICS) | set(signals.KIND_STRUCTURED), with_signals)
        for name in self.built_in:
            with self.subTest(kind=name):
                self.assertEqual(list(signals.kind_signals(name)), self.kinds[name]["signals"])


class RecordedKindsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.names = [k["name"] for k in registry()["kinds"]]
        with tempfile.TemporaryDirectory() as tmp:
            (Path(tmp) / "c.yaml").write_text(LAYOUT_CASE)
            proc = subprocess.run([str(built_runner()), "run", str(Path(tmp) / "c.yaml"),
                                   "--out", str(Path(tmp) / "out")],
                                  capture_output=True, text=True, timeout=120)
            if proc.returncode != 0:
                raise AssertionError(proc.stdout + proc.stderr)
            cls.document = json.loads((Path(tmp) / "out" / "results.json").read_text())

    def doc(self) -> dict:
        return copy.deepcopy(self.document)

    def test_a_run_records_the_kinds_its_runner_registered(self):
        self.assertEqual(self.document["run"]["kinds"], self.names)
        schema.check(self.document, "results-1")

    def test_a_row_of_a_kind_the_runner_did_not_register_is_caught(self):
        doc = self.doc()
        doc["cases"][0]["kind"] = "ring_allreduce"
        with self.assertRaisesRegex(schema.SchemaError,
                                    r"\$\.cases\[0\]\.kind: \"ring_allreduce\" is not one of the "
                                    r"kinds the runner registered"):
            schema.check(doc, "results-1")

    def test_a_project_s_own_kind_validates_where_its_runner_registered_it(self):
        doc = self.doc()
        doc["run"]["kinds"].append("ring_allreduce")
        doc["cases"][0]["kind"] = "ring_allreduce"
        schema.check(doc, "results-1")
        del doc["run"]["kinds"]  # a document that does not say: any kind name
        schema.check(doc, "results-1")

    def test_kind_names_keep_their_form(self):
        for kinds, kind in ((None, "ring allreduce"), (["ring allreduce"], "ring allreduce"),
                            ([], "layout")):
            with self.subTest(kinds=kinds, kind=kind):
                doc = self.doc()
                doc["cases"][0]["kind"] = kind
                if kinds is None:
                    del doc["run"]["kinds"]
                else:
                    doc["run"]["kinds"] = kinds
                with self.assertRaises(schema.SchemaError):
                    schema.check(doc, "results-1")

    def test_an_error_row_of_a_case_never_described_has_no_kind(self):
        doc = self.doc()
        doc["cases"][0]["kind"] = ""
        schema.check(doc, "results-1")


class ListKindsCommandTest(unittest.TestCase):
    def run_list(self, *args: str) -> subprocess.CompletedProcess:
        runner = built_runner()
        if runner is None:
            self.skipTest("no built meshgate-runner")
        return subprocess.run([str(runner), "list", *args], capture_output=True, text=True,
                              timeout=60)

    def test_the_plain_listing_has_a_line_per_kind(self):
        proc = self.run_list("--kinds")
        self.assertEqual(proc.returncode, 0, proc.stderr)
        lines = proc.stdout.splitlines()
        self.assertEqual(lines[0].split(), ["kind", "origin", "--impl", "signals"])
        rows = {line.split()[0]: line.split() for line in lines[1:]}
        self.assertEqual(rows["layout"], ["layout", "built-in", "yes", "result"])
        self.assertEqual(rows["command"], ["command", "built-in", "no", "-"])

    def test_kinds_take_no_case_selection_and_cases_need_a_path(self):
        for args in (("--kinds", "cases"), ("--kinds", "--tag", "smoke"), ()):
            with self.subTest(args=args):
                proc = self.run_list(*args)
                self.assertEqual(proc.returncode, 2)
                self.assertIn("--kinds", proc.stderr)


if __name__ == "__main__":
    unittest.main()
