"""Synthetic timing series shared by the change point tests (test_changepoint.py,
test_history.py) and bench/change_points_vs_otava.py, so that the benchmark measures the
detectors on exactly the series the tests use."""

from __future__ import annotations

import random
import statistics


def noisy(rng: random.Random, n: int, noise: float = 0.01, level: float = 1e-3, drift: float = 0.0,
          step_at: int | None = None, step: float = 0.0) -> list[float]:
    """n points of `level`, relative Gaussian noise `noise`, a relative drift per point and an
    optional relative step from index `step_at` on."""
    out = []
    for i in range(n):
        v = level * (1 + drift * i) * (1 + (step if step_at is not None and i >= step_at else 0.0))
        out.append(v * (1 + rng.gauss(0.0, noise)))
    return out


def runs_at(rng: random.Random, level: float, n_runs: int = 5, iters: int = 5,
            between: float = 0.02, within: float = 0.01) -> list[list[float]]:
    """Per-run iteration times: a per-run offset (launch-to-launch noise) and iteration noise."""
    out = []
    for _ in range(n_runs):
        run_level = level * (1 + rng.gauss(0.0, between))
        out.append([run_level * (1 + rng.gauss(0.0, within)) for _ in range(iters)])
    return out


def night_value(runs: list[list[float]]) -> float:
    """The history's value of one commit: the median of the per-run medians."""
    return statistics.median(statistics.median(r) for r in runs)
