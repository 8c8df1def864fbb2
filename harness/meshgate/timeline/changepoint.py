"""Change points in a nightly series (docs/gate.md), standard library only.

Two stages:

1. E-divisive means (Matteson & James 2014, with the energy distance |x - y|, alpha = 1), as
   Apache Otava (formerly Hunter) and MongoDB's signal-processing-algorithms use it. Inside a
   segment the candidate split tau maximises

       Q(tau) = m k / (m + k) * (2/(m k) sum|x_i - y_j| - sum_{i<i'}|x_i - x_i'| / C(m, 2)
                                                       - sum_{j<j'}|y_j - y_j'| / C(k, 2))

   (m points left of tau, k right of it, the right end being the segment's end). The best
   candidate over all current segments is tested by permutation: every current segment is
   shuffled on its own and the largest Q over all of them is recorded; p = (b + 1) / (N + 1)
   where b of the N permutations reach the observed Q. A significant candidate splits its
   segment and the search repeats (hierarchical, top-down) until the best candidate is not
   significant. N = 1999 permutations resolve p = 0.001 (b <= 1); the test stops as soon as
   b makes p > 0.001 certain, so a segment without a change costs a handful of permutations.
   The shuffles are seeded from (seed, window, segment): results are reproducible.
   A series longer than WINDOW points is analysed in windows of WINDOW points that overlap
   by half (Otava's `split`), which keeps the cost quadratic in the window, not the series,
   and keeps several changes in a long history from hiding each other.

2. A minimum-effect filter against slow drift (in the place of Otava's `merge`). On a machine
   that drifts slowly (clocks, thermals, OS updates) E-divisive eventually splits any long
   enough series: the two halves of a linear trend do have different distributions. A drift
   is not a step, though. For each candidate the step is measured between the medians of its
   NEIGHBOURHOOD (up to 10) points on each side, stopping at the neighbouring change points:
   a drift of r per point moves that step by only about r * NEIGHBOURHOOD (0.5 % at
   0.05 %/night), a real step by all of its size. The candidate is kept when

       |after / before - 1| >= max(MIN_EFFECT, NOISE_FACTOR * sigma)   (2 %, 3 sigma)

   where sigma is the series' point-to-point relative noise, estimated from first differences:
   1.4826 * MAD(x[i+1]/x[i] - 1) / sqrt(2). First differences are blind to a slow drift (it
   shifts them by r, far below the noise) and to the rare steps (outliers of the differences,
   which the MAD ignores), so sigma is the noise alone. The 2 % floor is the gate's minimum
   effect (stats.MIN_EFFECT): nothing smaller is worth a bisection. 3 sigma of one point, not 3
   standard errors of the two medians: E-divisive puts the split where the noise makes the two
   sides differ most, so the neighbourhood step of a spurious split is biased upwards, and a
   threshold in standard errors (about 0.56 sigma here) lets the drift-induced splits of long
   series through (flat 120-night series drifting 0.05 %/night, 2 % run noise, 3 runs: 4 of 30
   reported at 3 standard errors, 0 of 100 at 3 sigma). The price: a step must be about 3 x the per-commit noise to be reported, so a
   5 % step needs per-commit noise under about 1.5 % (runs per night lower it). Failing
   candidates are removed weakest first and their neighbours re-measured, because removing one
   widens the neighbourhoods of the others.

A second test for short sides. The permutation test cannot reject what few arrangements there
are: a split of m points from n can be no rarer than 2 / C(n, m) among the shufflings (the m
points all highest or all lowest, at either end), so 4 points against 10 (2 / 1001) can never
reach p <= 0.001, however large the step. Where a segment's best split is that short (its
floor 2 / C(n, m) is above P_THRESHOLD / 4, so that the permutation test is at best a coin
toss), and the permutation test did not accept it, the split is tested instead by the size of
its step against the noise: with sigma the larger of the series' point-to-point noise above,
the pooled scatter of the two sides about their means, and MIN_EFFECT / NOISE_FACTOR (so that a
short series whose few differences came out small cannot make any wobble significant), the
medians of up to NEIGHBOURHOOD points each side differ by z standard errors,

    z = |after / before - 1| / (sigma * 1.2533 * sqrt(1/m + 1/k))     (1.2533: a median's s.e.)

and the split is accepted when the two-sided normal p of z is <= P_THRESHOLD and every point
of the short side lies past the midpoint of the two medians (a short side that straddles the
step, the first slow nights after it and a fast one before them, would name the wrong commit:
the true split waits for MIN_SEGMENT points on its side). Needing
SHORT_MIN_POINTS (8) points in the whole series, so that sigma rests on 7 differences. The
minimum-effect filter then applies to it as to every candidate, so a short-side step is reported
when it is at least max(2 %, 3 sigma) and has MIN_SEGMENT (3) points on each side. Its price in
false alarms is measured by bench/change_points_vs_otava.py (docs/gate.md has the numbers).

The reported ratio is median(after) / median(before) over those neighbourhoods, p the
p-value with which the split was accepted (the permutation test's, or the short-side test's),
and `index` the first point after the change (the first bad commit when the series is one
value per commit).
"""

