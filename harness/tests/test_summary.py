import unittest
from pathlib import Path

from meshgate import summary

CASES = [
    {"id": "layout-algebra/coalesce-a", "suite": "layout-algebra", "status": "pass"},
    {"id": "layout-algebra/complement-b", "suite": "layout-algebra", "status": "fail",
     "message": "expected (2,6):(1,2)\ngot (2,6):(1,3)"},
    {"id": "mesh/flatten-c", "suite": "mesh", "status": "skip", "message": "needs 8 ranks"},
    {"id": "redistribute/prp", "status": "error",
     "message": "runner crashed with SIGSEGV while running this case\nlast runner stderr:\nx"},
]


class SummaryTest(unittest.TestCase):
    def test_full_summary(self):
        text = summary.render(CASES, 83.0, Path("/r/20261121-071500-59fa4d3"),
                              [Path("/r/20261121-071500-59fa4d3/report.md")],
                              ["baseline baselines/x: regression (exit 1)"])
        self.assertEqual(text.splitlines(), [
            "meshgate: 4 cases  pass 1  fail 1  error 1  skip 1  (wall 1:23)",
            "",
            "suite           pass  fail  error  skip",
            "layout-algebra     1     1      0     0",
            "mesh               0     0      0     1",
            "redistribute       0     0      1     0",
            "",
            "failed (1):",
            "  layout-algebra/complement-b  expected (2,6):(1,2)",
            "",
            "errors (1):",
            "  redistribute/prp  runner crashed with SIGSEGV while running this case",
            "",
            "baseline baselines/x: regression (exit 1)",
            "results: /r/20261121-071500-59fa4d3/results.json",
            "report:  /r/20261121-071500-59fa4d3/report.md",
        ])

    def test_all_passing_has_no_failure_sections(self):
        text = summary.render(CASES[:1], 1.0, Path("/o"))
        self.assertNotIn("failed", text)
        self.assertNotIn("errors", text)
        self.assertIn("pass 1  fail 0  error 0  skip 0", text)

    def test_suite_counts_in_first_appearance_order(self):
        counts = summary.suite_counts(CASES)
        self.assertEqual(list(counts), ["layout-algebra", "mesh", "redistribute"])
        self.assertEqual(counts["layout-algebra"], {"pass": 1, "fail": 1, "error": 0, "skip": 0})


if __name__ == "__main__":
    unittest.main()
