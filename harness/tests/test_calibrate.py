import contextlib
import io
import json
import pathlib
import random
import tempfile
import unittest

from meshgate.commands import calibrate as calibrate_command
from meshgate.gate import calibrate, compare, power, stats, store
from meshgate.system import repeats


def aa_launch(noise=0.02, slow_label=None, slow_factor=1.0, slow_batches=("all",)):
    """A launch function for A/A sessions of one build with known per-run noise. Optionally the
    launches labelled `slow_label` run `slow_factor` slower, in every batch or only in first
    batches, to check that the false-alarm column counts what the launches and their
    confirmation batches did."""

    def launch(side, n, case_ids, folder):
        folder = pathlib.Path(folder)
        rng = random.Random("/".join(folder.parts[-4:]))  # seeded below the temporary root
        confirm = folder.parent.parent.name.endswith("-confirm")
        factor = 1.0
        if side.label == slow_label and ("all" in slow_batches or not confirm):
            factor = slow_factor
        rows = []
        for case_id in case_ids:
            center = 1e-3 * factor * (1 + rng.gauss(0, noise))
            rows.append({"id": case_id, "suite": case_id.split("/")[0], "kind": "layout", "status": "pass", "message": "",
                         "samples": {"time_s": [[center] * 5]}})
        return {"schema": "meshgate.results/1",
                "run": {"id": f"aa-{n}", "commit": "abc", "machine": {"cpu": "Test CPU", "gpus": []}}, "cases": rows}

    return launch


def simulated_power(effect, floor, noise, k, trials, rng):
    """Power after confirmation from the full `compare` path on Gaussian per-run noise."""

    def doc(factor):
        runs = [[1e-3 * factor * (1 + rng.gauss(0, noise))] for _ in range(k)]
        return {"schema": "meshgate.results/1", "run": {}, "cases": [{"id": "s/c", "status": "pass",
                                                                        "samples": {"time_s": runs}}]}

    caught = 0
    for _ in range(trials):
        caught += all(compare.compare_results(doc(1.0), doc(1.0 + effect), {"s/c": floor}).cases[0].verdict == "regression"
                      for _ in range(2))
    return caught / trials


class MinimumDetectableTest(unittest.TestCase):
    def test_matches_a_simulation_with_known_noise(self):
        noise, k = 0.02, 9
        with tempfile.TemporaryDirectory() as tmp:
            cases, _ = calibrate.calibrate_sessions(repeats.Side("aa"), ["s/c"], aa_launch(noise), pathlib.Path(tmp),
                                                    sessions=8, k=k, seed=3)
        entry = cases["s/c"]
        floor, measured = entry["noise_floor"], entry["min_detectable"]
        self.assertAlmostEqual(floor, 0.6745 * noise, delta=0.004)
        # Independent truth: bisect the effect with the real compare path on the true noise.
        rng = random.Random(11)
        lo, hi = stats_gate = stats.minimum_effect(floor), 0.2
        while hi - lo > 0.002:
            mid = (lo + hi) / 2
            if simulated_power(mid, floor, noise, k, 500, rng) >= 0.8:
                hi = mid
            else:
                lo = mid
        self.assertAlmostEqual(measured, hi, delta=0.0075, msg=(measured, hi, stats_gate))
        # After confirmation, the detectable regression lies past the gate.
        self.assertGreater(measured, entry["min_effect"])

    def test_more_noise_means_a_larger_detectable_regression(self):
        rng = random.Random(4)
        quiet = power.minimum_detectable_regression([rng.gauss(0, 0.01) for _ in range(100)], 9, 0.0067)
        noisy = power.minimum_detectable_regression([rng.gauss(0, 0.04) for _ in range(100)], 9, 0.027)
        self.assertLess(quiet, noisy)
        self.assertIsNone(power.minimum_detectable_regression([0.0, 0.01, -0.01], 9, 0.01))  # too few runs