from __future__ import annotations

import bisect
import dataclasses
import math
import random
import statistics
from itertools import accumulate
from typing import Optional, Sequence

WINDOW = 50
P_THRESHOLD = 0.001
MIN_SEGMENT = 3
PERMUTATIONS = 1999
NEIGHBOURHOOD = 10
MIN_EFFECT = 0.02
NOISE_FACTOR = 3.0
SEED = 20240601
# The short-side test (module documentation): the fewest points of a series it looks at, and
# how far above P_THRESHOLD the permutation test's floor must be for a split to count as short.
SHORT_MIN_POINTS = 8
SHORT_FLOOR_FACTOR = 0.25
SHORT_P_FLOOR = 1e-12  # the smallest p the short-side test reports
# A median's standard error is 1.2533 sigma / sqrt(n) for normal noise.
_MEDIAN_SE = 1.2533

# sigma of a normal sample = 1.4826 MAD.
_MAD_TO_SIGMA = 1.4826


@dataclasses.dataclass
class ChangePoint:
    index: int  # first point after the change
    p: float  # permutation p-value of the E-divisive split
    ratio: float  # median(after) / median(before), neighbourhoods of up to NEIGHBOURHOOD points
    before: float
    after: float
    qhat: float = 0.0
    threshold: float = 0.0  # the minimum relative effect the step had to pass

    @property
    def effect(self) -> float:
        return abs(self.ratio - 1.0)


# ---------------------------------------------------------------------------------------------
# E-divisive on one window


