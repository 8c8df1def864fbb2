"""Apache Otava's change point method, written from its description (Fleming et al., "Hunter:
Using Change Point Detection to Hunt for Performance Regressions", ICPE 2023, and Otava's
documentation), standard library only, for bench/change_points_vs_otava.py. Otava itself is not
a dependency of meshgate.

The method:

- Split: the series is cut into windows of WINDOW (50) points; the next window starts at the
  last change point found in the previous one, or half a window further, whichever is later.
  In each window E-divisive means runs top-down: in every current interval the candidate is the
  tau maximising, over both tau and the right end kappa,

      Q(tau, kappa) = 2/(n+m) sum|x_i - y_j| - 2m/((n+m)(n-1)) sum_{i<i'}|x_i - x_i'|
                                             - 2n/((n+m)(m-1)) sum_{j<j'}|y_j - y_j'|

  (X = x[start:tau], n points; Y = x[tau:kappa], m points; a pair term is 0 for one point).
  The best candidate over all intervals is tested with a two-sided Student t-test between the
  two sides of its interval; if p <= the first-pass threshold (10 x P_THRESHOLD) it is kept and
  the search repeats, otherwise the window is done. The change points of all windows together
  are the weak change points.
- Merge: the t-test of every weak change point is recomputed between its neighbouring change
  points over the whole series; the weakest (largest p) is removed while p >= P_THRESHOLD, and
  its neighbours are re-tested each time.

As in Otava the t-test takes each side's standard deviation with ddof = 0 and pools the two
(equal variances). `index` is the first point after the change.
"""

from __future__ import annotations

import dataclasses
import math
from typing import List, Optional, Sequence, Tuple

WINDOW = 50
P_THRESHOLD = 0.001
FIRST_PASS_FACTOR = 10.0


@dataclasses.dataclass
class OtavaChangePoint:
    index: int
    qhat: float
    pvalue: float
    mean_before: float
    mean_after: float

    @property
    def forward_change(self) -> float:
        return self.mean_after / self.mean_before - 1.0 if self.mean_before else 0.0


# ---------------------------------------------------------------------------------------------
# Student's t distribution


