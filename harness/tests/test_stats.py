import itertools
import math
import random
import unittest

from meshgate import stats


def permutation_p_greater(x, y):
    """Exact one-sided permutation p-value of the U statistic, ties included (brute force)."""
    pooled = list(x) + list(y)
    n1 = len(x)
    observed = stats.mann_whitney_u(x, y)
    hits = total = 0
    for idx in itertools.combinations(range(len(pooled)), n1):
        chosen = set(idx)
        a = [pooled[i] for i in idx]
        b = [pooled[i] for i in range(len(pooled)) if i not in chosen]
        total += 1
        hits += stats.mann_whitney_u(a, b) >= observed - 1e-12
    return hits / total


class MannWhitneyTest(unittest.TestCase):
    def test_u_counts_pairs_and_half_ties(self):
        self.assertEqual(stats.mann_whitney_u([2, 4, 6], [1, 3, 5]), 6)
        self.assertEqual(stats.mann_whitney_u([1, 2], [2, 3]), 0.5)

    def test_exact_distribution_sums_to_all_orderings(self):
        for n1, n2 in ((1, 1), (3, 3), (4, 7), (9, 9)):
            counts = stats._mwu_counts(n1, n2)
            self.assertEqual(len(counts), n1 * n2 + 1)
            self.assertEqual(sum(counts), math.comb(n1 + n2, n1))
            self.assertEqual(list(counts), list(reversed(counts)))  # symmetric under H0

    def test_exact_p_values(self):
        # n = 3 + 3: U distribution counts 1,1,2,3,3,3,3,2,1,1 over 20 orderings.
        self.assertAlmostEqual(stats.mann_whitney_greater([2, 4, 6], [1, 3, 5]), 7 / 20)
        self.assertAlmostEqual(stats.mann_whitney_greater([4, 5, 6], [1, 2, 3]), 1 / 20)
        self.assertAlmostEqual(stats.mann_whitney_greater([6, 7, 8, 9, 10], [1, 2, 3, 4, 5]), 1 / 252)
        self.assertAlmostEqual(stats.mann_whitney_greater([1, 2, 3, 4, 5], [6, 7, 8, 9, 10]), 1.0)

    def test_exact_matches_permutation_without_ties(self):
        rng = random.Random(3)
        for _ in range(5):
            x = [rng.random() for _ in range(5)]
            y = [rng.random() + 0.2 for _ in range(6)]
            self.assertAlmostEqual(stats.mann_whitney_greater(y, x), permutation_p_greater(y, x), places=12)

    def test_tie_corrected_normal_approximation_is_close_to_exact_permutation(self):
        x = [1, 1, 2, 2, 3, 3, 4]
        y = [2, 3, 3, 4, 4, 5, 5]
        exact = permutation_p_greater(y, x)
        approx = stats.mann_whitney_greater(y, x)
        self.assertLess(abs(exact - approx), 0.01, (exact, approx))
        self.assertLess(approx, 0.05)

    def test_all_tied_is_not_significant(self):
        self.assertEqual(stats.mann_whitney_greater([1.0] * 5, [1.0] * 5), 1.0)

    def test_empty_side_is_an_error(self):
        with self.assertRaises(ValueError):
            stats.mann_whitney_greater([], [1.0])

    def test_smallest_k_reaching_alpha(self):
        self.assertEqual(stats.smallest_k_reaching(0.01), 5)  # 1/252 < 0.01 < 1/70
        self.assertEqual(stats.smallest_k_reaching(0.05), 3)  # 1/20 reaches 0.05 exactly
        self.assertEqual(stats.smallest_k_reaching(0.04), 4)


class BootstrapTest(unittest.TestCase):
    def test_seeded_and_contains_the_true_ratio(self):
        rng = random.Random(5)
        base = [1.0 + rng.gauss(0, 0.02) for _ in range(9)]
        new = [1.1 + rng.gauss(0, 0.02) for _ in range(9)]
        ci = stats.bootstrap_ratio_ci(base, new, seed=9)
        self.assertEqual(ci, stats.bootstrap_ratio_ci(base, new, seed=9))
        self.assertLess(ci[0], 1.1)
        self.assertGreater(ci[1], 1.1)
        self.assertGreater(ci[0], 1.03)
        self.assertLess(ci[1], 1.17)

    def test_identical_constant_sides_give_a_point_interval(self):
        self.assertEqual(stats.bootstrap_ratio_ci([2.0] * 4, [3.0] * 4, resamples=50), (1.5, 1.5))


class BenjaminiHochbergTest(unittest.TestCase):
    def test_known_adjustment(self):
        p = [0.01, 0.04, 0.03, 0.005, None]
        q = stats.benjamini_hochberg(p)
        # sorted: 0.005*4/1 = 0.02, 0.01*4/2 = 0.02, 0.03*4/3 = 0.04, 0.04*4/4 = 0.04
        self.assertEqual(q[4], None)
        for got, want in zip(q[:4], [0.02, 0.04, 0.04, 0.02]):
            self.assertAlmostEqual(got, want)

    def test_monotone_and_capped(self):
        q = stats.benjamini_hochberg([0.9, 0.95, 0.99])
        self.assertTrue(all(v <= 1.0 for v in q))
        self.assertEqual(stats.benjamini_hochberg([]), [])


class NoiseAndPowerTest(unittest.TestCase):
    def test_relative_mad(self):
        self.assertAlmostEqual(stats.relative_mad([1.0, 1.1, 0.9, 1.0, 1.2]), 0.1)
        self.assertEqual(stats.relative_mad([5.0]), 0.0)

    def test_minimum_effect(self):
        self.assertEqual(stats.minimum_effect(None), 0.02)
        self.assertEqual(stats.minimum_effect(0.001), 0.02)
        self.assertAlmostEqual(stats.minimum_effect(0.01), 0.03)

    def test_runs_needed_grows_with_noise_and_shrinks_with_effect(self):
        self.assertEqual(stats.runs_needed(0.0, 0.05), 5)
        small = stats.runs_needed(0.02, 0.05)
        self.assertLess(small, stats.runs_needed(0.04, 0.05))
        self.assertGreater(stats.runs_needed(0.02, 0.02), small)
        # spec/gating.md: sigma 2 % gives ~98 % power at 5 % with k = 9, so 9 runs suffice.
        self.assertLessEqual(small, 9)

    def test_minimum_detectable_effect_inverts_runs_needed(self):
        mde = stats.minimum_detectable_effect(0.02, 9)
        self.assertLessEqual(stats.runs_needed(0.02, mde * 1.01), 9)
        self.assertEqual(stats.minimum_detectable_effect(0.02, 3), math.inf)


if __name__ == "__main__":
    unittest.main()