class _Segment:
    """One segment [a, b) of a window: its best split and its cached permutation maxima (the
    null distribution of its largest Q, grown on demand)."""

    def __init__(self, values: Sequence[float], a: int, b: int, min_segment: int, seed: int):
        self.a, self.b = a, b
        xs = [float(v) for v in values[a:b]]
        n = self.n = len(xs)
        self.min_segment = min_segment
        self.testable = n >= 2 * min_segment
        self.tau, self.qhat = a - 1, -math.inf
        self.null: list[float] = []
        if not self.testable:
            return
        # Sum of the distances from each point to all points of the segment, from the sorted
        # values' prefix sums: sum_j |x - x_j| = x (2k - n) - 2 S_k + S_n with k points below x.
        ranked = sorted(xs)
        prefix = [0.0, *accumulate(ranked)]
        rowsum = {}
        for k, x in enumerate(ranked):
            rowsum[x] = x * (2 * k - n) - 2 * prefix[k] + prefix[n]
        total = sum(rowsum[x] for x in xs) / 2.0
        # Q(tau) = alpha R(tau) - beta W(tau) - gamma, with R the left points' row sums and W the
        # sum over left pairs (m = tau left, k = n - tau right; cross = R - 2W and the right
        # pairs' sum = total - R + W).
        self._alpha, self._beta, self._gamma = [], [], []
        for tau in range(min_segment, n - min_segment + 1):
            m, k = tau, n - tau
            c_left, c_right = 2.0 * k / (n * (m - 1)), 2.0 * m / (n * (k - 1))
            self._alpha.append(2.0 / n + c_right)
            self._beta.append(4.0 / n + c_left + c_right)
            self._gamma.append(c_right * total)
        self._pairs = [(x, rowsum[x]) for x in xs]
        tau, self.qhat = self._scan(xs, [r for _, r in self._pairs])
        self.tau = a + tau
        self._rng = random.Random(seed)

    def _scan(self, xs: list[float], rows: list[float]) -> tuple[int, float]:
        """(argmax, max) over tau of Q(tau) for the points in the order given. The sum over the
        pairs left of tau grows by sum_i<t |x_t - x_i|, read off a sorted list of the earlier
        points (bisect + one slice sum), so a scan costs O(n^2) in C and O(n) in Python."""
        lo, hi = self.min_segment, self.n - self.min_segment
        earlier: list[float] = []
        earlier_sum = 0.0
        increments = []
        for t in range(hi):
            x = xs[t]
            k = bisect.bisect(earlier, x)
            increments.append(x * (2 * k - t) - 2.0 * sum(earlier[:k]) + earlier_sum)
            earlier.insert(k, x)
            earlier_sum += x
        within = list(accumulate(increments))[lo - 1 :]
        row_left = list(accumulate(rows[:hi]))[lo - 1 :]
        q = [a * r - b * w - g for a, r, b, w, g in zip(self._alpha, row_left, self._beta, within, self._gamma)]
        best = max(range(len(q)), key=q.__getitem__)
        return lo + best, q[best]

    def null_max(self, r: int) -> float:
        """The largest Q of this segment's r-th permutation."""
        while len(self.null) <= r:
            self._rng.shuffle(self._pairs)
            self.null.append(self._scan([x for x, _ in self._pairs], [row for _, row in self._pairs])[1])
        return self.null[r]


def permutation_floor(n: int, m: int) -> float:
    """The smallest p the permutation test can give a split of `m` points from `n`: the share
    of the shufflings that put the same points on the short side, at either end."""
    return 2.0 / math.comb(n, min(m, n - m))


def short_side_p(values: Sequence[float], a: int, tau: int, b: int, sigma: float,
                 width: int = NEIGHBOURHOOD) -> Optional[float]:
    """The short-side test's two-sided p for the split of segment [a, b) at tau (module
    documentation), or None where the step's ratio is undefined."""
    ratio, before, after, m, k = step_ratio(values, tau, a, b, width)
    if ratio is None or m < 2 or k < 2:
        return None
    left, right = values[max(a, tau - width):tau], values[tau:min(b, tau + width)]
    # The short side must be all on its own side of the step: every point past the midpoint
    # of the two medians. Otherwise it straddles a step whose true short side is shorter than
    # MIN_SEGMENT (the first two slow nights after a step, with one fast night before them),
    # and the split would name the wrong commit.
    middle = (before + after) / 2.0
    for side, above in ((left, before > middle), (right, after > middle)):
        if len(side) == min(m, k) and any((x > middle) != above for x in side):
            return None
    # The scatter of the two sides about their own means, pooled, relative to the level before:
    # the noise right at the split, where the series' sigma (from first differences over the
    # whole series, few of them in a short one) may have come out low by chance.
    squares = sum((x - statistics.fmean(side)) ** 2 for side in (left, right) for x in side)
    local = math.sqrt(squares / (m + k - 2)) / before
    sigma = max(sigma, local, MIN_EFFECT / NOISE_FACTOR)
    z = abs(ratio - 1.0) / (sigma * _MEDIAN_SE * math.sqrt(1.0 / m + 1.0 / k))
    # Floored where the normal tail underflows: a step of many standard errors reads "p 1e-12",
    # not "p 0", which no test of a few points can claim.
    return max(math.erfc(z / math.sqrt(2.0)), SHORT_P_FLOOR)


