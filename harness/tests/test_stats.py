import itertools
import math
import random
import statistics
import unittest

from meshgate.gate import stats


def permutation_p_values(x, y):
    """Exact permutation p-values of the U statistic by enumerating every split (ties included):
    (x larger, x smaller, two-sided)."""
    pooled = list(x) + list(y)
    n1 = len(x)
    observed = stats.mann_whitney_u(x, y)
    center = n1 * len(y) / 2.0
    greater = less = two = total = 0
    for idx in itertools.combinations(range(len(pooled)), n1):
        chosen = set(idx)
        a = [pooled[i] for i in idx]
        b = [pooled[i] for i in range(len(pooled)) if i not in chosen]
        u = stats.mann_whitney_u(a, b)
        total += 1
        greater += u >= observed - 1e-12
        less += u <= observed + 1e-12
        two += abs(u - center) >= abs(observed - center) - 1e-12
    return greater / total, less / total, two / total


class MannWhitneyTest(unittest.TestCase):
    def test_u_counts_pairs_and_half_ties(self):
        self.assertEqual(stats.mann_whitney_u([2, 4, 6], [1, 3, 5]), 6)
        self.assertEqual(stats.mann_whitney_u([1, 2], [2, 3]), 0.5)

    def test_exact_p_values(self):
        # n = 3 + 3: U distribution counts 1,1,2,3,3,3,3,2,1,1 over 20 orderings.
        self.assertAlmostEqual(stats.mann_whitney_greater([2, 4, 6], [1, 3, 5]), 7 / 20)
        self.assertAlmostEqual(stats.mann_whitney_greater([4, 5, 6], [1, 2, 3]), 1 / 20)
        self.assertAlmostEqual(stats.mann_whitney_greater([6, 7, 8, 9, 10], [1, 2, 3, 4, 5]), 1 / 252)
        self.assertAlmostEqual(stats.mann_whitney_greater([1, 2, 3, 4, 5], [6, 7, 8, 9, 10]), 1.0)
        self.assertAlmostEqual(stats.mann_whitney_two_sided([6, 7, 8, 9, 10], [1, 2, 3, 4, 5]), 2 / 252)

    def test_exact_matches_enumeration_with_and_without_ties(self):
        rng = random.Random(3)
        for trial in range(12):
            n1, n2 = rng.randint(2, 6), rng.randint(2, 6)
            if trial % 2:  # coarse values: many ties
                x = [rng.randint(0, 4) for _ in range(n1)]
                y = [rng.randint(1, 5) for _ in range(n2)]
            else:
                x = [rng.random() for _ in range(n1)]
                y = [rng.random() + 0.2 for _ in range(n2)]
            want = permutation_p_values(y, x)
            got = stats.mann_whitney(y, x)
            for g, w in zip(got, want):
                self.assertAlmostEqual(g, w, places=12, msg=(x, y))

    def test_tied_four_against_four_is_never_below_one_in_seventy(self):
        # The normal approximation said p = 0.0066 here; no split of 4 + 4 runs can go below 1/70.
        base = [1.0, 1.0, 1.0, 1.1]
        new = [1.2, 1.3, 1.3, 1.3]
        greater, _, two = stats.mann_whitney(new, base)
        self.assertAlmostEqual(greater, 1 / 70)
        self.assertAlmostEqual(two, 2 / 70)
        self.assertFalse(stats.significant(two))

    def test_large_samples_use_the_normal_approximation_close_to_exact(self):
        rng = random.Random(4)
        x = [rng.gauss(0, 1) for _ in range(35)]
        y = [rng.gauss(0.8, 1) for _ in range(35)]
        approx = stats.mann_whitney(y, x)  # 70 runs: beyond the exact bound
        exact = stats._exact_p_values(y, x)
        for a, e in zip(approx, exact):
            self.assertLess(abs(a - e), 0.002, (approx, exact))

    def test_ties_beyond_sixty_runs_are_exact(self):
        # 31 vs 31 runs on two values: the normal approximation said p = 0.019, a regression at
        # 2 alpha = 0.02; the permutation p is 0.034.
        base = [1.0] * 24 + [1.05] * 7
        new = [1.0] * 15 + [1.05] * 16
        self.assertTrue(stats.exact_mann_whitney(new, base))
        two = stats.mann_whitney_two_sided(new, base)
        self.assertAlmostEqual(two, stats._exact_p_values(new, base)[2], places=12)
        self.assertGreater(abs(two - stats._normal_p_values(new, base)[2]), 0.01)
        self.assertFalse(stats.significant(two))

    def test_a_small_side_is_exact_whatever_the_other_holds(self):
        rng = random.Random(5)
        small = [rng.gauss(0, 1) for _ in range(5)]
        large = [rng.gauss(1, 1) for _ in range(56)]
        self.assertTrue(stats.exact_mann_whitney(small, large))
        self.assertTrue(stats.exact_mann_whitney(large, small))
        distinct = [rng.gauss(0, 1) for _ in range(62)]
        self.assertFalse(stats.exact_mann_whitney(distinct[:31], distinct[31:]))
        greater, less, two = stats.mann_whitney(large, small)
        flipped = stats.mann_whitney(small, large)
        self.assertEqual((greater, less, two), (flipped[1], flipped[0], flipped[2]))
        want = permutation_p_values(large[:9], small[:3])
        for g, w in zip(stats.mann_whitney(large[:9], small[:3]), want):
            self.assertAlmostEqual(g, w, places=12)

    def test_rank_sum_distribution_counts_every_subset(self):
        sizes = (1, 3, 2, 1, 4, 1)
        for n1 in range(0, sum(sizes) + 1):
            sums, counts = stats._rank_sum_distribution(sizes, n1)
            self.assertEqual(sum(counts), math.comb(sum(sizes), n1))
            self.assertEqual(list(sums), sorted(sums))

    def test_all_tied_is_not_significant(self):
        self.assertEqual(stats.mann_whitney([1.0] * 5, [1.0] * 5), (1.0, 1.0, 1.0))

    def test_empty_side_is_an_error(self):
        with self.assertRaises(ValueError):
            stats.mann_whitney_greater([], [1.0])

    def test_smallest_k_reaching_alpha(self):
        self.assertEqual(stats.smallest_k_reaching(0.01), 5)  # 2/252 <= 0.02 < 2/70
        self.assertEqual(stats.smallest_k_reaching(0.05), 3)  # 2/20 <= 0.1
        self.assertEqual(stats.smallest_k_reaching(0.02), 4)  # 2/70 <= 0.04


