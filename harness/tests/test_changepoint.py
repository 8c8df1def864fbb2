"""E-divisive change points (meshgate/timeline/changepoint.py): the statistic against its
definition, the permutation test, determinism, and the drift filter."""

from __future__ import annotations

import itertools
import random
import unittest

from meshgate.timeline import changepoint

from .support import once
from .synthetic import noisy


def energy_q(left: list[float], right: list[float]) -> float:
    """Q of Matteson & James written out from the definition (alpha = 1), for checking."""
    m, k = len(left), len(right)
    cross = sum(abs(x - y) for x in left for y in right)
    within_left = sum(abs(a - b) for a, b in itertools.combinations(left, 2))
    within_right = sum(abs(a - b) for a, b in itertools.combinations(right, 2))
    e = 2.0 * cross / (m * k) - within_left / (m * (m - 1) / 2) - within_right / (k * (k - 1) / 2)
    return m * k / (m + k) * e


class EnergyStatisticTest(unittest.TestCase):
    def test_scan_matches_the_definition(self):
        rng = random.Random(3)
        for n in (6, 7, 11, 30):
            values = [rng.gauss(10, 2) for _ in range(n)]
            values[n // 2] = values[1]  # a tie
            seg = changepoint._Segment(values, 0, n, 3, seed=1)
            best = max(range(3, n - 2), key=lambda t: energy_q(values[:t], values[t:]))
            self.assertEqual(seg.tau, best, n)
            self.assertAlmostEqual(seg.qhat, energy_q(values[:best], values[best:]), places=9)

    def test_offset_segment_reports_series_index(self):
        values = [1.0] * 5 + [1.0, 1.0, 1.0, 2.0, 2.0, 2.0, 2.0]
        seg = changepoint._Segment(values, 5, len(values), 3, seed=1)
        self.assertEqual(seg.tau, 8)


class EDivisiveTest(unittest.TestCase):
    def test_clear_step_is_found_exactly_with_small_p(self):
        values = noisy(random.Random(1), 40, step_at=23, step=0.10)
        found = changepoint.e_divisive(values)
        self.assertEqual([i for i, _, _ in found][:1], [23])
        p = found[0][1]
        self.assertLessEqual(p, changepoint.P_THRESHOLD)
        # p = (b + 1) / (N + 1): at most one permutation reached the observed statistic.
        self.assertIn(p, (1 / (changepoint.PERMUTATIONS + 1), 2 / (changepoint.PERMUTATIONS + 1)))

    def test_noise_alone_is_not_significant(self):
        rng = random.Random(5)
        hits = sum(bool(changepoint.e_divisive(noisy(rng, 40))) for _ in range(40))
        self.assertLessEqual(hits, 1)

    def test_constant_and_short_series(self):
        self.assertEqual(changepoint.e_divisive([1.0] * 30), [])
        self.assertEqual(changepoint.e_divisive([1.0, 2.0, 3.0, 4.0, 5.0]), [])
        self.assertEqual(changepoint.detect([1.0, 1.0, 2.0, 2.0, 2.0]), [])
        self.assertEqual(changepoint.detect([]), [])

    def test_two_steps_split_recursively(self):
        values = noisy(random.Random(2), 45, noise=0.005)
        values = [v * (1.15 if i >= 15 else 1.0) * (0.8 if i >= 30 else 1.0) for i, v in enumerate(values)]
        self.assertEqual([c.index for c in changepoint.detect(values)], [15, 30])

    def test_deterministic(self):
        values = noisy(random.Random(9), 45, noise=0.02, step_at=20, step=0.04)
        runs = [changepoint.detect(values) for _ in range(2)]
        self.assertEqual(runs[0], runs[1])
        self.assertEqual(changepoint.e_divisive(values, seed=1), changepoint.e_divisive(values, seed=1))

    def test_fewer_permutations_cannot_reach_the_threshold(self):
        # 99 permutations resolve p >= 0.01 only: nothing can be significant at 0.001.
        values = noisy(random.Random(1), 40, step_at=20, step=0.5)
        self.assertEqual(changepoint.e_divisive(values, permutations=99), [])
        self.assertTrue(changepoint.e_divisive(values, permutations=99, p_threshold=0.05))


@once("simulated series")
class FilterTest(unittest.TestCase):
    def test_slow_drift_is_not_a_change(self):
        # 0.1 %/point over 150 points is 15 % in all: E-divisive splits it, the step filter must not
        # report it. Low noise makes the drift the dominant structure.
        rng = random.Random(11)
        for _ in range(3):
            values = noisy(rng, 150, noise=0.004, drift=0.001)
            self.assertEqual(changepoint.detect(values), [])
            self.assertTrue(changepoint.e_divisive(values[:50]))  # the filter, not E-divisive, decides

    def test_step_on_a_drift_is_found_with_its_ratio(self):
        values = noisy(random.Random(12), 120, noise=0.004, drift=0.001, step_at=70, step=0.08)
        found = changepoint.detect(values)
        self.assertEqual([c.index for c in found], [70])
        self.assertAlmostEqual(found[0].ratio, 1.09, delta=0.02)  # the step plus ten points of drift
        self.assertGreater(found[0].after, found[0].before)

    def test_small_step_below_the_minimum_effect_is_dropped(self):
        # 1 % in 0.1 % noise is significant but below the 2 % floor.
        values = noisy(random.Random(13), 40, noise=0.001, step_at=20, step=0.01)
        self.assertTrue(changepoint.e_divisive(values))
        self.assertEqual(changepoint.detect(values), [])
        self.assertEqual([c.index for c in changepoint.detect(values, min_effect=0.005)], [20])

    def test_relative_noise_ignores_steps_and_drift(self):
        rng = random.Random(14)
        values = noisy(rng, 200, noise=0.02, drift=0.0005, step_at=100, step=0.3)
        self.assertAlmostEqual(changepoint.relative_noise(values), 0.02, delta=0.004)

    def test_long_series_is_windowed(self):
        rng = random.Random(15)
        values = noisy(rng, 200, noise=0.01)
        for at, factor in ((40, 1.1), (120, 0.9), (170, 1.2)):
            values[at:] = [v * factor for v in values[at:]]
        self.assertEqual([c.index for c in changepoint.detect(values)], [40, 120, 170])


if __name__ == "__main__":
    unittest.main()


@once("simulated series")
class ShortSideTest(unittest.TestCase):
    """The second test, for splits whose short side the permutation test cannot judge."""

    def test_the_permutation_floor_of_short_sides(self):
        self.assertAlmostEqual(changepoint.permutation_floor(14, 4), 2 / 1001)
        self.assertAlmostEqual(changepoint.permutation_floor(14, 10), 2 / 1001)
        self.assertGreater(changepoint.permutation_floor(14, 4), changepoint.P_THRESHOLD)

    def test_a_step_of_three_noise_floors_with_three_points_a_side_is_found(self):
        # Steps past max(2 %, 3 sigma) with 3 or 4 points on the short side, either end.
        rng = random.Random(21)
        for n, at in ((14, 4), (14, 3), (14, 10), (14, 11), (10, 3), (20, 17)):
            for noise, step in ((0.005, 0.05), (0.01, 0.08), (0.0, 7.5)):
                with self.subTest(n=n, at=at, noise=noise, step=step):
                    values = noisy(rng, n, noise=noise, step_at=at, step=step)
                    self.assertEqual([c.index for c in changepoint.detect(values)], [at])

    def test_short_flat_and_drifting_series_stay_quiet(self):
        rng = random.Random(22)
        alarms = 0
        for trial in range(300):
            n = 8 + trial % 25
            alarms += bool(changepoint.detect(noisy(rng, n, noise=0.01, drift=0.0005 * (trial % 2))))
        self.assertEqual(alarms, 0)

    def test_one_outlier_is_not_a_short_side(self):
        rng = random.Random(23)
        for at in (0, 1, 2, 11, 12, 13):
            values = noisy(rng, 14, noise=0.01)
            values[at] *= 1.3
            self.assertEqual(changepoint.detect(values), [], at)

    def test_off_without_sigma_as_before(self):
        values = [1.0] * 4 + [8.5] * 10
        self.assertEqual(changepoint.e_divisive(values), [])
        self.assertEqual([i for i, _, _ in changepoint.e_divisive(values, short_sigma=0.0)], [4])
