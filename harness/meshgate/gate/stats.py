"""Statistics for regression gating (docs/gate.md), standard library only: a pure module of
the gate layer.

The unit of replication is one run (one process launch); every function here takes per-run
statistics (usually per-run medians), never raw iteration samples, because iterations inside
one process are not independent of each other.

Everything that decides is exact where an exact answer is cheap:
- Mann-Whitney p-values come from the permutation distribution of the rank sum, mid-ranks for
  ties, whenever there are ties or few runs (see EXACT_MWU_MAX_N; the normal
  approximation misstates small tied samples badly: 4 vs 4 with ties gave p = 0.0066 where no
  split can go below 1/70);
- the confidence interval of the ratio is the distribution-free interval that goes with the
  Mann-Whitney test (Moses; the Hodges-Lehmann interval of the shift of log times): the order
  statistics of the m x n pairwise log ratios that the exact null distribution of U puts at the
  95 % level, so its coverage is exact for a change that scales every run's time alike. It
  replaced the percentile bootstrap of the ratio of the two medians, whose interval is wider
  (a median of 9 runs carries about two thirds of the information the pairwise differences
  do) and over-covers at small k (3.5 % outside instead of 5 % on 9 quiet runs a side): that
  width alone made 11 % of quiet no-change A/Bs inconclusive. Where too few runs make no order
  statistic reach the level (3 a side or fewer), the exact bootstrap interval still serves.
"""

from __future__ import annotations

import bisect
import math
import statistics
from functools import lru_cache
from typing import Optional, Sequence

# Decision defaults of docs/gate.md: MWU at alpha = 0.01, BH at q = 0.05, 2 % minimum effect,
# minimum effect = max(2 %, 3 x noise floor), 80 % power target, PASS only when the gate is at
# most 10 % (the largest regression a user accepts to miss).
ALPHA = 0.01
FDR_Q = 0.05
MIN_EFFECT = 0.02
NOISE_FLOOR_FACTOR = 3.0
TARGET_POWER = 0.8
MAX_GATE = 0.10
CI_LEVEL = 0.95
# Mann-Whitney p-values are exact permutation ones (docs/gate.md: with ties or at most
# 10 runs a side, never the normal approximation) up to EXACT_MWU_MAX_N runs in total, whenever
# one side has at most EXACT_MWU_SMALL_SIDE runs, and with ties up to EXACT_MWU_TIES_MAX_N runs
# in total (100 a side, where more runs stop being practical advice: verdict.PRACTICAL_RUNS;
# the exact programme takes about 2 s there). Beyond these bounds the tie-corrected normal
# approximation, accurate at that size, is used.
EXACT_MWU_MAX_N = 60
EXACT_MWU_SMALL_SIDE = 10
EXACT_MWU_TIES_MAX_N = 200

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
    """MAD / median: the noise floor of docs/gate.md when given A/A per-run medians."""
    m = median(values)
    if m == 0:
        return 0.0
    return mad(values) / abs(m)


def side_residuals(*sides: Sequence[float]) -> list[float]:
    """Each side's values relative to that side's median, pooled: the run-to-run noise with
    the difference between the sides taken out."""
    out: list[float] = []
    for values in sides:
        center = median(values) if values else 0.0
        if center > 0:
            out += [v / center - 1.0 for v in values]
    return out


def per_run_medians(runs: Sequence[Sequence[float]]) -> list[float]:
    """Median of each run's timed iterations; runs without iterations are dropped."""
    return [median(r) for r in runs if r]


# --- Mann-Whitney U, exact permutation distribution ------------------------------------------


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


def _tie_groups(x: Sequence[float], y: Sequence[float]) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """Pooled values in ascending order as groups of equal values: (group sizes, x's count per group)."""
    tagged = sorted([(v, 0) for v in x] + [(v, 1) for v in y])
    sizes: list[int] = []
    from_x: list[int] = []
    previous = None
    for value, side in tagged:
        if not sizes or value != previous:
            sizes.append(0)
            from_x.append(0)
            previous = value
        sizes[-1] += 1
        from_x[-1] += side == 0
    return tuple(sizes), tuple(from_x)


def _doubled_midranks(sizes: Sequence[int]) -> list[int]:
    """Twice the mid-rank of each tie group (integers, so sums compare exactly)."""
    ranks, start = [], 0
    for t in sizes:
        ranks.append(2 * start + t + 1)  # 2 x mean of the ranks start+1 .. start+t
        start += t
    return ranks


