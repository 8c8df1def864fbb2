"""bench/otava_method.py, the reimplementation of Apache Otava's change point method that
bench/change_points_vs_otava.py compares meshgate's detector with: the t distribution, the
E-divisive statistic against its definition, and change points on tiny series."""

from __future__ import annotations

import itertools
import random
import sys
import unittest
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import otava_method  # noqa: E402


def brute_q(xs: list, tau: int, kappa: int) -> float:
    left, right = xs[:tau], xs[tau:kappa]
    n, m = len(left), len(right)
    q = 2.0 / (n + m) * sum(abs(a - b) for a in left for b in right)
    if n > 1:
        q -= 2.0 * m / ((n + m) * (n - 1)) * sum(abs(a - b) for a, b in itertools.combinations(left, 2))
    if m > 1:
        q -= 2.0 * n / ((n + m) * (m - 1)) * sum(abs(a - b) for a, b in itertools.combinations(right, 2))
    return q


class StudentTTest(unittest.TestCase):
    def test_known_quantiles(self):
        # Two-sided 5 % and 1 % critical values of Student's t (standard tables).
        for t, df, p in ((12.706, 1, 0.05), (2.228, 10, 0.05), (2.009, 50, 0.05), (3.169, 10, 0.01)):
            self.assertAlmostEqual(otava_method.t_two_sided_p(t, df), p, delta=p * 0.002)
        self.assertEqual(otava_method.t_two_sided_p(0.0, 5), 1.0)

    def test_pooled_test_with_population_deviations(self):
        left, right = [1.0, 2.0, 3.0], [4.0, 5.0, 6.0]
        p, t, m1, m2 = otava_method.student_t_test(left, right)
        # ddof = 0 deviations sqrt(2/3) pooled with weights n - 1: se = sqrt(2/3 * 2/3), t = -3 / se.
        self.assertAlmostEqual(t, -3.0 / (2.0 / 3.0), places=12)
        self.assertEqual((m1, m2), (2.0, 5.0))
        self.assertAlmostEqual(p, otava_method.t_two_sided_p(4.5, 4), places=15)
        self.assertEqual(otava_method.student_t_test([1.0], [2.0])[0], 1.0)  # no degrees of freedom

    def test_matches_scipy_where_installed(self):
        try:
            from scipy import stats
        except ImportError:
            self.skipTest("scipy not installed")
        rng = random.Random(4)
        for _ in range(20):
            t, df = rng.uniform(-8, 8), rng.randint(1, 60)
            self.assertAlmostEqual(otava_method.t_two_sided_p(t, df), 2 * stats.t.sf(abs(t), df), delta=1e-12)


class EnergyStatisticTest(unittest.TestCase):
    def test_candidate_maximises_q_over_tau_and_kappa(self):
        rng = random.Random(3)
        for n in (2, 5, 12, 20):
            xs = [rng.gauss(0.0, 1.0) for _ in range(n)]
            xs[n // 2] = xs[0]  # a tie
            dist = otava_method._Distances(xs)
            tau, qhat = otava_method.best_candidate(dist, 0, n)
            best = max(((t, k) for t in range(1, n) for k in range(t + 1, n + 1)), key=lambda tk: brute_q(xs, *tk))
            self.assertEqual(tau, best[0], n)
            self.assertAlmostEqual(qhat, brute_q(xs, *best), places=9)
        self.assertIsNone(otava_method.best_candidate(otava_method._Distances([1.0]), 0, 1))


class DetectTest(unittest.TestCase):
    def test_tiny_series_with_one_step(self):
        values = [10.0, 10.2, 9.9, 10.1, 9.8, 10.0, 12.0, 12.1, 11.9, 12.2, 11.8, 12.0]
        found = otava_method.detect(values)
        self.assertEqual([c.index for c in found], [6])
        self.assertLess(found[0].pvalue, otava_method.P_THRESHOLD)
        self.assertAlmostEqual(found[0].forward_change, 0.2, places=2)

    def test_two_steps(self):
        values = [5.0, 5.1, 4.9, 5.0, 5.05, 8.0, 8.1, 7.9, 8.0, 8.05, 3.0, 3.1, 2.9, 3.0, 3.05]
        self.assertEqual([c.index for c in otava_method.detect(values)], [5, 10])

    def test_noise_and_constant_series_have_none(self):
        self.assertEqual(otava_method.detect([1.0] * 20), [])
        self.assertEqual(otava_method.detect([]), [])
        rng = random.Random(7)
        hits = sum(bool(otava_method.detect([rng.gauss(10.0, 0.1) for _ in range(30)])) for _ in range(50))
        self.assertLessEqual(hits, 3)

    def test_merge_drops_a_weak_point_and_retests_its_neighbours(self):
        values = [10.0, 10.2, 9.9, 10.1, 9.8, 10.0, 12.0, 12.1, 11.9, 12.2, 11.8, 12.0]
        weak = otava_method.split(values) + [otava_method.OtavaChangePoint(9, 0.0, 0.5, 0.0, 0.0)]
        weak.sort(key=lambda c: c.index)
        merged = otava_method.merge(values, weak)
        self.assertEqual([c.index for c in merged], [6])
        # Re-tested over the whole right side, not up to the dropped point.
        self.assertEqual(merged[0].mean_after, sum(values[6:]) / 6)

    def test_long_series_is_windowed(self):
        rng = random.Random(10)
        values = [rng.gauss(10.0, 0.1) * (1.2 if i >= 70 else 1.0) for i in range(130)]
        self.assertEqual([c.index for c in otava_method.detect(values)], [70])
        # One point 3.3 sigma off just before a step is a change point of its own for Otava.
        rng = random.Random(9)
        values = [rng.gauss(10.0, 0.1) * (1.2 if i >= 70 else 1.0) for i in range(130)]
        self.assertEqual([c.index for c in otava_method.detect(values)], [69, 70])


if __name__ == "__main__":
    unittest.main()