def enumerated_median_distribution(values):
    """Every one of the n^n equally likely bootstrap resamples, enumerated."""
    n = len(values)
    masses = {}
    for picks in itertools.product(range(n), repeat=n):
        m = statistics.median(values[i] for i in picks)
        masses[m] = masses.get(m, 0) + 1
    return {m: c / n**n for m, c in masses.items()}


class BootstrapTest(unittest.TestCase):
    def test_exact_median_distribution_matches_enumeration(self):
        for values in ([3.0, 1.0, 2.0], [1.0, 2.0, 4.0, 8.0], [1.0, 1.0, 2.0, 5.0], [1.0, 2.0, 3.0, 5.0, 7.0],
                       [0.5, 1.0, 2.0, 3.0, 5.0, 9.0]):
            want = enumerated_median_distribution(values)
            got = dict(stats.bootstrap_median_distribution(values))
            self.assertEqual(sorted(got), sorted(want), values)
            for m in want:
                self.assertAlmostEqual(got[m], want[m], places=12, msg=(values, m))

    def test_ci_agrees_with_a_monte_carlo_bootstrap(self):
        rng = random.Random(5)
        for n1, n2 in ((9, 9), (10, 8), (4, 7)):
            base = [1.0 + rng.gauss(0, 0.03) for _ in range(n1)]
            new = [1.05 + rng.gauss(0, 0.03) for _ in range(n2)]
            ratios = sorted(statistics.median(rng.choices(new, k=n2)) / statistics.median(rng.choices(base, k=n1))
                            for _ in range(20000))
            lo, hi = stats.bootstrap_ratio_ci(base, new)
            self.assertAlmostEqual(lo, ratios[500], delta=0.004)
            self.assertAlmostEqual(hi, ratios[19500], delta=0.004)

    def test_contains_the_true_ratio(self):
        rng = random.Random(5)
        base = [1.0 + rng.gauss(0, 0.02) for _ in range(9)]
        new = [1.1 + rng.gauss(0, 0.02) for _ in range(9)]
        lo, hi = stats.bootstrap_ratio_ci(base, new)
        self.assertLess(lo, 1.1)
        self.assertGreater(hi, 1.1)
        self.assertGreater(lo, 1.03)
        self.assertLess(hi, 1.17)

    def test_identical_constant_sides_give_a_point_interval(self):
        self.assertEqual(stats.bootstrap_ratio_ci([2.0] * 4, [3.0] * 4), (1.5, 1.5))


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


