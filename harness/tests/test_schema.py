"""The shipped JSON Schemas and their validator: the validator catches what each keyword forbids,
real documents (runner output, committed baselines, fixtures, compare --json, cases/) validate,
and documents that break the contract do not."""

from __future__ import annotations

import copy
import json
import os
import pathlib
import subprocess
import sys
import tempfile
import unittest
from unittest import mock

from meshgate.core import results, schema
from meshgate.gate import compare

ROOT = pathlib.Path(__file__).resolve().parents[2]
GATE = pathlib.Path(__file__).resolve().parent / "fixtures" / "gate"

try:
    import yaml
except ImportError:  # PyYAML: the `test` extra, in every environment ci/bootstrap makes
    yaml = None


def errors(instance, sch):
    return list(schema.errors(instance, sch))


class ValidatorTest(unittest.TestCase):
    def test_each_keyword_rejects_what_it_forbids(self):
        cases = [
            ({"type": "integer"}, 3, True), ({"type": "integer"}, True, False),
            ({"type": "integer"}, 3.5, False), ({"type": ["string", "null"]}, None, True),
            ({"enum": [1, "a"]}, "a", True), ({"enum": [1]}, True, False),
            ({"const": 0}, 0.0, True), ({"const": 0}, False, False),
            ({"required": ["a"]}, {"a": 1}, True), ({"required": ["a"]}, {}, False),
            ({"properties": {"a": {"type": "string"}}}, {"a": 1}, False),
            ({"additionalProperties": False, "properties": {"a": {}}}, {"b": 1}, False),
            ({"additionalProperties": {"type": "number"}}, {"b": "x"}, False),
            ({"propertyNames": {"enum": ["a"]}}, {"b": 1}, False),
            ({"items": {"type": "number"}}, [1, "x"], False),
            ({"minItems": 2}, [1], False), ({"maxItems": 1}, [1, 2], False),
            ({"minProperties": 1}, {}, False), ({"minLength": 1}, "", False),
            ({"pattern": "^a+$"}, "aab", False), ({"pattern": "^a+$"}, "aa", True),
            ({"minimum": 0}, -1, False), ({"maximum": 1}, 2, False),
            ({"exclusiveMinimum": 0}, 0, False), ({"exclusiveMinimum": 0}, 1e-9, True),
            ({"allOf": [{"type": "number"}, {"minimum": 2}]}, 1, False),
            ({"anyOf": [{"type": "string"}, {"type": "null"}]}, 1, False),
            ({"oneOf": [{"type": "number"}, {"type": "integer"}]}, 1, False),
            ({"oneOf": [{"type": "number"}, {"type": "integer"}]}, 1.5, True),
            ({"not": {"type": "null"}}, None, False),
            ({"if": {"const": 1}, "then": {"type": "string"}}, 1, False),
            ({"if": {"const": 1}, "then": {"type": "string"}}, 2, True),
            ({"$defs": {"n": {"type": "null"}}, "$ref": "#/$defs/n"}, 0, False),
        ]
        for sch, instance, valid in cases:
            with self.subTest(schema=sch, instance=instance):
                self.assertEqual(errors(instance, sch) == [], valid, errors(instance, sch))

    def test_unsupported_keywords_are_refused_not_ignored(self):
        with self.assertRaises(ValueError):
            errors("x", {"format": "email"})

    def test_messages_name_the_json_path(self):
        found = errors({"a": [{"b": 1}]}, {"properties": {"a": {"items": {"properties": {"b": {"type": "string"}}}}}})
        self.assertEqual(found, ["$.a[0].b: expected string, got 1"])