def _betacf(a: float, b: float, x: float) -> float:
    """Continued fraction of the regularised incomplete beta function (modified Lentz)."""
    tiny = 1e-300
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 400):
        m2 = 2 * m
        aa = m * (b - m) * x / ((qam + m2) * (a + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        h *= d * c
        aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        delta = d * c
        h *= delta
        if abs(delta - 1.0) < 1e-15:
            break
    return h


def incomplete_beta(a: float, b: float, x: float) -> float:
    """I_x(a, b), the regularised incomplete beta function."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    log_front = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    if x < (a + 1.0) / (a + b + 2.0):
        return math.exp(log_front) * _betacf(a, b, x) / a
    return 1.0 - math.exp(log_front) * _betacf(b, a, 1.0 - x) / b


def t_two_sided_p(t: float, df: float) -> float:
    """P(|T| >= |t|) for Student's t with df degrees of freedom."""
    if math.isnan(t):
        return 1.0
    if math.isinf(t):
        return 0.0
    return incomplete_beta(df / 2.0, 0.5, df / (df + t * t))


def student_t_test(left: Sequence[float], right: Sequence[float]) -> Tuple[float, float, float, float]:
    """(p, t, mean_left, mean_right): pooled two-sided t-test with Otava's ddof = 0 deviations."""
    n1, n2 = len(left), len(right)
    m1, m2 = sum(left) / n1, sum(right) / n2
    df = n1 + n2 - 2
    if df <= 0:
        return 1.0, 0.0, m1, m2
    s1 = math.sqrt(sum((v - m1) ** 2 for v in left) / n1) if n1 >= 2 else 0.0
    s2 = math.sqrt(sum((v - m2) ** 2 for v in right) / n2) if n2 >= 2 else 0.0
    pooled = ((n1 - 1) * s1 * s1 + (n2 - 1) * s2 * s2) / df
    se = math.sqrt(pooled * (1.0 / n1 + 1.0 / n2))
    if se == 0.0:
        # Two constant sides: equal means carry no evidence, different ones are certain.
        return (1.0, 0.0, m1, m2) if m1 == m2 else (0.0, math.copysign(math.inf, m1 - m2), m1, m2)
    t = (m1 - m2) / se
    return t_two_sided_p(t, df), t, m1, m2


# ---------------------------------------------------------------------------------------------
# E-divisive candidate with the free right end kappa


class _Distances:
    """Column prefix sums of |x_i - x_j| over one window: col[j][t] = sum_{i<t} |x_i - x_j|."""

    def __init__(self, xs: Sequence[float]):
        n = len(xs)
        self.col = []
        for j in range(n):
            acc, row = 0.0, [0.0]
            xj = xs[j]
            for i in range(n):
                acc += abs(xs[i] - xj)
                row.append(acc)
            self.col.append(row)

    def block(self, j: int, a: int, b: int) -> float:
        """sum_{a <= i < b} |x_i - x_j|"""
        row = self.col[j]
        return row[b] - row[a]


def best_candidate(dist: _Distances, start: int, stop: int) -> Optional[Tuple[int, float]]:
    """(tau, qhat) maximising Q(tau, kappa) over start < tau < kappa <= stop."""
    if stop - start < 2:
        return None
    best: Optional[Tuple[int, float]] = None
    within_left = 0.0
    for tau in range(start + 1, stop):
        within_left += dist.block(tau - 1, start, tau - 1)
        n = tau - start
        cross = within_right = 0.0
        for kappa in range(tau + 1, stop + 1):
            j = kappa - 1
            cross += dist.block(j, start, tau)
            within_right += dist.block(j, tau, j)
            m = kappa - tau
            total = n + m
            q = 2.0 / total * cross
            if n > 1:
                q -= 2.0 * m / (total * (n - 1)) * within_left
            if m > 1:
                q -= 2.0 * n / (total * (m - 1)) * within_right
            if best is None or q > best[1]:
                best = (tau, q)
    return best


def _intervals(indexes: Sequence[int], n: int) -> List[Tuple[int, int]]:
    bounds = [0, *indexes, n]
    return [(bounds[i], bounds[i + 1]) for i in range(len(bounds) - 1) if bounds[i] != bounds[i + 1]]


def _window_change_points(xs: Sequence[float], max_pvalue: float) -> List[Tuple[int, float]]:
    """E-divisive with the t-test on one window: [(index, qhat)], sorted."""
    dist = _Distances(xs)
    found: List[Tuple[int, float]] = []
    cache = {}
    while True:
        best = None
        for a, b in _intervals([i for i, _ in found], len(xs)):
            if (a, b) not in cache:
                cache[(a, b)] = best_candidate(dist, a, b)
            cand = cache[(a, b)]
            if cand is not None and (best is None or cand[1] > best[0][1]):
                best = (cand, a, b)
        if best is None:
            return found
        (tau, qhat), a, b = best
        p = student_t_test(xs[a:tau], xs[tau:b])[0]
        if p > max_pvalue:
            return found
        found.append((tau, qhat))
        found.sort()


def _test_between(values: Sequence[float], indexes: List[int], j: int, qhat: float) -> OtavaChangePoint:
    lo = indexes[j - 1] if j > 0 else 0
    hi = indexes[j + 1] if j + 1 < len(indexes) else len(values)
    index = indexes[j]
    p, _, m1, m2 = student_t_test(values[lo:index], values[index:hi])
    return OtavaChangePoint(index, qhat, p, m1, m2)


def split(values: Sequence[float], window: int = WINDOW, max_pvalue: float = P_THRESHOLD * FIRST_PASS_FACTOR) -> List[OtavaChangePoint]:
    """The weak change points, tested against their neighbours over the whole series."""
    values = [float(v) for v in values]
    n = len(values)
    step = max(1, window // 2)
    weak: dict = {}
    start = 0
    while start < n:
        end = min(start + window, n)
        found = [(i + start, q) for i, q in _window_change_points(values[start:end], max_pvalue)]
        for index, qhat in found:
            weak.setdefault(index, qhat)
        last = found[-1][0] if found else 0
        start = max(last, start + step)
    indexes = sorted(weak)
    return [_test_between(values, indexes, j, weak[i]) for j, i in enumerate(indexes)]


def merge(values: Sequence[float], points: List[OtavaChangePoint], max_pvalue: float = P_THRESHOLD) -> List[OtavaChangePoint]:
    """Drops the weakest change point while its p >= max_pvalue, re-testing its neighbours."""
    points = list(points)
    while points:
        weakest = max(range(len(points)), key=lambda j: points[j].pvalue)
        if points[weakest].pvalue < max_pvalue:
            return points
        del points[weakest]
        indexes = [c.index for c in points]
        for j in (weakest - 1, weakest):
            if 0 <= j < len(points):
                points[j] = _test_between(values, indexes, j, points[j].qhat)
    return points


def detect(values: Sequence[float], window: int = WINDOW, max_pvalue: float = P_THRESHOLD) -> List[OtavaChangePoint]:
    """Otava's compute_change_points: split at 10 x max_pvalue, then merge at max_pvalue."""
    first_pass = max_pvalue * FIRST_PASS_FACTOR if max_pvalue < 0.05 else (max_pvalue * 2 if max_pvalue < 0.5 else max_pvalue)
    values = [float(v) for v in values]
    return merge(values, split(values, window, first_pass), max_pvalue)
