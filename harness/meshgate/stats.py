"""Statistics for regression gating (spec/gating.md), standard library only.

The unit of replication is one run (one process launch); every function here takes per-run
statistics (usually per-run medians), never raw iteration samples, because iterations inside
one process are not independent of each other.
"""

from __future__ import annotations

import math
import random
import statistics
from functools import lru_cache
from typing import Optional, Sequence

# Decision defaults of spec/gating.md: MWU at alpha = 0.01, BH at q = 0.05, 2 % minimum effect,
# minimum effect = max(2 %, 3 x noise floor), >= 2000 bootstrap resamples, 80 % power target.
ALPHA = 0.01
FDR_Q = 0.05
MIN_EFFECT = 0.02
NOISE_FLOOR_FACTOR = 3.0
BOOTSTRAP_RESAMPLES = 2000
TARGET_POWER = 0.8
# Exact MWU p-values are used up to this many runs in total (both sides, no ties); beyond it
# the normal approximation is accurate and cheaper.
EXACT_MWU_MAX_N = 50

# A MAD of a normal sample is 0.6745 sigma; this turns a MAD into a sigma estimate.
MAD_TO_SIGMA = 1.4826


def median(values: Sequence[float]) -> float:
    if not values:
        raise ValueError("median of an empty sequence")
    return statistics.median(values)


def mad(values: Sequence[float]) -> float:
    """Median absolute deviation from the median (unscaled)."""
    m = median(values)
    return median([abs(v - m) for v in values])


def relative_mad(values: Sequence[float]) -> float:
    """MAD / median: the noise floor of spec/gating.md when given A/A per-run medians."""
    m = median(values)
    if m == 0:
        return 0.0
    return mad(values) / abs(m)


def per_run_medians(runs: Sequence[Sequence[float]]) -> list[float]:
    """Median of each run's timed iterations; runs without iterations are dropped."""
    return [median(r) for r in runs if r]


@lru_cache(maxsize=None)
def _mwu_counts(n1: int, n2: int) -> tuple[int, ...]:
    """Number of orderings of n1 + n2 distinct values giving each U in 0..n1*n2.

    U counts pairs (x_i, y_j) with x_i > y_j. Recurrence over the largest value: it belongs
    to x (adds n2 to U) or to y (adds nothing).
    """
    if n1 == 0 or n2 == 0:
        return (1,)
    with_x = _mwu_counts(n1 - 1, n2)
    with_y = _mwu_counts(n1, n2 - 1)
    size = n1 * n2 + 1
    out = [0] * size
    for u, c in enumerate(with_x):
        out[u + n2] += c
    for u, c in enumerate(with_y):
        out[u] += c
    return tuple(out)


def mann_whitney_u(x: Sequence[float], y: Sequence[float]) -> float:
    """U statistic of x against y: pairs with x_i > y_j, ties counted as one half."""
    u = 0.0
    for a in x:
        for b in y:
            if a > b:
                u += 1.0
            elif a == b:
                u += 0.5
    return u


def mann_whitney_greater(x: Sequence[float], y: Sequence[float]) -> float:
    """One-sided Mann-Whitney p-value for H1: x tends to be larger than y.

    Exact distribution when there are no ties and the samples are small; otherwise the normal
    approximation with tie-corrected variance and a continuity correction.
    """
    n1, n2 = len(x), len(y)
    if n1 == 0 or n2 == 0:
        raise ValueError(f"Mann-Whitney needs samples on both sides, got {n1} and {n2}")
    u = mann_whitney_u(x, y)
    pooled = list(x) + list(y)
    has_ties = len(set(pooled)) < len(pooled)
    if not has_ties and n1 + n2 <= EXACT_MWU_MAX_N:
        counts = _mwu_counts(n1, n2)
        total = math.comb(n1 + n2, n1)
        upper = sum(counts[math.ceil(u) :])
        return upper / total
    n = n1 + n2
    tie_term = 0
    for v in set(pooled):
        t = pooled.count(v)
        tie_term += t**3 - t
    variance = n1 * n2 / 12.0 * ((n + 1) - tie_term / (n * (n - 1)))
    if variance <= 0:
        return 1.0
    z = (u - n1 * n2 / 2.0 - 0.5) / math.sqrt(variance)
    return 1.0 - statistics.NormalDist().cdf(z)


