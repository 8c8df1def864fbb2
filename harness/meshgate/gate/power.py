"""The power and calibration math of the gate (docs/gate.md), pure: how likely the whole
decision rule, confirmation included, is to catch a slowdown of a given size on a machine's
measured noise (detection_power, minimum_detectable_regression), the one-sided upper bound of a
rate seen in few trials (upper_bound), and what A/A sessions of one build say per case
(judge_sessions). `meshgate calibrate` (calibrate.py) runs the sessions and stores the
results."""

from __future__ import annotations

import math
import random
import statistics
from typing import Optional, Sequence

from . import stats
from . import verdict as _verdict
from .compare import compare_results

SIMULATION_TRIALS = 400


def _smoothing(residuals: Sequence[float]) -> float:
    """Kernel bandwidth for a smoothed bootstrap of the residuals (Silverman's rule on a
    robust spread): enough to break ties, small against the noise itself."""
    spread = stats.mad(residuals) * stats.MAD_TO_SIGMA
    if spread <= 0:
        spread = statistics.stdev(residuals)
    return 0.9 * spread * len(residuals) ** -0.2


def detection_power(residuals: Sequence[float], effect: float, k: int, noise_floor: Optional[float],
                    trials: int, seed: int, max_gate: float = stats.MAX_GATE) -> float:
    """Share of simulated A/B sessions with a slowdown `effect` that end in a confirmed
    regression: first batch and confirmation batch both REGRESSION by the gate's rule."""
    rng = random.Random(seed)
    h = _smoothing(residuals)
    pool = list(residuals)

    def side(factor: float) -> list[float]:
        return [factor * (1.0 + rng.choice(pool) + rng.gauss(0.0, h)) for _ in range(k)]

    caught = 0
    for _ in range(trials):
        if all(_verdict.judge(side(1.0), side(1.0 + effect), noise_floor, max_gate=max_gate).verdict == "regression"
               for _batch in range(2)):
            caught += 1
    return caught / trials


def minimum_detectable_regression(residuals: Sequence[float], k: int, noise_floor: Optional[float],
                                  trials: int = SIMULATION_TRIALS, seed: int = 0,
                                  max_gate: float = stats.MAX_GATE, power: float = stats.TARGET_POWER,
                                  resolution: float = 0.0025) -> Optional[float]:
    """Smallest slowdown (to `resolution`) caught with `power` after confirmation, by
    bisection over the effect with common random numbers; None beyond a doubling (100 %)."""
    if len(residuals) < 4 or k < stats.smallest_k_reaching():
        return None
    gate = stats.minimum_effect(noise_floor)
    lo, hi = gate, 1.0
    if detection_power(residuals, hi, k, noise_floor, trials, seed, max_gate) < power:
        return None
    if detection_power(residuals, lo, k, noise_floor, trials, seed, max_gate) >= power:
        return lo
    while hi - lo > resolution:
        mid = (lo + hi) / 2.0
        if detection_power(residuals, mid, k, noise_floor, trials, seed, max_gate) >= power:
            hi = mid
        else:
            lo = mid
    return hi


def judge_sessions(session_docs: list[dict[str, dict]], confirmations: list[dict[str, dict]],
                   floors: dict[str, float], max_gate: float) -> dict[str, dict[str, int]]:
    """Per case: sessions, first-batch flags, confirmed false alarms, passes (docs/gate.md)."""
    out: dict[str, dict[str, int]] = {}
    for docs, again in zip(session_docs, confirmations):
        first = compare_results(docs["a"], docs["b"], floors, max_gate=max_gate)
        second = ({v.id: v for v in compare_results(again["a"], again["b"], floors, max_gate=max_gate).cases}
                  if again else {})
        for v in first.cases:
            entry = out.setdefault(v.id, {"sessions": 0, "flagged": 0, "false_alarms": 0, "passes": 0})
            entry["sessions"] += 1
            entry["passes"] += v.verdict == "pass"
            if v.verdict in _verdict.CONFIRMED_VERDICTS:
                entry["flagged"] += 1
                confirmed = second.get(v.id)
                entry["false_alarms"] += confirmed is not None and confirmed.verdict == v.verdict
    return out


def upper_bound(count: int, n: int, confidence: float = 0.95) -> float:
    """One-sided Clopper-Pearson upper bound of a rate seen `count` times in n (by bisection)."""
    if n == 0:
        return 1.0
    if count >= n:
        return 1.0
    tail = 1.0 - confidence
    lo, hi = count / n, 1.0
    for _ in range(60):
        mid = (lo + hi) / 2.0
        p_at_most = sum(math.comb(n, i) * mid**i * (1 - mid) ** (n - i) for i in range(count + 1))
        if p_at_most > tail:
            lo = mid
        else:
            hi = mid
    return hi