@lru_cache(maxsize=256)
def _rank_sum_distribution(sizes: tuple[int, ...], n1: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """Permutation distribution of the doubled rank sum of a size-n1 sample drawn without
    replacement from tie groups of `sizes`: (sorted sums, number of subsets giving each).

    Dynamic programme over the groups: taking c of a group's t members adds c x its doubled
    mid-rank and multiplies the count by C(t, c). Each row (subsets of one size) is a
    polynomial in the sum, packed into one integer with a fixed-width slot per sum that no
    count can overflow, so a whole row shifts and adds at once.
    """
    ranks = _doubled_midranks(sizes)
    width = (math.comb(sum(sizes), n1).bit_length() + 8) // 8  # bytes per slot
    bits = 8 * width
    rows = [0] * (n1 + 1)
    rows[0] = 1
    taken_before = 0
    for t, r in zip(sizes, ranks):
        for chosen in range(min(n1, taken_before + t), 0, -1):
            row = rows[chosen]
            for c in range(1, min(t, chosen) + 1):
                if rows[chosen - c]:
                    row += (rows[chosen - c] * math.comb(t, c)) << (c * r * bits)
            rows[chosen] = row
        taken_before += t
    packed = rows[n1].to_bytes((rows[n1].bit_length() + bits - 1) // bits * width, "little")
    sums, counts = [], []
    for s in range(len(packed) // width):
        count = int.from_bytes(packed[s * width:(s + 1) * width], "little")
        if count:
            sums.append(s)
            counts.append(count)
    return tuple(sums), tuple(counts)


@lru_cache(maxsize=256)
def _cumulative(sizes: tuple[int, ...], n1: int) -> tuple[tuple[int, ...], tuple[int, ...], int]:
    sums, counts = _rank_sum_distribution(sizes, n1)
    running, cum = 0, []
    for c in counts:
        running += c
        cum.append(running)
    return sums, tuple(cum), running


def _exact_p_values(x: Sequence[float], y: Sequence[float]) -> tuple[float, float, float]:
    if len(x) > len(y):  # the programme grows with the drawn sample: draw the smaller side
        greater, less, two = _exact_p_values(y, x)
        return less, greater, two
    sizes, from_x = _tie_groups(x, y)
    ranks = _doubled_midranks(sizes)
    n1, n = len(x), len(x) + len(y)
    observed = sum(c * r for c, r in zip(from_x, ranks))
    sums, cum, total = _cumulative(sizes, n1)

    def at_most(s: int) -> int:  # subsets with sum <= s
        i = bisect.bisect_right(sums, s)
        return cum[i - 1] if i else 0

    greater = (total - at_most(observed - 1)) / total
    less = at_most(observed) / total
    center = n1 * (n + 1)  # doubled expected rank sum
    distance = abs(observed - center)
    two = (at_most(center - distance) + total - at_most(center + distance - 1)) / total
    return greater, less, min(1.0, two)


def _normal_p_values(x: Sequence[float], y: Sequence[float]) -> tuple[float, float, float]:
    n1, n2 = len(x), len(y)
    n = n1 + n2
    u = mann_whitney_u(x, y)
    sizes, _ = _tie_groups(x, y)
    tie_term = sum(t**3 - t for t in sizes)
    variance = n1 * n2 / 12.0 * ((n + 1) - tie_term / (n * (n - 1)))
    if variance <= 0:
        return 1.0, 1.0, 1.0
    sd = math.sqrt(variance)
    z = statistics.NormalDist()
    mean = n1 * n2 / 2.0
    greater = 1.0 - z.cdf((u - mean - 0.5) / sd)
    less = z.cdf((u - mean + 0.5) / sd)
    two = min(1.0, 2.0 * (1.0 - z.cdf(max(0.0, abs(u - mean) - 0.5) / sd)))
    return greater, less, two


def mann_whitney(x: Sequence[float], y: Sequence[float]) -> tuple[float, float, float]:
    """Mann-Whitney p-values of x against y: (x tends to be larger, x smaller, two-sided).

    Exact permutation p-values (mid-ranks for ties) where `exact_mann_whitney` says so; the
    tie-corrected normal approximation with continuity correction beyond. The two-sided one
    counts the splits whose rank sum is at least as far from its mean as the observed one.
    """
    n1, n2 = len(x), len(y)
    if n1 == 0 or n2 == 0:
        raise ValueError(f"Mann-Whitney needs samples on both sides, got {n1} and {n2}")
    if exact_mann_whitney(x, y):
        return _exact_p_values(x, y)
    return _normal_p_values(x, y)


def exact_mann_whitney(x: Sequence[float], y: Sequence[float]) -> bool:
    """Whether `mann_whitney` computes the exact permutation p-values for these samples."""
    n = len(x) + len(y)
    if n <= EXACT_MWU_MAX_N or min(len(x), len(y)) <= EXACT_MWU_SMALL_SIDE:
        return True
    return n <= EXACT_MWU_TIES_MAX_N and len(set(x) | set(y)) < n


def mann_whitney_greater(x: Sequence[float], y: Sequence[float]) -> float:
    """One-sided p-value for H1: x tends to be larger than y."""
    return mann_whitney(x, y)[0]


def mann_whitney_two_sided(x: Sequence[float], y: Sequence[float]) -> float:
    return mann_whitney(x, y)[2]


def min_two_sided_p(n1: int, n2: int) -> float:
    """Smallest two-sided p-value possible with these sample sizes (complete separation)."""
    return min(1.0, 2.0 / math.comb(n1 + n2, n1))


def significant(p_two: float, alpha: float = ALPHA) -> bool:
    """The per-case test of docs/gate.md: one-sided at alpha in the direction of the change,
    which for a two-sided p-value of a symmetric permutation distribution is p_two <= 2 alpha.
    A/A runs are then flagged slower at most alpha of the time and faster at most alpha."""
    return p_two <= 2.0 * alpha


def smallest_k_reaching(alpha: float = ALPHA) -> int:
    """Fewest runs per side for which complete separation can be significant (5 for 0.01)."""
    k = 2
    while not significant(min_two_sided_p(k, k), alpha):
        k += 1
    return k


# --- Bootstrap of the median ratio, computed exactly -----------------------------------------


def _binomial_tail(n: int, p: float, at_least: int) -> float:
    """P(Binomial(n, p) >= at_least)."""
    if at_least <= 0:
        return 1.0
    if at_least > n:
        return 0.0
    if p >= 1.0:
        return 1.0
    if p <= 0.0:
        return 0.0
    return sum(math.comb(n, i) * p**i * (1 - p) ** (n - i) for i in range(at_least, n + 1))


def _binomial_pmf(n: int, p: float, i: int) -> float:
    if p <= 0.0:
        return 1.0 if i == 0 else 0.0
    if p >= 1.0:
        return 1.0 if i == n else 0.0
    return math.comb(n, i) * p**i * (1 - p) ** (n - i)


@lru_cache(maxsize=64)
def _median_index_weights(n: int) -> tuple[tuple[int, int, float], ...]:
    """Distribution of the median of a bootstrap resample of n sorted values by position:
    (i, j, probability) meaning median = (x_i + x_j) / 2 (0-based positions, i == j for odd n).

    With N_a = the number of the n draws among the a smallest values (Binomial(n, a/n)):
    odd n = 2m+1: median <= x_a  iff  N_a >= m+1;
    even n = 2m: the m-th and (m+1)-th order statistics (L, U) of the resample satisfy
    P(L <= x_a, U <= x_b) = P(N_a >= m+1) + P(N_a = m) * (1 - (1 - (b-a)/(n-a))^(n-m)) for
    a <= b (given N_a = m, at least one of the other n-m draws must land in (x_a, x_b]), and
    the joint mass follows by differencing.
    """
    if n % 2:
        m = n // 2
        cdf = [_binomial_tail(n, a / n, m + 1) for a in range(n + 1)]
        return tuple((a - 1, a - 1, cdf[a] - cdf[a - 1]) for a in range(1, n + 1) if cdf[a] > cdf[a - 1])
    m = n // 2

    def joint(a: int, b: int) -> float:  # P(L <= x_a, U <= x_b) with 1-based a, b
        a = min(a, b)
        if a <= 0:
            return 0.0
        value = _binomial_tail(n, a / n, m + 1)
        if b > a and a < n:
            value += _binomial_pmf(n, a / n, m) * (1.0 - (1.0 - (b - a) / (n - a)) ** (n - m))
        return value

    out = []
    for a in range(1, n + 1):
        for b in range(a, n + 1):
            mass = joint(a, b) - joint(a - 1, b) - joint(a, b - 1) + joint(a - 1, b - 1)
            if mass > 1e-15:
                out.append((a - 1, b - 1, mass))
    return tuple(out)


def bootstrap_median_distribution(values: Sequence[float]) -> list[tuple[float, float]]:
    """The exact bootstrap distribution of the sample median: [(value, probability)] sorted."""
    xs = sorted(values)
    masses: dict[float, float] = {}
    for i, j, p in _median_index_weights(len(xs)):
        v = (xs[i] + xs[j]) / 2.0
        masses[v] = masses.get(v, 0.0) + p
    return sorted(masses.items())


def bootstrap_ratio_ci(base: Sequence[float], new: Sequence[float], confidence: float = CI_LEVEL) -> tuple[float, float]:
    """Percentile bootstrap CI of median(new) / median(base), each side's runs resampled
    independently, from the exact bootstrap distribution (no Monte Carlo error, no seed)."""
    if not base or not new:
        raise ValueError("bootstrap needs runs on both sides")
    ratios: list[tuple[float, float]] = []
    for b, pb in bootstrap_median_distribution(base):
        for v, pn in bootstrap_median_distribution(new):
            ratios.append((v / b if b else math.inf, pb * pn))
    ratios.sort()
    tail = (1.0 - confidence) / 2.0
    lo = hi = None
    running = 0.0
    for r, p in ratios:
        running += p
        if lo is None and running >= tail - 1e-12:
            lo = r
        if running >= 1.0 - tail - 1e-12:
            hi = r
            break
    return lo, hi if hi is not None else ratios[-1][0]


@lru_cache(maxsize=None)
def _u_counts(m: int, n: int) -> tuple[int, ...]:
    """How many of the C(m + n, m) arrangements of two untied samples give each value of the
    Mann-Whitney U (0 .. m n): the coefficients of the Gaussian binomial, by the recursion
    over the largest value (it belongs to one sample or the other)."""
    # rows[j][u]: counts for sizes (i, j) as i grows; start with i = 0.
    rows = [[1] for _ in range(n + 1)]
    for i in range(1, m + 1):
        new_rows = [[1]]
        for j in range(1, n + 1):
            left, down = new_rows[j - 1], rows[j]  # sizes (i, j - 1) and (i - 1, j)
            size = i * j + 1
            counts = [0] * size
            for u, c in enumerate(down):       # the largest value is the first sample's: U grows by j
                counts[u + j] += c
            for u, c in enumerate(left):       # ... the second sample's: U unchanged
                counts[u] += c
            new_rows.append(counts)
        rows = new_rows
    return tuple(rows[n])


def _moses_rank(m: int, n: int, confidence: float) -> Optional[int]:
    """The number C of pairwise differences cut from each end of the sorted m x n differences
    for a two-sided `confidence` interval: the largest C with P(U <= C - 1) <= (1 - confidence)
    / 2 under the null; None when even the extreme differences do not reach the level."""
    tail = (1.0 - confidence) / 2.0
    if m + n <= EXACT_MWU_MAX_N:
        counts = _u_counts(min(m, n), max(m, n))
        total = math.comb(m + n, m)
        running, c = 0, 0
        while c < len(counts) and (running + counts[c]) / total <= tail + 1e-12:
            running += counts[c]
            c += 1
        return c if c > 0 else None
    z = statistics.NormalDist().inv_cdf(1.0 - tail)
    c = math.floor(m * n / 2.0 - z * math.sqrt(m * n * (m + n + 1) / 12.0))
    return c if c > 0 else None


def ratio_ci(base: Sequence[float], new: Sequence[float], confidence: float = CI_LEVEL) -> tuple[float, float]:
    """The distribution-free CI of the ratio new / base (module documentation): exp of the
    C-th smallest and C-th largest of the m x n differences log(new_j) - log(base_i), with C
    from the exact null distribution of U; the exact bootstrap interval of the median ratio
    where too few runs reach the level, or a time is not positive."""
    if not base or not new:
        raise ValueError("a CI needs runs on both sides")
    c = _moses_rank(len(base), len(new), confidence)
    if c is None or min(base) <= 0 or min(new) <= 0:
        return bootstrap_ratio_ci(base, new, confidence)
    logs_b = [math.log(x) for x in base]
    diffs = sorted(math.log(y) - lb for y in new for lb in logs_b)
    return math.exp(diffs[c - 1]), math.exp(diffs[len(diffs) - c])


# --- Many cases, gates and advice -------------------------------------------------------------


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


def runs_to_narrow_ci(k: int, half_width: float, allowed: float) -> int:
    """Runs per side for a CI whose upper half-width is `half_width` at k runs to shrink to
    `allowed` (CI widths scale as 1/sqrt(k))."""
    if allowed <= 0:
        raise ValueError("no CI width fits: the observed ratio itself is past the gate")
    return max(k + 1, math.ceil(k * (half_width / allowed) ** 2))


def runs_to_reach_significance(k: int, p_two: float, alpha: float = ALPHA, power: float = TARGET_POWER) -> Optional[int]:
    """Runs per side for an effect of the observed size to become significant (one-sided
    alpha in its direction) with `power`: the z-score of a fixed effect grows as sqrt(k).
    None when the runs show no difference at all (p = 1)."""
    if p_two >= 1.0:
        return None
    z = statistics.NormalDist()
    observed = z.inv_cdf(1.0 - p_two / 2.0)
    if observed <= 0:
        return None
    needed = z.inv_cdf(1.0 - alpha) + z.inv_cdf(power)
    return max(k + 1, smallest_k_reaching(alpha), math.ceil(k * (needed / observed) ** 2))
