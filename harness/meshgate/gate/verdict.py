"""The gate's decision rule: the one place that decides `regression`, `improvement`, `pass`
and `inconclusive` for a timed case, for a first batch, a later adaptive look and a
confirmation batch alike. `compare`, `ab`, `bisect` (its steps and revert.md), the reports and
`nightly` all take their verdicts from here (docs/gate.md says the same in prose).

Per timed case, from per-run medians (one run = one process launch), with
gate = max(2 %, 3 x noise floor) and ratio = median(new) / median(base):
- REGRESSION (IMPROVEMENT): the ratio is past the gate in the slower (faster) direction, AND
  the change is significant: one-sided Mann-Whitney at alpha in its direction (the two-sided
  permutation p <= 2 alpha) and the Benjamini-Hochberg q of the two-sided p among the timed
  cases <= 0.05, AND the 95 % CI of the ratio (stats.ratio_ci) excludes 1.0.
- PASS is a claim too: runs enough that the test could have flagged a regression (5 a side
  at alpha = 0.01); the CI's upper bound <= 1 + gate; the gate no wider than `max_gate` (10 %:
  the largest regression a user accepts to miss), and neither is the gate the noise of these
  runs would set (3 x their relative MAD), since a calibration from a quieter day or the 2 %
  default is no licence; and the CI informative (lower bound >= 1 / (1 + max_gate)), so that
  very noisy runs that happen to come out fast do not pass. Every PASS says what it rules out.
- otherwise INCONCLUSIVE, with the reason and, where more runs would help, how many.

Confirmation (`ab`, `bisect`): a flagged case is re-run in a fresh interleaved batch and keeps
its verdict only when that batch, judged by this same rule, gives the same one; a confirmation
whose CI contains 1.0 therefore confirms nothing. An unconfirmed flag becomes inconclusive.

Adaptive runs (Pinpoint's "more runs" for an unknown): an inconclusive case whose estimated
need is within `max_runs` gets more interleaved runs, the count doubling at each look (9, 18,
36 ...), until the rule decides or the budget is spent. Each look is a new chance of a false
alarm, so the looks share alpha (Bonferroni over the looks): the first is judged at alpha / 2
and the other half is split evenly over the later ones. The chance that any look flags an A/A
case therefore stays <= alpha whatever the correlation between looks. `compare` is one look at
alpha.

Revert grade (bisect's culprit against its parent): a confirmed regression whose 95 % CI lies
entirely past 1 + gate in both batches. Two levels, one vocabulary: `regression` and
`regression, revert-grade`; a regression that is not revert-grade says which bound fell short.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Callable, Optional

from . import stats
from ..core.markup import pct

# Beyond this many runs per side, advice to run more is no advice: the machine is the problem.
PRACTICAL_RUNS = 100
# Verdicts that count only after a fresh batch repeats them.
CONFIRMED_VERDICTS = ("regression", "improvement")
# The default budget of adaptive runs per side (`--max-runs`): two doublings of the default 9.
DEFAULT_MAX_RUNS = 36


@dataclasses.dataclass
class CaseVerdict:
    id: str
    verdict: str
    ratio: Optional[float] = None  # median(new per-run medians) / median(base ...); > 1 is slower
    ci: Optional[tuple[float, float]] = None  # 95 % CI of the ratio (stats.ratio_ci)
    p: Optional[float] = None  # two-sided Mann-Whitney p
    q: Optional[float] = None  # Benjamini-Hochberg adjusted p
    min_effect: Optional[float] = None  # the gate
    rules_out: Optional[float] = None  # PASS: slowdowns at least this large are ruled out (CI upper - 1)
    wide_ci: bool = False  # PASS whose CI also admits a speed-up past the gate
    noise_floor: Optional[float] = None
    runs_base: int = 0
    runs_new: int = 0
    runs_needed: Optional[int] = None  # runs per side that would resolve an inconclusive case
    base_status: Optional[str] = None
    new_status: Optional[str] = None
    message: str = ""  # the new run's status message (why it failed, was skipped, ...)
    note: str = ""  # why this verdict, in words
    plan_base: Optional[list] = None
    plan_new: Optional[list] = None
    plan_changed: bool = False
    base_medians: list[float] = dataclasses.field(default_factory=list)
    new_medians: list[float] = dataclasses.field(default_factory=list)
    confirmed: Optional[bool] = None  # set by `meshgate ab` after a confirmation batch
    # The confirmation batch's own evidence (`meshgate ab`), beside the first batch's above.
    confirm_verdict: Optional[str] = None
    confirm_ratio: Optional[float] = None
    confirm_ci: Optional[tuple[float, float]] = None
    confirm_p: Optional[float] = None
    alpha: Optional[float] = None  # the level this verdict was judged at (lower at later adaptive looks)
    looks: int = 1  # how many times the case was judged: more than one when adaptive runs added runs
    # Revert grade (bisect's culprit against its parent only): "revert-grade", "not revert-grade",
    # or None where it was not assessed; grade_note says which bound fell short.
    grade: Optional[str] = None
    grade_note: str = ""
    # Judged between two separate runs (not one interleaved A/B) without --trust-separate-runs:
    # a regression or improvement by the numbers is held back as inconclusive, since a drift of
    # the machine between the runs reads the same; `separate_verdict` keeps what the rule said.
    separate_runs: bool = False
    separate_verdict: Optional[str] = None

    def level(self) -> str:
        """The verdict as every file of a report folder states it: a regression carries its
        revert grade where one was assessed; a timing verdict held back because the sides were
        separate runs says so."""
        if self.verdict == "regression" and self.grade:
            return f"regression, {self.grade}"
        if self.verdict == "inconclusive" and self.separate_verdict:
            return "inconclusive (separate runs)"
        return self.verdict

    def to_json(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        out["ci"] = list(self.ci) if self.ci else None
        out["confirm_ci"] = list(self.confirm_ci) if self.confirm_ci else None
        return out




def measure(v: CaseVerdict, base: list[float], new: list[float]) -> None:
    """Fills the ratio, its 95 % CI (the Mann-Whitney test's own, stats.ratio_ci) and the
    two-sided Mann-Whitney p-value."""
    v.ratio = stats.median(new) / stats.median(base)
    v.ci = stats.ratio_ci(base, new)
    v.p = stats.mann_whitney_two_sided(new, base)



def decide(v: CaseVerdict, q: Optional[float], alpha: float = stats.ALPHA, fdr_q: float = stats.FDR_Q,
           max_gate: float = stats.MAX_GATE) -> None:
    """The decision rule of the module docstring for one measured case (ratio, CI, p set);
    `q` is its Benjamini-Hochberg adjusted p among the comparison's timed cases."""
    v.q = q
    gate = v.min_effect
    lo, hi = v.ci
    slower = v.ratio >= 1.0
    past_gate = v.ratio >= 1.0 + gate if slower else v.ratio <= 1.0 / (1.0 + gate)
    significant = stats.significant(v.p, alpha) and q is not None and q <= fdr_q
    change = f"{'slower' if slower else 'faster'} by {pct(abs(v.ratio - 1))}"
    evidence = f"p = {v.p:.2g}, q = {q:.2g}, 95 % CI [{lo:.3f}, {hi:.3f}]"
    v.alpha = alpha
    excludes_one = lo > 1.0 if slower else hi < 1.0
    if past_gate and significant and excludes_one:
        v.verdict = "regression" if slower else "improvement"
        v.note = f"{change} (gate {pct(gate)}), {evidence}"
        return
    floor_lo = 1.0 / (1.0 + max_gate)
    # The noise these runs show, as a noise floor: a machine that noisy cannot support a PASS
    # even where a calibration (perhaps from a quieter day) or the 2 % default says otherwise.
    seen = stats.relative_mad([1.0 + r for r in stats.side_residuals(v.base_medians, v.new_medians)])
    noisy = stats.minimum_effect(seen) > max_gate
    # Runs too few for any split to be significant could not have flagged a regression either,
    # and their CI is too coarse to rule one out: one run a side has a CI of width zero.
    testable = stats.significant(stats.min_two_sided_p(v.runs_base, v.runs_new), alpha)
    if gate <= max_gate and not noisy and testable and hi <= 1.0 + gate and lo >= floor_lo:
        v.verdict = "pass"
        v.rules_out = max(0.0, hi - 1.0)
        v.wide_ci = lo < 1.0 / (1.0 + gate) and not (significant and not slower)
        claim = f"rules out a slowdown of {pct(v.rules_out)} or more" if hi > 1.0 else "rules out any slowdown"
        v.note = (v.note + "; " if v.note else "") + f"{change}, within the {pct(gate)} gate; {claim} ({evidence})"
        return
    v.verdict = "inconclusive"
    k = min(v.runs_base, v.runs_new)
    if gate > max_gate or (noisy and not past_gate):
        v.runs_needed = None
        if gate > max_gate and gate <= stats.MIN_EFFECT:
            why = f"the {pct(gate)} minimum effect is wider than --max-gate {pct(max_gate)}: no case can pass"
        else:
            floor = v.noise_floor if gate > max_gate else seen
            source = "calibrated noise floor" if gate > max_gate else "noise floor these runs show"
            why = (f"3 x the {source} {pct(floor or 0)} is wider than --max-gate {pct(max_gate)}: "
                   "more runs do not narrow it; quieten the machine or accept a wider gate")
    elif not testable:
        v.runs_needed = stats.smallest_k_reaching(alpha)
        why = f"{v.runs_base} vs {v.runs_new} runs can never reach alpha = {alpha}"
    elif past_gate and significant:
        # Significant and past the gate, yet the CI still reaches 1.0: the two measures of the
        # same runs disagree, and the rule takes the weaker. The CI narrows as 1/sqrt(k).
        near = v.ratio - lo if slower else hi - v.ratio
        v.runs_needed = stats.runs_to_narrow_ci(k, near, abs(v.ratio - 1.0))
        why = f"past the {pct(gate)} gate and significant, but the 95 % CI contains 1.0 ({evidence})"
    elif past_gate:
        v.runs_needed = stats.runs_to_reach_significance(k, v.p, alpha)
        why = f"past the {pct(gate)} gate but not significant ({evidence})"
    elif hi > 1.0 + gate:
        v.runs_needed = stats.runs_to_narrow_ci(k, hi - v.ratio, 1.0 + gate - v.ratio)
        why = f"the CI reaches {pct(hi - 1)} slower, past the {pct(gate)} gate ({evidence})"
    else:
        v.runs_needed = stats.runs_to_narrow_ci(k, v.ratio - lo, v.ratio - floor_lo)
        why = (f"the CI [{lo:.3f}, {hi:.3f}] is too wide to say anything: its lower bound is more than "
               f"--max-gate {pct(max_gate)} below 1")
    advice = f"; need ~{v.runs_needed} runs per side" if v.runs_needed else ""
    if v.runs_needed and v.runs_needed > PRACTICAL_RUNS:
        advice = (f"; it would take ~{v.runs_needed} runs per side, more than is practical: the runs "
                  "are too spread (see `meshgate calibrate` for this machine's noise)")
    v.note = f"{change}: {why}{advice}"



def judge(base: list[float], new: list[float], noise_floor: Optional[float] = None, alpha: float = stats.ALPHA,
          max_gate: float = stats.MAX_GATE) -> CaseVerdict:
    """The verdict of one timed case alone (its BH q is its p), from per-run medians: what a
    one-case `compare` says, without the results documents; simulations use it."""
    v = CaseVerdict(id="", verdict="pass", runs_base=len(base), runs_new=len(new), noise_floor=noise_floor,
                    min_effect=stats.minimum_effect(noise_floor), base_medians=list(base), new_medians=list(new))
    measure(v, v.base_medians, v.new_medians)
    decide(v, v.p, alpha, stats.FDR_Q, max_gate)
    return v




# --- Confirmation ----------------------------------------------------------------------------


def confirm(v: CaseVerdict, second: Optional[CaseVerdict]) -> None:
    """Applies a confirmation batch's verdict `second` (judged by this module's rule, or None
    when the batch produced no row) to the flagged verdict `v`: same verdict, confirmed; a
    correctness failure in the batch, correctness; anything else, inconclusive."""
    flagged = v.verdict
    v.confirmed = second is not None and second.verdict == flagged
    if second is not None:
        v.confirm_verdict, v.confirm_ratio, v.confirm_ci, v.confirm_p = second.verdict, second.ratio, second.ci, second.p
    if second is not None and second.ratio is not None and second.ci:
        evidence = f"ratio {second.ratio:.3f}, 95 % CI [{second.ci[0]:.3f}, {second.ci[1]:.3f}], p = {second.p:.2g}"
        if second.verdict != flagged and second.ci[0] <= 1.0 <= second.ci[1]:
            evidence += ": its CI contains 1.0"
    else:
        evidence = second.note if second is not None else "no result"
    if second is not None and second.verdict == "correctness":
        v.verdict, v.note = "correctness", f"confirmation batch: {second.note}"
    elif v.confirmed:
        v.note += f"; confirmed by a fresh batch ({evidence})"
    else:
        v.verdict = "inconclusive"
        v.note += f"; not confirmed by a fresh batch ({second.verdict if second else 'missing'}: {evidence})"


# --- Revert grade ----------------------------------------------------------------------------


def _ci_text(ci: Optional[tuple]) -> str:
    return f"[{ci[0]:.3f}, {ci[1]:.3f}]" if ci else "-"


def grade(v: CaseVerdict) -> None:
    """Sets the revert grade of a culprit-vs-parent verdict: a confirmed regression is
    revert-grade when its CI lies entirely past 1 + gate in both batches; otherwise
    `grade_note` says which bound fell short. Other verdicts get no grade."""
    if v.verdict != "regression":
        v.grade, v.grade_note = None, ""
        return
    gate = v.min_effect if v.min_effect is not None else stats.minimum_effect(None)
    edge = 1.0 + gate
    if not v.confirmed:
        short = "the regression was not confirmed by a fresh batch"
    elif not v.ci or v.ci[0] <= edge:
        short = (f"the first batch's 95 % CI {_ci_text(v.ci)} reaches below the gate "
                 f"({edge:.3f} = 1 + {pct(gate)}): not entirely past it")
    elif not v.confirm_ci or v.confirm_ci[0] <= edge:
        short = (f"the confirmation batch's 95 % CI {_ci_text(v.confirm_ci)} reaches below the gate "
                 f"({edge:.3f} = 1 + {pct(gate)}): not entirely past it")
    else:
        v.grade, v.grade_note = "revert-grade", ""
        return
    v.grade, v.grade_note = "not revert-grade", short


# --- Adaptive runs ---------------------------------------------------------------------------


def look_schedule(k: int, max_runs: int) -> list[int]:
    """Runs per side at each look: k, then doubling, the last one capped at max_runs."""
    looks = [k]
    while looks[-1] < max_runs:
        looks.append(min(max_runs, 2 * looks[-1]))
    return looks


def look_alphas(alpha: float, looks: int) -> list[float]:
    """The level of each look, summing to alpha: alpha with one look; else alpha / 2 for the
    first and the other half split evenly over the rest."""
    if looks <= 1:
        return [alpha]
    rest = alpha / 2.0 / (looks - 1)
    return [alpha / 2.0] + [rest] * (looks - 1)


def worth_more_runs(v: CaseVerdict, max_runs: int) -> bool:
    """Whether an adaptive look should add runs to `v`: inconclusive, with an estimated need
    within the budget and beyond the runs it has."""
    have = min(v.runs_base, v.runs_new)
    return (v.verdict == "inconclusive" and v.ratio is not None and v.runs_needed is not None
            and have < v.runs_needed <= max_runs)


# measure(ids, runs per side, alpha) -> the verdicts of `ids` with that many runs per side
MeasureFn = Callable[[list, int, float], dict]


def judge_adaptively(measure_at: MeasureFn, ids: list[str], k: int, max_runs: int,
                     alpha: float = stats.ALPHA) -> dict[str, CaseVerdict]:
    """The verdicts of `ids` after the adaptive looks: `measure_at(ids, n, alpha_j)` brings those
    cases to n runs per side and judges them at alpha_j. A case leaves the loop once the rule
    decides it or its need exceeds the budget."""
    schedule = look_schedule(k, max(k, max_runs))
    alphas = look_alphas(alpha, len(schedule))
    verdicts = dict(measure_at(list(ids), schedule[0], alphas[0]))
    for look, (n, level) in enumerate(zip(schedule[1:], alphas[1:]), start=2):
        pending = [i for i in ids if i in verdicts and worth_more_runs(verdicts[i], max_runs)]
        if not pending:
            break
        for case_id, v in measure_at(pending, n, level).items():
            v.looks = look
            v.note = f"look {look} of {len(schedule)} at {n} runs a side, alpha {level:.3g}: {v.note}"
            verdicts[case_id] = v
    return verdicts
