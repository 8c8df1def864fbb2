"""A case's launches merged into one result row, the one merge every repetition uses (`meshgate
run`'s repeated performance runs, the interleaved launches of `ab`, `bisect` and `calibrate`,
and the launches of another tool that `meshgate import` reads). The unit of replication is one
process launch (docs/gate.md).

Merged row: `samples.time_s` holds one list per run (run 1 first); `metrics.time_s` has
`median` = the median of the per-run medians, `min`/`max` over every timed iteration of every
run (the same meaning as in a single-run row), `run_medians` and `runs`; where the runs say how
many calls a sample covers, `calls_per_sample` (the fewest of any run) and `run_calls_per_sample`
(per run, beside `run_medians`). A run that fails or errors makes the merged row fail/error with
a message naming the run."""

from __future__ import annotations

import copy
import statistics

from .results import FAILING

RANK = {"pass": 0, "skip": 1, "fail": 2, "error": 3}


def run_lists(row: dict) -> list[list[float]]:
    """The per-run sample lists of a row ([[...]] for a row from one process)."""
    samples = (row.get("samples") or {}).get("time_s") or []
    if samples and all(isinstance(x, (int, float)) for x in samples):
        return [list(samples)]
    return [list(run) for run in samples if isinstance(run, list) and run]


def calls_per_sample(row: dict) -> int | None:
    """How many calls each timed sample of a one-run row covers (the runner's
    `metrics.time_s.calls_per_sample`); None when the row does not say."""
    time_s = (row.get("metrics") or {}).get("time_s")
    calls = time_s.get("calls_per_sample") if isinstance(time_s, dict) else None
    return calls if isinstance(calls, int) and not isinstance(calls, bool) else None


def merge_case(first: dict, later: dict[int, dict | None], k: int) -> dict:
    """`first` (run 1's row) with runs 2..k (`later[n]`, None when run n produced no row)."""
    merged = copy.deepcopy(first)
    lists = run_lists(first)
    calls = [calls_per_sample(first)] * len(lists)
    worst = first.get("status", "error")
    messages = [first["message"]] if first.get("message") else []
    for n in range(2, k + 1):
        row = later.get(n)
        if row is None:
            status, message = "error", f"run {n} of {k}: the runner produced no result"
        else:
            status = row.get("status", "error")
            message = f"run {n} of {k}: {row['message']}" if row.get("message") else ""
            row_lists = run_lists(row)
            lists.extend(row_lists)
            calls.extend([calls_per_sample(row)] * len(row_lists))
        if status in FAILING:
            messages.append(message or f"run {n} of {k}: {status}")
            if RANK.get(status, 3) > RANK.get(worst, 3):
                worst = status
    merged["status"] = worst
    merged["message"] = "\n".join(messages)
    merged.setdefault("samples", {})["time_s"] = lists
    if lists:
        medians = [statistics.median(run) for run in lists]
        everything = [x for run in lists for x in run]
        merged.setdefault("metrics", {})["time_s"] = {
            "median": statistics.median(medians),
            "min": min(everything),
            "max": max(everything),
            "run_medians": medians,
            "runs": len(lists),
        }
        known = [c for c in calls if c is not None]
        if known:
            merged["metrics"]["time_s"].update(calls_per_sample=min(known), run_calls_per_sample=calls)
    return merged
