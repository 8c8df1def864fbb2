"""`meshgate import`: Google Benchmark JSON and nccl-tests tables as results documents that the
gate judges like meshgate's own runs."""

import contextlib
import io
import json
import pathlib
import random
import tempfile
import unittest

from meshgate import cli
from meshgate.core import schema, tool_results
from meshgate.gate import compare

FIXTURES = pathlib.Path(__file__).parent / "fixtures" / "tools"


def gbench_doc(times_ns, name="BM_Coalesce", extra=()):
    """A Google Benchmark document with one repetition per time, plus its aggregates."""
    benches = [{"name": name, "run_name": name, "run_type": "iteration", "repetitions": len(times_ns),
                "repetition_index": i, "threads": 1, "iterations": 1000, "real_time": t, "cpu_time": t * 0.9,
                "time_unit": "ns", "items_per_second": 1e9 / t} for i, t in enumerate(times_ns)]
    benches.append({"name": f"{name}_mean", "run_name": name, "run_type": "aggregate", "aggregate_name": "mean",
                     "real_time": sum(times_ns) / len(times_ns), "cpu_time": 0.0, "time_unit": "ns"})
    return {"context": {"host_name": "ci-7", "date": "2026-11-26T10:00:00+00:00", "load_avg": [0.5, 0.4, 0.3]},
            "benchmarks": benches + list(extra)}


class GoogleBenchmarkTest(unittest.TestCase):
    def test_repetitions_are_samples_and_aggregates_are_dropped(self):
        rows, facts = tool_results.google_benchmark(gbench_doc([30.0, 32.0, 31.0]), "layout-bench")
        self.assertEqual(len(rows), 1)
        row = rows[0]
        self.assertEqual((row["id"], row["kind"], row["status"]), ("layout-bench/BM_Coalesce", "benchmark", "pass"))
        self.assertEqual(len(row["samples"]["time_s"][0]), 3)
        for got, want in zip(row["samples"]["time_s"][0], [30e-9, 32e-9, 31e-9]):
            self.assertAlmostEqual(got, want, delta=1e-15)
        self.assertAlmostEqual(row["metrics"]["items_per_second"], 1e9 / 31.0)
        self.assertEqual(facts["host"], "ci-7")

    def test_errors_and_skips_become_their_statuses(self):
        extra = [{"name": "BM_Broken", "run_name": "BM_Broken", "run_type": "iteration", "error_occurred": True,
                  "error_message": "allocation failed"},
                 {"name": "BM_Gpu", "run_name": "BM_Gpu", "run_type": "iteration", "skipped": True,
                  "skip_message": "no CUDA device"}]
        rows, _ = tool_results.google_benchmark(gbench_doc([30.0], extra=extra), "s")
        by_id = {r["id"]: r for r in rows}
        self.assertEqual((by_id["s/BM_Broken"]["status"], by_id["s/BM_Broken"]["message"]), ("error", "allocation failed"))
        self.assertEqual((by_id["s/BM_Gpu"]["status"], by_id["s/BM_Gpu"]["message"]), ("skip", "no CUDA device"))

    def test_a_document_that_is_not_google_benchmark_is_refused_with_its_name(self):
        with self.assertRaisesRegex(tool_results.ToolResultsError, r"x.json: not Google Benchmark JSON"):
            tool_results.google_benchmark({"cases": []}, "s", "x.json")
        bad_unit = gbench_doc([1.0])
        bad_unit["benchmarks"][0]["time_unit"] = "fortnights"
        with self.assertRaisesRegex(tool_results.ToolResultsError, r"benchmarks\[0\] \(BM_Coalesce\).*fortnights"):
            tool_results.google_benchmark(bad_unit, "s", "x.json")