def min_achievable_p(n1: int, n2: int) -> float:
    """Smallest one-sided MWU p-value possible with these sample sizes (complete separation)."""
    return 1.0 / math.comb(n1 + n2, n1)


def bootstrap_ratio_ci(
    base: Sequence[float],
    new: Sequence[float],
    seed: int = 0,
    resamples: int = BOOTSTRAP_RESAMPLES,
    confidence: float = 0.95,
) -> tuple[float, float]:
    """Percentile bootstrap CI of median(new) / median(base), resampling each side's runs."""
    if not base or not new:
        raise ValueError("bootstrap needs runs on both sides")
    rng = random.Random(seed)
    nb, nn = len(base), len(new)
    ratios = []
    for _ in range(resamples):
        b = statistics.median([base[rng.randrange(nb)] for _ in range(nb)])
        n = statistics.median([new[rng.randrange(nn)] for _ in range(nn)])
        ratios.append(n / b if b else math.inf)
    ratios.sort()
    tail = (1.0 - confidence) / 2.0
    lo = ratios[int(math.floor(tail * (resamples - 1)))]
    hi = ratios[int(math.ceil((1.0 - tail) * (resamples - 1)))]
    return lo, hi


def benjamini_hochberg(pvalues: Sequence[Optional[float]]) -> list[Optional[float]]:
    """BH-adjusted p-values (q-values) in input order; None entries stay None and do not count."""
    indexed = [(p, i) for i, p in enumerate(pvalues) if p is not None]
    m = len(indexed)
    out: list[Optional[float]] = [None] * len(pvalues)
    if m == 0:
        return out
    indexed.sort()
    running = 1.0
    for rank in range(m, 0, -1):
        p, i = indexed[rank - 1]
        running = min(running, p * m / rank)
        out[i] = running
    return out


def minimum_effect(noise_floor: Optional[float]) -> float:
    """max(2 %, 3 x noise floor); the floor alone when no calibration exists."""
    if noise_floor is None:
        return MIN_EFFECT
    return max(MIN_EFFECT, NOISE_FLOOR_FACTOR * noise_floor)


def smallest_k_reaching(alpha: float = ALPHA) -> int:
    """Fewest runs per side for which complete separation reaches alpha (5 for 0.01)."""
    k = 2
    while min_achievable_p(k, k) > alpha:
        k += 1
    return k


def runs_needed(
    relative_sigma: float, effect: float, alpha: float = ALPHA, power: float = TARGET_POWER
) -> int:
    """Runs per side for a one-sided MWU to detect `effect` with `power`.

    Normal-theory sample size scaled by the asymptotic relative efficiency of MWU against the
    t-test (3 / pi), never below the smallest k that can reach alpha at all.
    """
    floor = smallest_k_reaching(alpha)
    if effect <= 0:
        return floor
    if relative_sigma <= 0:
        return floor
    z = statistics.NormalDist()
    za, zb = z.inv_cdf(1 - alpha), z.inv_cdf(power)
    n = 2.0 * ((za + zb) * relative_sigma / effect) ** 2 * math.pi / 3.0
    return max(floor, int(math.ceil(n)))


def minimum_detectable_effect(
    relative_sigma: float, k: int, alpha: float = ALPHA, power: float = TARGET_POWER
) -> float:
    """Smallest relative slowdown detected with `power` at k runs per side (inverse of runs_needed)."""
    if k < smallest_k_reaching(alpha):
        return math.inf
    z = statistics.NormalDist()
    za, zb = z.inv_cdf(1 - alpha), z.inv_cdf(power)
    return (za + zb) * relative_sigma * math.sqrt(2.0 * math.pi / (3.0 * k))


def relative_sigma(*sides: Sequence[float]) -> float:
    """Pooled robust run-to-run spread: MAD-based sigma / median, averaged over the sides."""
    spreads = [relative_mad(s) * MAD_TO_SIGMA for s in sides if len(s) >= 2]
    if not spreads:
        return 0.0
    return sum(spreads) / len(spreads)
