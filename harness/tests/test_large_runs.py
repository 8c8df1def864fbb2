"""A run of tens of thousands of cases goes through the driver in linear time: progress events,
results.json, report.md, junit.xml, report.html and the summary. The bound is generous (CPU
seconds of this process, so a busy machine does not trip it); a step that went quadratic again
costs minutes at this size and fails it."""

import json
import time
import unittest
import xml.etree.ElementTree as ET

from .support import DriverRun, once

CASES = 20000
CPU_BOUND_S = 60.0


@once("twenty thousand cases")
class LargeRunTest(DriverRun):
    def test_twenty_thousand_cases_run_and_report_in_linear_time(self):
        scenario = {"cases": [
            {"id": f"big/case-{i}", "kind": "layout", "tags": ["smoke"],
             "outcome": "fail" if i % 1000 == 7 else "pass", "message": "expected 8:1"}
            for i in range(CASES)]}
        start = time.process_time()
        code, out, err, out_dir = self.run_driver(scenario)
        cpu_seconds = time.process_time() - start
        self.assertEqual(code, 1, (out + err)[-2000:])
        document = json.loads((out_dir / "results.json").read_text())
        self.assertEqual([c["id"] for c in document["cases"]],
                         [c["id"] for c in scenario["cases"]])
        junit = ET.parse(out_dir / "junit.xml").getroot()
        self.assertEqual(junit.get("tests"), str(CASES))
        self.assertEqual(junit.get("failures"), str(CASES // 1000))
        failed = CASES // 1000
        self.assertIn(f"meshgate: {CASES} cases  pass {CASES - failed}  fail {failed}", out + err)
        self.assertLess(cpu_seconds, CPU_BOUND_S,
                        f"{CASES} cases took {cpu_seconds:.1f} CPU s in the driver: a step has "
                        f"gone quadratic")


if __name__ == "__main__":
    unittest.main()
