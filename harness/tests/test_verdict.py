"""The gate's decision rule (verdict.py): the CI must exclude 1.0, a confirmation meets the same
rule, the revert grade names the bound that fell short, and adaptive looks spend alpha so
that A/A sessions stay within it."""

import random
import unittest

from meshgate.gate import stats, verdict
from tests.test_gate_quality import simulate_runs


def measured(ratio, ci, p, runs=9, gate=0.02):
    base = [1.0 + 0.01 * ((i % 3) - 1) for i in range(runs)]
    return verdict.CaseVerdict(id="s/case", verdict="pass", ratio=ratio, ci=ci, p=p, min_effect=gate,
                               runs_base=runs, runs_new=runs, base_medians=base,
                               new_medians=[ratio * b for b in base])


class RuleTest(unittest.TestCase):
    def test_significant_past_the_gate_but_ci_containing_one_is_inconclusive(self):
        # The confirmation batch a user met: ratio 1.084, 95 % CI [0.989, 1.150], p 0.019.
        v = measured(1.084, (0.989, 1.150), 0.019)
        verdict.decide(v, q=0.019)
        self.assertEqual(v.verdict, "inconclusive")
        self.assertIn("CI contains 1.0", v.note)
        self.assertGreater(v.runs_needed, 9)

    def test_the_same_numbers_with_the_ci_past_one_are_a_regression(self):
        v = measured(1.084, (1.035, 1.150), 0.019)
        verdict.decide(v, q=0.019)
        self.assertEqual(v.verdict, "regression")
        self.assertEqual(v.alpha, stats.ALPHA)

    def test_an_improvement_needs_the_ci_below_one(self):
        v = measured(0.90, (0.85, 1.01), 0.004)
        verdict.decide(v, q=0.004)
        self.assertEqual(v.verdict, "inconclusive")
        v = measured(0.90, (0.85, 0.95), 0.004)
        verdict.decide(v, q=0.004)
        self.assertEqual(v.verdict, "improvement")

    def test_a_lower_alpha_at_a_later_look_is_stricter(self):
        v = measured(1.10, (1.05, 1.15), 0.015)
        verdict.decide(v, q=0.015, alpha=0.0025)
        self.assertEqual(v.verdict, "inconclusive")
        self.assertEqual(v.alpha, 0.0025)


class ConfirmationTest(unittest.TestCase):
    def flagged(self):
        v = measured(1.40, (1.035, 1.766), 0.0004)
        verdict.decide(v, q=0.0004)
        self.assertEqual(v.verdict, "regression")
        return v

    def test_a_confirmation_whose_ci_contains_one_confirms_nothing(self):
        v = self.flagged()
        second = measured(1.084, (0.989, 1.150), 0.019)
        verdict.decide(second, q=0.019)
        verdict.confirm(v, second)
        self.assertEqual(v.verdict, "inconclusive")
        self.assertFalse(v.confirmed)
        self.assertIn("its CI contains 1.0", v.note)
        self.assertEqual(v.confirm_ci, (0.989, 1.150))

    def test_the_same_verdict_again_confirms(self):
        v = self.flagged()
        second = measured(1.30, (1.10, 1.50), 0.0004)
        verdict.decide(second, q=0.0004)
        verdict.confirm(v, second)
        self.assertEqual((v.verdict, v.confirmed), ("regression", True))

    def test_a_failure_in_the_confirmation_is_a_correctness_verdict(self):
        v = self.flagged()
        second = verdict.CaseVerdict(id="s/case", verdict="correctness", note="pass -> error")
        verdict.confirm(v, second)
        self.assertEqual(v.verdict, "correctness")

    def test_no_row_in_the_confirmation_is_not_a_confirmation(self):
        v = self.flagged()
        verdict.confirm(v, None)
        self.assertEqual((v.verdict, v.confirmed), ("inconclusive", False))