class FalseAlarmsFromLaunchesTest(unittest.TestCase):
    def run_sessions(self, launch, sessions=4):
        with tempfile.TemporaryDirectory() as tmp:
            return calibrate.calibrate_sessions(repeats.Side("aa"), ["s/a", "s/b"], launch, pathlib.Path(tmp),
                                                sessions=sessions, k=9, seed=5, trials=100)

    def test_quiet_machine_has_no_confirmed_false_alarms_and_passes(self):
        cases, results = self.run_sessions(aa_launch(0.005))
        for entry in cases.values():
            self.assertEqual(entry["sessions"], 4)
            self.assertEqual(entry["false_alarms"], 0)
            self.assertEqual(entry["false_alarm_rate"], 0.0)
            self.assertGreaterEqual(entry["pass_rate"], 0.75)
            self.assertGreater(entry["false_alarm_upper"], 0.0)  # 0 of 4 sessions bounds little
        self.assertEqual(len(results["cases"][0]["samples"]["time_s"]), 4 * 18)

    def test_a_label_effect_in_every_batch_is_a_measured_false_alarm(self):
        # Launches labelled b run 10 % slower (something in the launch path, not the build):
        # a re-split of pooled runs could never see it; interleaved sessions and their
        # confirmation batches do.
        cases, _ = self.run_sessions(aa_launch(0.005, slow_label="b", slow_factor=1.10))
        for entry in cases.values():
            self.assertEqual(entry["false_alarms"], 4)
            self.assertEqual(entry["false_alarm_rate"], 1.0)
            self.assertEqual(entry["pass_rate"], 0.0)

    def test_flags_that_do_not_repeat_are_not_false_alarms(self):
        cases, _ = self.run_sessions(aa_launch(0.005, slow_label="b", slow_factor=1.10, slow_batches=("first",)))
        for entry in cases.values():
            self.assertEqual(entry["flagged_sessions"], 4)
            self.assertEqual(entry["false_alarms"], 0)

    def test_launch_order_is_interleaved(self):
        seen = []
        inner = aa_launch(0.01)

        def launch(side, n, case_ids, folder):
            seen.append((pathlib.Path(folder).parent.parent.name, side.label))
            return inner(side, n, case_ids, folder)

        self.run_sessions(launch, sessions=2)
        first = [label for session, label in seen if session == "1"]
        self.assertEqual(len(first), 18)
        for start in range(0, 16, 4):
            self.assertIn(first[start:start + 4], (["a", "b", "b", "a"], ["b", "a", "a", "b"]))

    def test_upper_bound_of_a_rate(self):
        self.assertAlmostEqual(power.upper_bound(0, 10), 1 - 0.05 ** (1 / 10), places=6)
        self.assertEqual(power.upper_bound(3, 3), 1.0)
        self.assertLess(power.upper_bound(1, 100), 0.05)


class CalibrateEndToEndTest(unittest.TestCase):
    def test_runs_store_and_compare_uses_the_floor(self):
        with tempfile.TemporaryDirectory() as tmp:
            tmp = pathlib.Path(tmp)
            side = repeats.Side(label="aa")
            with contextlib.redirect_stdout(io.StringIO()) as out:
                code = calibrate_command.calibrate_with(side, ["s/a", "s/b"], aa_launch(0.03), tmp / "report", 2, 9, 0, None,
                                                tmp / "baselines", trials=50)
            self.assertEqual(code, 0)
            text = out.getvalue()
            self.assertIn("| noise floor | gate | false alarms |", text)
            self.assertIn("| `s/a` | 36 |", text)
            stored = tmp / "baselines" / "test" / "calibration.json"  # "CPU" is dropped from the slug
            floors = store.load_calibration(stored)
            self.assertEqual(sorted(floors), ["s/a", "s/b"])
            self.assertGreater(floors["s/a"], 0.0)
            entry = json.loads(stored.read_text())["cases"]["s/a"]
            for key in ("noise_floor", "min_effect", "false_alarm_rate", "min_detectable", "sessions", "pass_rate"):
                self.assertIn(key, entry)
            self.assertTrue((tmp / "report" / "results.json").is_file())
            self.assertTrue((tmp / "report" / "report.md").is_file())

            # A second calibration of one case keeps the other's entry.
            with contextlib.redirect_stdout(io.StringIO()):
                calibrate_command.calibrate_with(side, ["s/a"], aa_launch(0.03), tmp / "report2", 1, 5, 0, None,
                                         tmp / "baselines", trials=50)
            self.assertEqual(sorted(store.load_calibration(stored)), ["s/a", "s/b"])

            # compare finds the calibration of the new results' machine class.
            new = {"schema": "meshgate.results/1", "run": {"machine": {"cpu": "Test CPU", "gpus": []}}, "cases": []}
            self.assertEqual(store.calibration_for(new, baselines_root=tmp / "baselines"), store.load_calibration(stored))

    def test_corrupt_calibration_is_refused_with_a_remedy(self):
        with tempfile.TemporaryDirectory() as tmp:
            path = pathlib.Path(tmp) / "calibration.json"
            path.write_text("{")
            with self.assertRaises(store.InputError) as e:
                store.load_calibration(path)
            self.assertIn("meshgate calibrate", str(e.exception))


if __name__ == "__main__":
    unittest.main()
