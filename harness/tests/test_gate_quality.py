"""Operating characteristics of `compare` on synthetic data with known truth.

Model (spec/gating.md): 9 runs per side, each run = 20 timed iterations; per-run offset
N(0, 2 %), per-iteration noise N(0, 2 %), 2 % of iterations are outliers 1.5-3x slower.
Each trial is its own one-case comparison, so BH cannot help: the hardest case for false alarms.
Quality bar: no-change flagged <= 1 % (regressions; improvements likewise), 10 % slowdowns caught >= 95 %, 5 % >= 80 %, speed-ups
never called regressions.
"""

import random
import statistics
import unittest

from meshgate import compare

RUNS = 9
ITERS = 20
SIGMA_RUN = 0.02
SIGMA_ITER = 0.02
OUTLIER_RATE = 0.02


def simulate_runs(rng: random.Random, factor: float, base_time: float = 1e-3) -> list[list[float]]:
    runs = []
    for _ in range(RUNS):
        center = base_time * factor * (1.0 + rng.gauss(0.0, SIGMA_RUN))
        iters = []
        for _ in range(ITERS):
            t = center * (1.0 + rng.gauss(0.0, SIGMA_ITER))
            if rng.random() < OUTLIER_RATE:
                t *= rng.uniform(1.5, 3.0)
            iters.append(t)
        runs.append(iters)
    return runs


def row(runs: list[list[float]]) -> dict:
    return {
        "id": "sim/case",
        "suite": "sim",
        "name": "case",
        "kind": "collective",
        "status": "pass",
        "message": "",
        "plan": [],
        "metrics": {"time_s": {"median": statistics.median(statistics.median(r) for r in runs)}},
        "samples": {"time_s": runs},
    }


def doc(runs: list[list[float]]) -> dict:
    return {"schema": "meshgate.results/1", "run": {}, "cases": [row(runs)]}


def verdict_rates(factor: float, trials: int, seed: int) -> dict[str, float]:
    rng = random.Random(seed)
    counts: dict[str, int] = {}
    for _ in range(trials):
        base, new = simulate_runs(rng, 1.0), simulate_runs(rng, factor)
        v = compare.compare_results(doc(base), doc(new), resamples=0).cases[0].verdict
        counts[v] = counts.get(v, 0) + 1
    return {k: c / trials for k, c in counts.items()}


class QualityBarTest(unittest.TestCase):
    def test_no_change_is_rarely_flagged(self):
        # Each direction is a one-sided test at alpha = 0.01, so each is bounded separately.
        rates = verdict_rates(1.0, trials=4000, seed=1)
        self.assertLessEqual(rates.get("regression", 0.0), 0.01, rates)
        self.assertLessEqual(rates.get("improvement", 0.0), 0.01, rates)
        self.assertGreaterEqual(rates.get("pass", 0.0), 0.85, rates)

    def test_ten_percent_slowdown_is_caught(self):
        rates = verdict_rates(1.10, trials=500, seed=2)
        self.assertGreaterEqual(rates.get("regression", 0.0), 0.95, rates)

    def test_five_percent_slowdown_is_caught(self):
        rates = verdict_rates(1.05, trials=500, seed=3)
        self.assertGreaterEqual(rates.get("regression", 0.0), 0.80, rates)

    def test_speedups_are_never_regressions(self):
        for factor, seed in ((0.90, 4), (0.95, 5), (0.98, 6)):
            rates = verdict_rates(factor, trials=300, seed=seed)
            self.assertEqual(rates.get("regression", 0.0), 0.0, (factor, rates))
        rates = verdict_rates(0.90, trials=300, seed=7)
        self.assertGreaterEqual(rates.get("improvement", 0.0), 0.95, rates)

    def test_interleaving_matters_drift_between_blocks_is_not_a_regression_when_interleaved(self):
        # A slow machine drift of 6 % over the session: interleaved ABBA runs see it on both
        # sides; the comparison must not call that a regression.
        rng = random.Random(8)
        flagged = 0
        trials = 300
        for _ in range(trials):
            base_runs, new_runs = [], []
            order = []
            for _ in range(RUNS // 2 + 1):
                order += ["A", "B", "B", "A"] if rng.random() < 0.5 else ["B", "A", "A", "B"]
            slot = 0
            for side in order:
                drift = 1.0 + 0.06 * slot / (2 * RUNS)
                target = base_runs if side == "A" else new_runs
                if len(target) < RUNS:
                    target.append(simulate_runs(rng, drift)[0])
                    slot += 1
            v = compare.compare_results(doc(base_runs), doc(new_runs), resamples=0).cases[0]
            flagged += v.verdict == "regression"
        self.assertLessEqual(flagged / trials, 0.01)


if __name__ == "__main__":
    unittest.main()