class NoiseAndAdviceTest(unittest.TestCase):
    def test_relative_mad(self):
        self.assertAlmostEqual(stats.relative_mad([1.0, 1.1, 0.9, 1.0, 1.2]), 0.1)
        self.assertEqual(stats.relative_mad([5.0]), 0.0)

    def test_minimum_effect(self):
        self.assertEqual(stats.minimum_effect(None), 0.02)
        self.assertEqual(stats.minimum_effect(0.001), 0.02)
        self.assertAlmostEqual(stats.minimum_effect(0.01), 0.03)

    def test_runs_to_narrow_a_ci_scale_with_the_square_of_the_width(self):
        self.assertEqual(stats.runs_to_narrow_ci(9, 0.04, 0.02), 36)
        self.assertEqual(stats.runs_to_narrow_ci(9, 0.021, 0.02), 10)  # never fewer than one more run
        with self.assertRaises(ValueError):
            stats.runs_to_narrow_ci(9, 0.04, 0.0)

    def test_runs_to_reach_significance_exceed_the_runs_that_did_not(self):
        for p in (0.03, 0.1, 0.4):
            self.assertGreater(stats.runs_to_reach_significance(9, p), 9)
        self.assertLess(stats.runs_to_reach_significance(9, 0.03), stats.runs_to_reach_significance(9, 0.3))
        self.assertIsNone(stats.runs_to_reach_significance(9, 1.0))


if __name__ == "__main__":
    unittest.main()


class RatioCiTest(unittest.TestCase):
    """The distribution-free CI of the ratio (Moses / Hodges-Lehmann) the gate uses."""

    def test_the_cut_follows_the_exact_null_distribution_of_u(self):
        # Tables of the Mann-Whitney test at two-sided 0.05: U <= 17 for 9 vs 9, <= 2 for 5 vs 5,
        # <= 0 for 4 vs 4; none for 3 vs 3 (2 / 20 > 0.05).
        self.assertEqual(stats._moses_rank(9, 9, 0.95), 18)
        self.assertEqual(stats._moses_rank(5, 5, 0.95), 3)
        self.assertEqual(stats._moses_rank(4, 4, 0.95), 1)
        self.assertIsNone(stats._moses_rank(3, 3, 0.95))
        self.assertEqual(sum(stats._u_counts(9, 9)), math.comb(18, 9))

    def test_the_interval_of_pairwise_ratios(self):
        base = [1.0 + 0.01 * i for i in range(9)]
        new = [1.1 * x for x in base]
        lo, hi = stats.ratio_ci(base, new)
        self.assertLess(lo, 1.1)
        self.assertGreater(hi, 1.1)
        ratios = sorted(y / x for x in base for y in new)
        self.assertAlmostEqual(lo, ratios[17])
        self.assertAlmostEqual(hi, ratios[-18])
        # 4 a side: the extreme ratios; 3 a side: the bootstrap's interval.
        lo, hi = stats.ratio_ci([1, 2, 3, 4], [2, 3, 4, 5])
        self.assertAlmostEqual(lo, 0.5)
        self.assertAlmostEqual(hi, 5.0)
        self.assertEqual(stats.ratio_ci([1, 2, 3], [2, 3, 4]), stats.bootstrap_ratio_ci([1, 2, 3], [2, 3, 4]))
