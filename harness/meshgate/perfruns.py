"""Repeated performance runs. The unit of replication is one process launch (docs/gate.md):
a case with `perf: {runs: k}` is run in k runner processes, and the per-run sample lists are
merged into one result row.

Merged row: `samples.time_s` holds one list per run (run 1 first); `metrics.time_s` has
`median` = the median of the per-run medians, `min`/`max` over every timed iteration of every
run (the same meaning as in a single-run row), `run_medians` and `runs`. A run that fails or
errors makes the merged row fail/error with a message naming the run."""

from __future__ import annotations

import copy
import statistics

RANK = {"pass": 0, "skip": 1, "fail": 2, "error": 3}


def perf_runs(entry: dict | None, row: dict | None = None) -> int:
    """k of a case: `perf.runs` from the runner's listing, else from the row's params; 1."""
    for perf in ((entry or {}).get("perf"), ((row or {}).get("params") or {}).get("perf")):
        if isinstance(perf, dict) and isinstance(perf.get("runs"), int):
            return max(1, perf["runs"])
    return 1


def repeat_schedule(cases: list[dict], catalogue: dict[str, dict]) -> dict[int, list[str]]:
    """For run n = 2..max k, the ids of the cases that still need a run n. Only cases whose
    first run passed are repeated: a wrong answer or a crash has no timing worth replicating."""
    schedule: dict[int, list[str]] = {}
    for row in cases:
        if row.get("status") != "pass":
            continue
        k = perf_runs(catalogue.get(row["id"]), row)
        for n in range(2, k + 1):
            schedule.setdefault(n, []).append(row["id"])
    return dict(sorted(schedule.items()))


def run_lists(row: dict) -> list[list[float]]:
    """The per-run sample lists of a row ([[...]] for a row from one process)."""
    samples = (row.get("samples") or {}).get("time_s") or []
    if samples and all(isinstance(x, (int, float)) for x in samples):
        return [list(samples)]
    return [list(run) for run in samples if isinstance(run, list) and run]


def merge_case(first: dict, later: dict[int, dict | None], k: int) -> dict:
    """`first` (run 1's row) with runs 2..k (`later[n]`, None when run n produced no row)."""
    merged = copy.deepcopy(first)
    lists = run_lists(first)
    worst = first.get("status", "error")
    messages = [first["message"]] if first.get("message") else []
    for n in range(2, k + 1):
        row = later.get(n)
        if row is None:
            status, message = "error", f"run {n} of {k}: the runner produced no result"
        else:
            status = row.get("status", "error")
            message = f"run {n} of {k}: {row['message']}" if row.get("message") else ""
            lists.extend(run_lists(row))
        if status in ("fail", "error"):
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
    return merged


def merge_runs(document: dict, runs: dict[int, dict[str, dict]],
               catalogue: dict[str, dict]) -> dict:
    """The results document with every repeated case merged; `runs[n]` maps case id to the
    row of run n. Cases that were not repeated are left as they are."""
    repeated = {case_id for rows in runs.values() for case_id in rows}
    scheduled = {case_id for ids in repeat_schedule(document.get("cases", []), catalogue).values()
                 for case_id in ids}
    merged = copy.deepcopy(document)
    cases = []
    for row in merged.get("cases", []):
        case_id = row.get("id")
        if case_id in scheduled or case_id in repeated:
            k = perf_runs(catalogue.get(case_id), row)
            later = {n: runs.get(n, {}).get(case_id) for n in range(2, k + 1)}
            row = merge_case(row, later, k)
        cases.append(row)
    merged["cases"] = cases
    return merged