class NcclTestsTest(unittest.TestCase):
    def test_each_size_and_placement_is_a_collective_row(self):
        rows, header = tool_results.nccl_tests((FIXTURES / "all_reduce_perf.txt").read_text(), "nccl", op="all_reduce")
        self.assertEqual(len(rows), 6)
        first = rows[0]
        self.assertEqual(first["id"], "nccl/all_reduce-float-sum-1024B-out-of-place")
        self.assertEqual(first["kind"], "collective")
        self.assertEqual(first["params"]["reduce"], "sum")
        self.assertAlmostEqual(first["samples"]["time_s"][0][0], 10.52e-6, delta=1e-12)
        entry = first["metrics"]["sizes"][0]
        self.assertEqual((entry["bytes"], entry["count"], entry["inplace"], entry["wrong"]), (1024, 256, False, 0))
        self.assertEqual((entry["algbw_GBps"], entry["busbw_GBps"]), (0.10, 0.10))
        self.assertIn("nThread 1", header["config"])
        # A wrong element fails that row, and only that row.
        failing = [r for r in rows if r["status"] == "fail"]
        self.assertEqual([r["id"] for r in failing], ["nccl/all_reduce-float-sum-1048576B-in-of-place"])
        self.assertIn("3 wrong element(s)", failing[0]["message"])

    def test_tables_without_a_root_column_and_unchecked_values(self):
        rows, _ = tool_results.nccl_tests((FIXTURES / "all_gather_perf_old.txt").read_text(), "nccl", op="all_gather")
        self.assertEqual(len(rows), 4)
        self.assertTrue(all(r["status"] == "pass" for r in rows))
        self.assertIsNone(rows[0]["params"]["reduce"])
        self.assertIsNone(rows[0]["metrics"]["wrong"])  # N/A: nccl-tests ran with -c 0

    def test_out_of_bounds_values_fail_the_run(self):
        text = (FIXTURES / "all_reduce_perf.txt").read_text().replace("Out of bounds values : 0 OK",
                                                                       "Out of bounds values : 2 FAILED")
        rows, _ = tool_results.nccl_tests(text, "nccl", op="all_reduce")
        self.assertTrue(all(r["status"] == "fail" for r in rows))

    def test_a_row_of_the_wrong_width_names_its_line(self):
        with self.assertRaisesRegex(tool_results.ToolResultsError, r"t.txt:2: a table row of 3 columns"):
            tool_results.nccl_tests("# header\n1024 256 float\n", "nccl", "t.txt")
        with self.assertRaisesRegex(tool_results.ToolResultsError, "no nccl-tests table row"):
            tool_results.nccl_tests("hello\n", "nccl", "t.txt")


class ImportCommandTest(unittest.TestCase):
    def run_cli(self, *argv):
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = cli.main(list(argv))
        return code, out.getvalue(), err.getvalue()

    def write_launches(self, folder, factor, n=5, seed=1):
        rng = random.Random(seed)
        paths = []
        for i in range(n):
            path = pathlib.Path(folder) / f"launch-{factor}-{i}.json"
            center = 30.0 * factor * (1 + rng.gauss(0, 0.005))
            path.write_text(json.dumps(gbench_doc([center * (1 + rng.gauss(0, 0.005)) for _ in range(5)])))
            paths.append(str(path))
        return paths

    def test_launches_become_runs_that_compare_judges(self):
        with tempfile.TemporaryDirectory() as tmp:
            base, new = pathlib.Path(tmp) / "base.json", pathlib.Path(tmp) / "new.json"
            code, out, _ = self.run_cli("import", "google-benchmark", *self.write_launches(tmp, 1.0),
                                        "--suite", "layout-bench", "--out", str(base))
            self.assertEqual(code, 0)
            self.assertIn("1 case(s) from 5 launch(es)", out)
            self.assertEqual(self.run_cli("import", "google-benchmark", *self.write_launches(tmp, 1.3, seed=2),
                                          "--suite", "layout-bench", "--out", str(new))[0], 0)
            doc = json.loads(base.read_text())
            schema.check(doc, "results-1")
            self.assertEqual(len(doc["cases"][0]["samples"]["time_s"]), 5)  # one sample list per launch
            self.assertEqual(doc["run"]["runs"], 5)
            comparison = compare.compare_results(doc, json.loads(new.read_text()))
        self.assertEqual(comparison.cases[0].verdict, "regression")

    def test_nccl_tests_output_with_a_wrong_element_exits_1(self):
        with tempfile.TemporaryDirectory() as tmp:
            out = pathlib.Path(tmp) / "r.json"
            code, _, _ = self.run_cli("import", "nccl-tests", str(FIXTURES / "all_reduce_perf.txt"),
                                      "--op", "all_reduce", "--suite", "nccl", "--out", str(out))
            self.assertEqual(code, 1)
            schema.check(json.loads(out.read_text()), "results-1")

    def test_unusable_input_exits_2_and_writes_nothing(self):
        with tempfile.TemporaryDirectory() as tmp:
            garbage = pathlib.Path(tmp) / "g.json"
            garbage.write_text("{not json")
            out = pathlib.Path(tmp) / "r.json"
            code, _, err = self.run_cli("import", "google-benchmark", str(garbage), "--suite", "s", "--out", str(out))
            self.assertEqual(code, 2)
            self.assertIn("g.json:1:2: not JSON", err)
            self.assertFalse(out.exists())


if __name__ == "__main__":
    unittest.main()