class ResultsSchemaTest(unittest.TestCase):
    def setUp(self):
        self.doc = json.loads((GATE / "base.json").read_text())

    def test_fixtures_and_committed_baselines_validate(self):
        paths = sorted(GATE.glob("*.json")) + sorted((ROOT / "baselines").rglob("*.json"))
        checked = 0
        for path in paths:
            doc = json.loads(path.read_text())
            if doc.get("schema") != results.SCHEMA:
                continue
            with self.subTest(path=path.name):
                schema.check(doc, "results-1", path)
            checked += 1
        self.assertGreaterEqual(checked, 3)

    def test_contract_breaks_are_caught(self):
        breaks = {
            "status outside the four": lambda d: d["cases"][0].update(status="passed"),
            "missing message": lambda d: d["cases"][0].pop("message"),
            "samples not numbers": lambda d: d["cases"][0].update(samples={"time_s": [["fast"]]}),
            "id without a suite": lambda d: d["cases"][0].update(id="nosuite"),
            "unknown backend": lambda d: d["run"].update(backend="gloo"),
            "no versions": lambda d: d["run"].pop("versions"),
            "another schema": lambda d: d.update(schema="meshgate.results/2"),
        }
        for what, breaker in breaks.items():
            with self.subTest(what):
                doc = copy.deepcopy(self.doc)
                breaker(doc)
                with self.assertRaises(schema.SchemaError):
                    schema.check(doc, "results-1")

    def test_writes_are_checked_only_when_asked(self):
        bad = {"schema": results.SCHEMA, "run": {}, "cases": []}
        with tempfile.TemporaryDirectory() as tmp:
            path = pathlib.Path(tmp) / "results.json"
            with mock.patch.dict(os.environ, {schema.CHECK_ENV: "1"}):
                with self.assertRaises(schema.SchemaError):
                    results.write_results(path, bad)
                self.assertFalse(path.exists())
            with mock.patch.dict(os.environ, {schema.CHECK_ENV: "0"}):
                results.write_results(path, bad)
                self.assertTrue(path.exists())

    def test_a_completed_header_validates(self):
        doc = {"schema": results.SCHEMA, "run": results.complete_run({"id": "r"}),
               "cases": [results.error_row("s/a", "runner crashed")]}
        schema.check(doc, "results-1")

    @unittest.skipUnless(os.environ.get("MESHGATE_RUNNER", "").endswith("meshgate-runner"),
                         "needs the real runner (MESHGATE_RUNNER, set by CTest)")
    def test_real_runner_output_of_every_kind_validates(self):
        with tempfile.TemporaryDirectory() as tmp:
            out = pathlib.Path(tmp)
            files = [ROOT / "cases" / p for p in ("layout/coalesce.yaml", "mesh/slice.yaml",
                                                   "collectives/smoke.yaml", "redistribute/two-d.yaml",
                                                   "gemm/cpu-smoke.yaml")]
            proc = subprocess.run([os.environ["MESHGATE_RUNNER"], "run", *map(str, files),
                                   "--out", str(out)], capture_output=True, text=True)
            self.assertIn(proc.returncode, (0, 1), proc.stderr[-2000:])
            doc = json.loads((out / "results.json").read_text())
            self.assertEqual({row["kind"] for row in doc["cases"]},
                             {"layout", "mesh", "collective", "redistribute", "gemm"})
            schema.check(doc, "results-1", out / "results.json")


class VerdictsSchemaTest(unittest.TestCase):
    def comparison(self):
        base = json.loads((GATE / "base.json").read_text())
        new = json.loads((GATE / "new.json").read_text())
        return compare.compare_results(base, new)

    def test_compare_json_validates_and_the_enum_is_the_driver_s(self):
        verdicts = compare.verdicts_json(self.comparison())
        self.assertTrue(verdicts["cases"])
        schema.check(verdicts, "verdicts-1")
        sch = schema.load("verdicts-1")
        self.assertEqual(set(sch["$defs"]["verdict"]["properties"]["verdict"]["enum"]),
                         set(compare.VERDICTS))
        self.assertEqual(set(sch["$defs"]["verdict"]["properties"]), set(verdicts["cases"][0]))

    def test_compare_command_writes_a_valid_json(self):
        with tempfile.TemporaryDirectory() as tmp:
            path = pathlib.Path(tmp) / "v.json"
            proc = subprocess.run([sys.executable, str(ROOT / "meshgate"), "compare", str(GATE / "base.json"),
                                   str(GATE / "new.json"), "--json", str(path), "--out", str(pathlib.Path(tmp) / "report")],
                                  capture_output=True, text=True)
            self.assertIn(proc.returncode, (0, 1), proc.stderr)
            schema.check(json.loads(path.read_text()), "verdicts-1", path)

    def test_a_verdict_outside_the_enum_is_caught(self):
        verdicts = compare.verdicts_json(self.comparison())
        verdicts["cases"][0]["verdict"] = "probably fine"
        with self.assertRaises(schema.SchemaError):
            schema.check(verdicts, "verdicts-1")


@unittest.skipIf(yaml is None, "PyYAML is not installed")
class CasesSchemaTest(unittest.TestCase):
    def test_every_case_file_validates(self):
        files = sorted((ROOT / "cases").rglob("*.yaml"))
        self.assertGreater(len(files), 20)
        for path in files:
            with self.subTest(path=str(path.relative_to(ROOT))):
                schema.check(yaml.safe_load(path.read_text(encoding="utf-8-sig")), "cases-1", path)

    def test_the_kinds_are_the_runner_s(self):
        kinds = set(schema.load("cases-1")["$defs"]["case"]["properties"]["kind"]["enum"])
        registry = (ROOT / "harness" / "runner" / "kinds" / "registry.cpp").read_text()
        for kind in kinds:
            self.assertIn(f'"{kind}"', registry)

    def test_mistakes_are_caught(self):
        mistakes = {
            "typo in a key": {"cases": [{"name": "a", "kind": "layout", "op": "size", "args": ["4:1"], "exepct": 4}]},
            "a gemm key on a layout case": {"cases": [{"name": "a", "kind": "layout", "m": 4}]},
            "unknown kind": {"cases": [{"name": "a", "kind": "fft"}]},
            "no cases": {"cases": []},
            "unknown top-level key": {"case": [{"name": "a"}]},
            "name in defaults": {"defaults": {"name": "x"}, "cases": [{"name": "a"}]},
            "perf typo": {"cases": [{"name": "a", "perf": {"runz": 3}}]},
        }
        for what, doc in mistakes.items():
            with self.subTest(what):
                with self.assertRaises(schema.SchemaError):
                    schema.check(doc, "cases-1")


if __name__ == "__main__":
    unittest.main()