class GradeTest(unittest.TestCase):
    def confirmed(self, ci, confirm_ci):
        v = measured(1.5, ci, 0.0001)
        verdict.decide(v, q=0.0001)
        v.confirmed, v.confirm_ci = True, confirm_ci
        return v

    def test_ci_past_the_gate_in_both_batches_is_revert_grade(self):
        v = self.confirmed((1.2, 1.8), (1.1, 1.9))
        verdict.grade(v)
        self.assertEqual(v.grade, "revert-grade")
        self.assertEqual(v.level(), "regression, revert-grade")

    def test_the_bound_that_fell_short_is_named(self):
        # The bisect a user met: first batch CI [1.016, 2.438] against a 1.020 bar.
        v = self.confirmed((1.016, 2.438), (1.2, 1.9))
        verdict.grade(v)
        self.assertEqual(v.grade, "not revert-grade")
        self.assertEqual(v.level(), "regression, not revert-grade")
        self.assertIn("first batch's 95 % CI [1.016, 2.438]", v.grade_note)
        self.assertIn("1.020", v.grade_note)
        v = self.confirmed((1.2, 1.8), (1.01, 1.9))
        verdict.grade(v)
        self.assertIn("confirmation batch's 95 % CI [1.010, 1.900]", v.grade_note)

    def test_other_verdicts_have_no_grade(self):
        v = measured(1.0, (0.99, 1.01), 0.9)
        verdict.decide(v, q=0.9)
        verdict.grade(v)
        self.assertIsNone(v.grade)
        self.assertEqual(v.level(), v.verdict)


class LooksTest(unittest.TestCase):
    def test_schedule_doubles_up_to_the_budget(self):
        self.assertEqual(verdict.look_schedule(9, 36), [9, 18, 36])
        self.assertEqual(verdict.look_schedule(15, 36), [15, 30, 36])
        self.assertEqual(verdict.look_schedule(9, 9), [9])

    def test_the_looks_share_alpha(self):
        for looks in (1, 2, 3, 5):
            alphas = verdict.look_alphas(0.01, looks)
            self.assertEqual(len(alphas), looks)
            self.assertAlmostEqual(sum(alphas), 0.01)
        self.assertEqual(verdict.look_alphas(0.01, 1), [0.01])
        self.assertEqual(verdict.look_alphas(0.01, 3), [0.005, 0.0025, 0.0025])


def adaptive_session(rng, factor, noise, k=9, max_runs=verdict.DEFAULT_MAX_RUNS, confirm=False):
    """One simulated case through the adaptive looks (and the confirmation), judged as `ab`
    judges it: per-run medians of simulated launches."""

    def batch(runs):
        base, new = [], []

        def measure_at(ids, n, alpha):
            extra = n - len(base)
            base.extend(stats.per_run_medians(simulate_runs(rng, 1.0, noise, extra)))
            new.extend(stats.per_run_medians(simulate_runs(rng, factor, noise, extra)))
            return {"c": verdict.judge(base, new, alpha=alpha)}

        return verdict.judge_adaptively(measure_at, ["c"], runs, max_runs)["c"]

    v = batch(k)
    if confirm and v.verdict in verdict.CONFIRMED_VERDICTS:
        verdict.confirm(v, batch(min(v.runs_base, v.runs_new)))
    return v


class AdaptiveRunsTest(unittest.TestCase):
    def test_a_a_false_alarms_stay_within_alpha_despite_the_looks(self):
        # 3 % run-to-run noise against the 2 % gate: most A/A cases are inconclusive at 9 runs
        # and about half of them get more runs, so the later looks really happen.
        rng = random.Random(31)
        trials = 500
        flags = {"regression": 0, "improvement": 0}
        extended = 0
        for _ in range(trials):
            v = adaptive_session(rng, 1.0, 0.03)
            flags[v.verdict] = flags.get(v.verdict, 0) + 1
            extended += v.looks > 1
        self.assertGreater(extended, trials // 5)
        # Each direction is flagged at most alpha of the time (Bonferroni over the looks); the
        # margin is three binomial standard deviations at alpha.
        margin = 3 * (stats.ALPHA * (1 - stats.ALPHA) / trials) ** 0.5
        for direction in ("regression", "improvement"):
            self.assertLessEqual(flags[direction] / trials, stats.ALPHA + margin, flags)

    def test_a_large_slowdown_in_heavy_noise_becomes_a_regression(self):
        # +57.7 % under 30 % run-to-run noise: at 9 runs the CI is as wide as [0.9, 2.6].
        rng = random.Random(5)
        trials = 100
        fixed = sum(adaptive_session(rng, 1.577, 0.30, max_runs=9, confirm=True).verdict == "regression"
                    for _ in range(trials))
        rng = random.Random(5)
        adaptive = sum(adaptive_session(rng, 1.577, 0.30, confirm=True).verdict == "regression" for _ in range(trials))
        # Two fixed batches of 9 confirm it in under half of the sessions; adaptive runs in both
        # batches in about two thirds.
        self.assertLess(fixed, 0.5 * trials)
        self.assertGreaterEqual(adaptive, 0.6 * trials)
        self.assertGreater(adaptive - fixed, 0.15 * trials, (fixed, adaptive))

if __name__ == "__main__":
    unittest.main()
