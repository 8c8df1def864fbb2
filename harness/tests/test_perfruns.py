import unittest

from meshgate.core import merge
from meshgate.system import repeats


def row(case_id, status="pass", samples=None, perf_runs=None, message=""):
    out = {"id": case_id, "status": status, "message": message, "params": {}, "metrics": {},
           "samples": {}}
    if samples is not None:
        out["samples"] = {"time_s": [samples]}
    if perf_runs is not None:
        out["params"]["perf"] = {"runs": perf_runs}
    return out


class PerfRunsTest(unittest.TestCase):
    def test_runs_come_from_the_listing_then_the_row(self):
        self.assertEqual(repeats.perf_runs({"perf": {"runs": 9}}, row("a/b", perf_runs=3)), 9)
        self.assertEqual(repeats.perf_runs({"perf": None}, row("a/b", perf_runs=3)), 3)
        self.assertEqual(repeats.perf_runs(None, row("a/b")), 1)

    def test_schedule_repeats_passing_perf_cases_only(self):
        cases = [row("g/a"), row("g/b"), row("g/c", status="fail"), row("l/x")]
        catalogue = {"g/a": {"perf": {"runs": 3}}, "g/b": {"perf": {"runs": 2}},
                     "g/c": {"perf": {"runs": 5}}, "l/x": {"perf": None}}
        self.assertEqual(repeats.repeat_schedule(cases, catalogue),
                         {2: ["g/a", "g/b"], 3: ["g/a"]})


class MergeTest(unittest.TestCase):
    def test_median_of_per_run_medians(self):
        first = row("g/a", samples=[1.0, 2.0, 9.0])
        later = {2: row("g/a", samples=[4.0, 5.0, 6.0]), 3: row("g/a", samples=[0.5, 3.0, 3.5])}
        merged = merge.merge_case(first, later, 3)
        self.assertEqual(merged["samples"]["time_s"],
                         [[1.0, 2.0, 9.0], [4.0, 5.0, 6.0], [0.5, 3.0, 3.5]])
        # Per-run medians 2, 5, 3: their median is 3, while the pooled median would be 3.5.
        self.assertEqual(merged["metrics"]["time_s"], {"median": 3.0, "min": 0.5, "max": 9.0,
                                                       "run_medians": [2.0, 5.0, 3.0],
                                                       "runs": 3})
        self.assertEqual(merged["status"], "pass")
        self.assertEqual(first["samples"]["time_s"], [[1.0, 2.0, 9.0]], "input left unchanged")

    def test_calls_per_sample_of_every_run_are_kept(self):
        def timed(samples, calls):
            out = row("g/a", samples=samples)
            out["metrics"]["time_s"] = {"median": samples[0], "calls_per_sample": calls}
            return out

        merged = merge.merge_case(timed([1.0], 2000), {2: timed([2.0], 1800), 3: timed([3.0], 2100)}, 3)
        time_s = merged["metrics"]["time_s"]
        self.assertEqual(time_s["calls_per_sample"], 1800)
        self.assertEqual(time_s["run_calls_per_sample"], [2000, 1800, 2100])
        self.assertEqual(time_s["run_medians"], [1.0, 2.0, 3.0])
        # A run that does not say (an older runner) is None beside its median.
        merged = merge.merge_case(timed([1.0], 5), {2: row("g/a", samples=[2.0])}, 2)
        self.assertEqual(merged["metrics"]["time_s"]["run_calls_per_sample"], [5, None])

    def test_a_failing_or_missing_later_run_marks_the_case(self):
        first = row("g/a", samples=[1.0])
        merged = merge.merge_case(first, {2: row("g/a", "fail", [1.0], message="wrong sum"),
                                             3: None}, 3)
        self.assertEqual(merged["status"], "error")
        self.assertEqual(merged["message"], "run 2 of 3: wrong sum\n"
                                            "run 3 of 3: the runner produced no result")
        self.assertEqual(merged["metrics"]["time_s"]["runs"], 2)

    def test_merge_runs_touches_only_repeated_cases(self):
        document = {"schema": "meshgate.results/1", "run": {"id": "r"},
                    "cases": [row("g/a", samples=[2.0, 4.0]), row("l/x")]}
        catalogue = {"g/a": {"perf": {"runs": 2}}, "l/x": {"perf": None}}
        merged = repeats.merge_runs(document, {2: {"g/a": row("g/a", samples=[6.0, 8.0])}},
                                     catalogue)
        self.assertEqual(merged["cases"][0]["metrics"]["time_s"]["median"], 5.0)
        self.assertEqual(merged["cases"][1], row("l/x"))
        self.assertEqual(merged["run"], {"id": "r"})


if __name__ == "__main__":
    unittest.main()
