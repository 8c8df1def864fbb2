"""`meshgate calibrate [CASES]`: what the gate can and cannot see on this machine, measured.

docs/gate.md: calibration measures, it does not assume. One build runs the selected
performance cases in S interleaved A/A sessions (default 10), each exactly what `meshgate ab`
does with two builds: 2 x k launches (k = 9 per side) in randomised ABBA order, the same build
labelled A and B, judged by `meshgate compare`'s decision rule, flagged cases confirmed in a
fresh batch. Per case it reports:
- noise floor: the relative MAD of the per-run medians around the median of their side of
  their session (the floor `compare` and `ab` use for this machine class: gate = max(2 %,
  3 x floor));
- false alarms: the share of A/A sessions that ended in a confirmed regression or improvement
  (with the count, and the sessions flagged before confirmation) — measured on real launches,
  so drift, warm-up order or a bimodal machine that interleaving does not cancel shows up;
- pass rate: the share of A/A sessions judged PASS (a gate that can never say PASS is useless);
- minimum detectable regression: the smallest slowdown caught with 80 % power AFTER the
  confirmation batch at k runs per side, found by simulating the whole rule on per-run medians
  drawn from this machine's measured noise (the same residuals as the noise floor, resampled
  with a little smoothing, so outliers and skew come along).
The noise floors and the rest are stored per machine class in
baselines/<machine-class>/calibration.json (merged with the cases already there), where
`compare`, `run --baseline` and `ab` pick the floors up.

The simulation and the bounds are power.py's; this module runs the sessions (through the
repeated launches of system/repeats.py) and writes the calibration. The command
(commands/calibrate.py) prints it and writes the report of the launches.
"""

from __future__ import annotations

import dataclasses
import json
import pathlib
import random
from typing import Any, Optional

from ..core import results as _results
from ..core import svg
from ..core.markup import pct
from ..core.results import FAILING, InputError, results_machine_class
from ..core.tables import md_row, md_table_head
from ..system import repeats
from . import stats, store
from .compare import compare_results, run_medians
from .verdict import CONFIRMED_VERDICTS
from .power import SIMULATION_TRIALS, judge_sessions, minimum_detectable_regression, upper_bound

DEFAULT_K = 9
DEFAULT_SESSIONS = 10


def _flagged_ids(docs: dict[str, dict], floors: dict[str, float], max_gate: float) -> list[str]:
    comparison = compare_results(docs["a"], docs["b"], floors, max_gate=max_gate)
    return [v.id for v in comparison.cases if v.verdict in CONFIRMED_VERDICTS]


def calibrate_sessions(side: repeats.Side, ids: list[str], launch: repeats.LaunchFn, out_dir: pathlib.Path,
                       sessions: int, k: int, seed: int, max_gate: float = stats.MAX_GATE,
                       trials: int = SIMULATION_TRIALS) -> tuple[dict[str, dict[str, Any]], dict[str, Any]]:
    """Runs the A/A sessions and their confirmation batches; returns the per-case calibration
    and one merged results document of every first-batch launch (for the run report)."""
    rng = random.Random(seed)
    aa = [repeats.Side(label=label, rev=side.rev, commit=side.commit, root=side.root, runner=side.runner,
                         env=side.env, case_paths=side.case_paths) for label in ("a", "b")]
    session_docs = []
    for s in range(sessions):
        order = repeats.abba_order(k, rng)
        session_docs.append(repeats.collect_runs(aa, order, {"a": ids, "b": ids}, launch,
                                                   pathlib.Path(out_dir) / "sessions" / f"{s + 1}"))
    medians: dict[str, list[float]] = {}
    residuals: dict[str, list[float]] = {}
    failing: set[str] = set()
    for docs in session_docs:
        for label in ("a", "b"):
            for row in docs[label]["cases"]:
                if row.get("status") in FAILING:
                    failing.add(row["id"])
                    continue
                group = run_medians(row)
                medians.setdefault(row["id"], []).extend(group)
                if len(group) >= 3:
                    residuals.setdefault(row["id"], []).extend(stats.side_residuals(group))
    # Residuals per side of each session: the run-to-run noise a side of an A/B sees. Shifts
    # between sessions (drift, which interleaving cancels) and between the two labels (what
    # the false-alarm column must catch, not absorb) stay out.
    floors = {i: stats.relative_mad([1.0 + r for r in residuals[i]]) for i in residuals if i not in failing}
    confirmations: list[dict[str, dict]] = []
    for s, docs in enumerate(session_docs):
        flagged = [i for i in _flagged_ids(docs, floors, max_gate) if i in floors]
        confirmations.append(
            repeats.collect_runs(aa, repeats.abba_order(k, rng), {"a": flagged, "b": flagged}, launch,
                                   pathlib.Path(out_dir) / "sessions" / f"{s + 1}-confirm") if flagged else {})
    judged = judge_sessions(session_docs, confirmations, floors, max_gate)
    cases: dict[str, dict[str, Any]] = {}
    for case_id, floor in floors.items():
        j = judged.get(case_id, {"sessions": 0, "flagged": 0, "false_alarms": 0, "passes": 0})
        cases[case_id] = {
            "runs": len(medians[case_id]),
            "median_s": stats.median(medians[case_id]),
            "noise_floor": floor,
            "min_effect": stats.minimum_effect(floor),
            "sessions": j["sessions"],
            "flagged_sessions": j["flagged"],
            "false_alarms": j["false_alarms"],
            "false_alarm_rate": j["false_alarms"] / j["sessions"] if j["sessions"] else None,
            "false_alarm_upper": upper_bound(j["false_alarms"], j["sessions"]),
            "pass_rate": j["passes"] / j["sessions"] if j["sessions"] else None,
            "min_detectable": minimum_detectable_regression(residuals.get(case_id, []), k, floor, trials=trials,
                                                            seed=seed, max_gate=max_gate),
            "k": k,
            "max_gate": max_gate,
        }
    merged = _merge_launches(session_docs, ids)
    merged["run"]["runs"] = sessions * 2 * k
    return cases, merged