def _segment_seed(seed: int, offset: int, a: int, b: int) -> int:
    # Integers only: stable across processes (str hashes are salted).
    return (((seed * 1000003) ^ offset) * 1000003 + a * 10007 + b) & 0xFFFFFFFFFFFF


def e_divisive(
    values: Sequence[float],
    p_threshold: float = P_THRESHOLD,
    min_segment: int = MIN_SEGMENT,
    permutations: int = PERMUTATIONS,
    seed: int = SEED,
    offset: int = 0,
    short_sigma: Optional[float] = None,
) -> list[tuple[int, float, float]]:
    """Hierarchical E-divisive with a permutation test on one window of `values`.

    Returns (index, p, qhat) per significant split, index = first point of the right side,
    in the order they were found. `offset` only varies the seeds (the window's position).
    `short_sigma`: the series' relative noise, which turns on the short-side test for splits
    the permutation test cannot judge (module documentation); None leaves it off."""
    n = len(values)
    if n < 2 * min_segment:
        return []
    segments = [_Segment(values, 0, n, min_segment, _segment_seed(seed, offset, 0, n))]
    found: list[tuple[int, float, float]] = []
    # Largest b that still gives (b + 1) / (N + 1) <= p_threshold.
    allowed = math.floor(p_threshold * (permutations + 1) + 1e-9) - 1
    while True:
        candidates = [s for s in segments if s.testable and s.qhat > 0]
        if not candidates or allowed < 0:
            break
        best = max(candidates, key=lambda s: (s.qhat, -s.a))
        testable = [s for s in segments if s.testable]
        reached = 0
        for r in range(permutations):
            if max(s.null_max(r) for s in testable) >= best.qhat:
                reached += 1
                if reached > allowed:
                    break
        p = (reached + 1) / (permutations + 1)
        if reached > allowed:
            # The permutation test cannot reject a split whose side is too short to be rare:
            # those, strongest first, get the short-side test instead.
            best = None
            if short_sigma is not None:
                for s in sorted(candidates, key=lambda s: (-s.qhat, s.a)):
                    if permutation_floor(s.n, s.tau - s.a) <= p_threshold * SHORT_FLOOR_FACTOR:
                        continue
                    short_p = short_side_p(values, s.a, s.tau, s.b, short_sigma)
                    if short_p is not None and short_p <= p_threshold:
                        best, p = s, short_p
                        break
            if best is None:
                break
        found.append((best.tau, p, best.qhat))
        i = segments.index(best)
        left = _Segment(values, best.a, best.tau, min_segment, _segment_seed(seed, offset, best.a, best.tau))
        right = _Segment(values, best.tau, best.b, min_segment, _segment_seed(seed, offset, best.tau, best.b))
        segments[i : i + 1] = [left, right]
    return found


# ---------------------------------------------------------------------------------------------
# Whole series: windows, then the minimum-effect filter


def relative_noise(values: Sequence[float]) -> float:
    """Robust point-to-point relative noise (a sigma): 1.4826 MAD of the relative first
    differences, / sqrt(2) because a difference carries the noise of two points."""
    diffs = [values[i + 1] / values[i] - 1.0 for i in range(len(values) - 1) if values[i] > 0]
    if len(diffs) < 2:
        return 0.0
    centre = statistics.median(diffs)
    mad = statistics.median([abs(d - centre) for d in diffs])
    return _MAD_TO_SIGMA * mad / math.sqrt(2.0)


