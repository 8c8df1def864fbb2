import contextlib
import io
import json
import pathlib
import random
import tempfile
import unittest

from meshgate import baseline, calibrate, compare, replicate


def merged_row(case_id, medians, status="pass"):
    return {"id": case_id, "suite": case_id.split("/")[0], "status": status, "message": "",
            "samples": {"time_s": [[m] * 5 for m in medians]}}


def aa_medians(rng, n, sigma):
    return [1e-3 * (1 + rng.gauss(0, sigma)) for _ in range(n)]


class CalibrateResultsTest(unittest.TestCase):
    def test_noise_floor_false_alarms_and_detectable_effect(self):
        rng = random.Random(1)
        results = {"cases": [
            merged_row("s/quiet", aa_medians(rng, 18, 0.005)),
            merged_row("s/noisy", aa_medians(rng, 18, 0.05)),
            merged_row("s/broken", aa_medians(rng, 18, 0.01), status="fail"),
            merged_row("s/two-runs", aa_medians(rng, 2, 0.01)),
        ]}
        cases = calibrate.calibrate_results(results, k=9, seed=0)
        self.assertEqual(sorted(cases), ["s/noisy", "s/quiet"])
        quiet, noisy = cases["s/quiet"], cases["s/noisy"]
        # MAD/median of N(0, sigma) runs is about 0.6745 sigma.
        self.assertGreater(quiet["noise_floor"], 0.001)
        self.assertLess(quiet["noise_floor"], 0.007)
        self.assertGreater(noisy["noise_floor"], 0.015)
        self.assertLess(noisy["noise_floor"], 0.07)
        self.assertEqual(quiet["min_effect"], 0.02)
        self.assertAlmostEqual(noisy["min_effect"], 3 * noisy["noise_floor"])
        self.assertLessEqual(quiet["false_alarm_rate"], 0.02)
        self.assertLessEqual(noisy["false_alarm_rate"], 0.02)
        self.assertEqual(quiet["min_detectable"], 0.02)  # the gate, not the test, limits it
        self.assertGreater(noisy["min_detectable"], quiet["min_detectable"])
        self.assertEqual(quiet["runs"], 18)

    def test_false_alarm_rate_sees_a_bimodal_machine(self):
        # Half the runs land on a slow socket: random splits flag that often.
        medians = [1.0] * 9 + [1.2] * 9
        medians = [m + 0.0001 * i for i, m in enumerate(medians)]
        rate = calibrate.aa_false_alarm_rate(medians, 9, 0.02, random.Random(0))
        self.assertGreater(rate, 0.0)
        self.assertIsNone(calibrate.aa_false_alarm_rate([1.0, 1.0, 1.0], 9, 0.02, random.Random(0)))


class CalibrateEndToEndTest(unittest.TestCase):
    def test_runs_store_and_compare_uses_the_floor(self):
        def launch(side, n, case_ids, folder):
            rng = random.Random(n)
            rows = [merged_row(i, [1e-3 * (1 + rng.gauss(0, 0.03))]) for i in case_ids]
            return {"schema": "meshgate.results/1", "run": {"id": f"aa-{n}", "commit": "abc",
                    "machine": {"cpu": "Test CPU", "gpus": []}}, "cases": rows}

        with tempfile.TemporaryDirectory() as tmp:
            tmp = pathlib.Path(tmp)
            side = replicate.Side(label="aa")
            with contextlib.redirect_stdout(io.StringIO()) as out:
                code = calibrate.calibrate_with(side, ["s/a", "s/b"], launch, tmp / "report", 18, 9, 0, None, tmp / "baselines")
            self.assertEqual(code, 0)
            self.assertIn("| `s/a` | 18 |", out.getvalue())
            stored = tmp / "baselines" / "test" / "calibration.json"  # "CPU" is dropped from the slug
            floors = baseline.load_calibration(stored)
            self.assertEqual(sorted(floors), ["s/a", "s/b"])
            self.assertGreater(floors["s/a"], 0.0)
            self.assertTrue((tmp / "report" / "results.json").is_file())
            self.assertTrue((tmp / "report" / "report.md").is_file())
            merged = json.loads((tmp / "report" / "results.json").read_text())
            self.assertEqual(len(merged["cases"][0]["samples"]["time_s"]), 18)

            # A second calibration of one case keeps the other's entry.
            with contextlib.redirect_stdout(io.StringIO()):
                calibrate.calibrate_with(side, ["s/a"], launch, tmp / "report2", 6, 3, 0, None, tmp / "baselines")
            self.assertEqual(sorted(baseline.load_calibration(stored)), ["s/a", "s/b"])

            # compare finds the calibration of the new results' machine class.
            new = {"schema": "meshgate.results/1", "run": {"machine": {"cpu": "Test CPU", "gpus": []}}, "cases": []}
            self.assertEqual(compare.calibration_for(new, baselines_root=tmp / "baselines"), baseline.load_calibration(stored))

    def test_corrupt_calibration_is_refused_with_a_remedy(self):
        with tempfile.TemporaryDirectory() as tmp:
            path = pathlib.Path(tmp) / "calibration.json"
            path.write_text("{")
            with self.assertRaises(baseline.InputError) as e:
                baseline.load_calibration(path)
            self.assertIn("meshgate calibrate", str(e.exception))


if __name__ == "__main__":
    unittest.main()