def _merge_launches(session_docs: list[dict[str, dict]], ids: list[str]) -> dict[str, Any]:
    """Every first-batch launch of every session as one results document (one sample list per run)."""
    rows: dict[str, dict] = {}
    run: dict[str, Any] = {}
    for docs in session_docs:
        for label in ("a", "b"):
            run = run or dict(docs[label].get("run") or {})
            for row in docs[label]["cases"]:
                if row["id"] not in rows:
                    rows[row["id"]] = json.loads(json.dumps(row))
                    continue
                merged = rows[row["id"]]
                merged.setdefault("samples", {}).setdefault("time_s", []).extend((row.get("samples") or {}).get("time_s") or [])
                if row.get("status") in FAILING and merged.get("status") == "pass":
                    merged["status"], merged["message"] = row["status"], row.get("message", "")
    return {"schema": _results.SCHEMA, "run": _results.complete_run(run),
            "cases": [rows[i] for i in ids if i in rows]}


def calibration_markdown(cases: dict[str, dict[str, Any]], machine_class: str, sessions: int, k: int,
                         stored: Optional[pathlib.Path]) -> str:
    lines = [
        f"# meshgate calibrate: {len(cases)} case(s) on machine class `{machine_class}`",
        "",
        f"{sessions} interleaved A/A session(s) of one build, {k} launches per side each (ABBA order), judged by "
        "the gate's own rule with a confirmation batch for flagged cases. False alarms: sessions that ended "
        "in a confirmed regression or improvement (95 % upper bound in brackets). Minimum detectable: the "
        f"slowdown caught with 80 % power after confirmation at k = {k}, simulated from this machine's "
        "measured run-to-run noise.",
        "",
    ]
    lines += md_table_head(["case", "runs", "median time", "noise floor", "gate", "false alarms",
                            "flagged before confirmation", "PASS in A/A", "min detectable"],
                           "lrrrrrrrr")
    for case_id, e in sorted(cases.items(), key=lambda item: -item[1]["noise_floor"]):
        detectable = pct(e["min_detectable"], 2) if e["min_detectable"] is not None else "> 100 %"
        lines.append(md_row([
            f"`{case_id}`", f"{e['runs']}", svg.format_seconds(e["median_s"]), pct(e["noise_floor"], 2),
            pct(e["min_effect"], 2),
            f"{e['false_alarms']}/{e['sessions']} (<= {pct(e['false_alarm_upper'], 2)})",
            f"{e['flagged_sessions']}/{e['sessions']}", pct(e["pass_rate"], 2), detectable]))
    lines.append("")
    too_wide = [i for i, e in cases.items() if e["min_effect"] > e["max_gate"]]
    if too_wide:
        lines += [f"{len(too_wide)} case(s) have a gate wider than --max-gate {e['max_gate'] * 100:g} %: on this "
                  "machine they can never PASS, only be inconclusive or regress (quieten the machine or "
                  "raise --max-gate).", ""]
    if stored:
        lines += [f"Stored in `{stored}`.", ""]
    return "\n".join(lines)


@dataclasses.dataclass
class Calibration:
    """What `meshgate calibrate` came to: exit code 0 (1 when cases failed and were not
    calibrated, listed in `failing`; 2 on a stored calibration that cannot be merged into,
    said in `error`), the calibration's report (report.md) and the results of every launch."""

    code: int
    text: str = ""
    results: Optional[dict[str, Any]] = None
    failing: list[str] = dataclasses.field(default_factory=list)
    error: str = ""


def calibrate(side: repeats.Side, ids: list[str], launch: repeats.LaunchFn, out_dir: pathlib.Path,
              sessions: int, k: int, seed: int, machine_class: Optional[str], baselines_root: pathlib.Path,
              keep: bool = True, max_gate: float = stats.MAX_GATE, trials: int = SIMULATION_TRIALS) -> Calibration:
    """Runs the A/A sessions, writes results.json, report.md and calibration.json into
    `out_dir` and, with `keep`, stores the calibration under `baselines_root`.
    `machine_class` None takes the class from the sessions' results; a known one lets a stored
    calibration that cannot be merged into stop the command before the sessions run."""
    out_dir = pathlib.Path(out_dir)
    if keep and machine_class:
        try:
            store.stored_calibration(baselines_root, machine_class)
        except InputError as e:
            return Calibration(2, error=f"meshgate calibrate: {e}")
    cases, results = calibrate_sessions(side, ids, launch, out_dir, sessions, k, seed, max_gate, trials)
    _results.write_results(out_dir / "results.json", results)
    mclass = machine_class or results_machine_class(results)
    stored = None
    if keep and cases:
        try:
            stored = store.store_calibration(store.stored_calibration(baselines_root, mclass), cases, results, mclass)
        except InputError as e:
            return Calibration(2, error=f"meshgate calibrate: {e}", results=results)
    text = calibration_markdown(cases, mclass, sessions, k, stored)
    (out_dir / "report.md").write_text(text)
    (out_dir / "calibration.json").write_text(json.dumps({"machine_class": mclass, "cases": cases}, indent=1) + "\n")
    failing = [r["id"] for r in results["cases"] if r.get("status") in FAILING]
    return Calibration(1 if failing else 0, text, results, failing)