def step_ratio(
    values: Sequence[float], index: int, lo: int = 0, hi: Optional[int] = None, width: int = NEIGHBOURHOOD
) -> tuple[Optional[float], float, float, int, int]:
    """(ratio, before, after, n_before, n_after) between the medians of up to `width` points
    each side of `index`, not reaching below `lo` or from `hi` on."""
    hi = len(values) if hi is None else hi
    left = values[max(lo, index - width) : index]
    right = values[index : min(hi, index + width)]
    if not left or not right:
        return None, math.nan, math.nan, len(left), len(right)
    before, after = statistics.median(left), statistics.median(right)
    ratio = after / before if before > 0 else None
    return ratio, before, after, len(left), len(right)


def _filter(
    values: Sequence[float],
    candidates: dict[int, tuple[float, float]],
    sigma: float,
    min_segment: int,
    min_effect: float,
    noise_factor: float,
    width: int,
) -> list[ChangePoint]:
    indexes = sorted(candidates)
    while True:
        points: list[ChangePoint] = []
        scores: list[float] = []
        for j, index in enumerate(indexes):
            lo = indexes[j - 1] if j > 0 else 0
            hi = indexes[j + 1] if j + 1 < len(indexes) else len(values)
            p, qhat = candidates[index]
            ratio, before, after, n1, n2 = step_ratio(values, index, lo, hi, width)
            if ratio is None or n1 < min_segment or n2 < min_segment:
                # Too close to a neighbour (two windows found one change a point apart): score it
                # below every real candidate, by its step measured past that neighbour, so that
                # of two near duplicates the better placed one stays.
                lo2 = max([i for i in indexes[:j] if index - i >= min_segment], default=0)
                hi2 = min([i for i in indexes[j + 1 :] if i - index >= min_segment], default=len(values))
                alt = step_ratio(values, index, lo2, hi2, width)[0]
                points.append(ChangePoint(index, p, ratio or math.nan, before, after, qhat, math.inf))
                scores.append(-1.0 / (1.0 + abs((alt or 1.0) - 1.0)))
                continue
            threshold = max(min_effect, noise_factor * sigma, 1e-12)
            points.append(ChangePoint(index, p, ratio, before, after, qhat, threshold))
            scores.append(abs(ratio - 1.0) / threshold)
        if not points:
            return []
        weakest = min(range(len(points)), key=lambda j: (scores[j], -points[j].p, points[j].index))
        if scores[weakest] >= 1.0:
            return points
        del indexes[weakest]


def detect(
    values: Sequence[float],
    window: int = WINDOW,
    p_threshold: float = P_THRESHOLD,
    min_segment: int = MIN_SEGMENT,
    permutations: int = PERMUTATIONS,
    seed: int = SEED,
    min_effect: float = MIN_EFFECT,
    noise_factor: float = NOISE_FACTOR,
    neighbourhood: int = NEIGHBOURHOOD,
) -> list[ChangePoint]:
    """Change points of a series of positive values (e.g. one median time per commit), in
    series order. See the module documentation for the method."""
    values = [float(v) for v in values]
    n = len(values)
    if n < 2 * min_segment:
        return []
    window = max(window, 2 * min_segment)
    candidates: dict[int, tuple[float, float]] = {}
    sigma = relative_noise(values)
    short_sigma = sigma if n >= SHORT_MIN_POINTS else None
    start = 0
    step = max(1, window // 2)
    while True:
        end = min(start + window, n)
        found = e_divisive(values[start:end], p_threshold, min_segment, permutations, seed, offset=start,
                           short_sigma=short_sigma)
        for index, p, qhat in found:
            index += start
            if index not in candidates or p < candidates[index][0]:
                candidates[index] = (p, qhat)
        if end >= n:
            break
        last = max((i + start for i, _, _ in found), default=0)
        start = max(last, start + step)
        if n - start < 2 * min_segment:
            break
    if not candidates:
        return []
    return _filter(values, candidates, sigma, min_segment, min_effect, noise_factor, neighbourhood)
