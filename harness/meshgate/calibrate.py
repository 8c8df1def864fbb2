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
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import math
import pathlib
import random
import statistics
import sys
from typing import Any, Optional, Sequence

from . import baseline as _baseline
from . import compare as _compare
from . import results as _results
from . import impls, replicate, stats, svg
from . import verdict as _verdict
from .markup import pct

DEFAULT_K = 9
DEFAULT_SESSIONS = 10
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
        first = _compare.compare_results(docs["a"], docs["b"], floors, max_gate=max_gate)
        second = ({v.id: v for v in _compare.compare_results(again["a"], again["b"], floors, max_gate=max_gate).cases}
                  if again else {})
        for v in first.cases:
            entry = out.setdefault(v.id, {"sessions": 0, "flagged": 0, "false_alarms": 0, "passes": 0})
            entry["sessions"] += 1
            entry["passes"] += v.verdict == "pass"
            if v.verdict in ("regression", "improvement"):
                entry["flagged"] += 1
                confirmed = second.get(v.id)
                entry["false_alarms"] += confirmed is not None and confirmed.verdict == v.verdict
    return out


def _flagged_ids(docs: dict[str, dict], floors: dict[str, float], max_gate: float) -> list[str]:
    comparison = _compare.compare_results(docs["a"], docs["b"], floors, max_gate=max_gate)
    return [v.id for v in comparison.cases if v.verdict in ("regression", "improvement")]


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


def calibrate_sessions(side: replicate.Side, ids: list[str], launch: replicate.LaunchFn, out_dir: pathlib.Path,
                       sessions: int, k: int, seed: int, max_gate: float = stats.MAX_GATE,
                       trials: int = SIMULATION_TRIALS) -> tuple[dict[str, dict[str, Any]], dict[str, Any]]:
    """Runs the A/A sessions and their confirmation batches; returns the per-case calibration
    and one merged results document of every first-batch launch (for the run report)."""
    rng = random.Random(seed)
    aa = [replicate.Side(label=label, rev=side.rev, commit=side.commit, root=side.root, runner=side.runner,
                         env=side.env, case_paths=side.case_paths) for label in ("a", "b")]
    session_docs = []
    for s in range(sessions):
        order = replicate.abba_order(k, rng)
        session_docs.append(replicate.collect_runs(aa, order, {"a": ids, "b": ids}, launch,
                                                   pathlib.Path(out_dir) / "sessions" / f"{s + 1}"))
    medians: dict[str, list[float]] = {}
    residuals: dict[str, list[float]] = {}
    failing: set[str] = set()
    for docs in session_docs:
        for label in ("a", "b"):
            for row in docs[label]["cases"]:
                if row.get("status") in ("fail", "error"):
                    failing.add(row["id"])
                    continue
                group = _compare.run_medians(row)
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
            replicate.collect_runs(aa, replicate.abba_order(k, rng), {"a": flagged, "b": flagged}, launch,
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
                if row.get("status") in ("fail", "error") and merged.get("status") == "pass":
                    merged["status"], merged["message"] = row["status"], row.get("message", "")
    return {"schema": _baseline.RESULTS_SCHEMA, "run": _results.complete_run(run),
            "cases": [rows[i] for i in ids if i in rows]}


def stored_calibration(baselines_root: pathlib.Path, machine_class: str) -> pathlib.Path:
    """Where the calibration of `machine_class` is stored; InputError when a file there is not
    one that new cases can be merged into (it stays as it is)."""
    path = pathlib.Path(baselines_root) / machine_class / _baseline.CALIBRATION_FILE
    _baseline.load_calibration(path)  # the noise floors `compare` would read, checked
    return path


def store_calibration(path: pathlib.Path, cases: dict[str, dict[str, Any]], results: dict[str, Any],
                      machine_class: str) -> pathlib.Path:
    """Merges `cases` into the calibration file at `path` (atomic write); returns the path."""
    path = pathlib.Path(path)
    doc: dict[str, Any] = {"schema": _baseline.CALIBRATION_SCHEMA, "machine_class": machine_class, "cases": {}}
    if path.exists():
        doc = _baseline.read_calibration(path)
    run = results.get("run", {})
    stamp = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
    for case_id, entry in cases.items():
        doc["cases"][case_id] = dict(entry, commit=run.get("commit"), calibrated=stamp)
    doc["machine_class"] = machine_class
    doc["machine"] = run.get("machine", {})
    doc["updated"] = stamp
    _results.write_json_atomic(path, doc)
    return path


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
        "| case | runs | median time | noise floor | gate | false alarms | flagged before confirmation | "
        "PASS in A/A | min detectable |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for case_id, e in sorted(cases.items(), key=lambda item: -item[1]["noise_floor"]):
        detectable = pct(e["min_detectable"], 2) if e["min_detectable"] is not None else "> 100 %"
        lines.append(
            f"| `{case_id}` | {e['runs']} | {svg.format_seconds(e['median_s'])} | {pct(e['noise_floor'], 2)} | "
            f"{pct(e['min_effect'], 2)} | {e['false_alarms']}/{e['sessions']} (<= {pct(e['false_alarm_upper'], 2)}) | "
            f"{e['flagged_sessions']}/{e['sessions']} | {pct(e['pass_rate'], 2)} | {detectable} |"
        )
    lines.append("")
    too_wide = [i for i, e in cases.items() if e["min_effect"] > e["max_gate"]]
    if too_wide:
        lines += [f"{len(too_wide)} case(s) have a gate wider than --max-gate {e['max_gate'] * 100:g} %: on this "
                  "machine they can never PASS, only be inconclusive or regress (quieten the machine or "
                  "raise --max-gate).", ""]
    if stored:
        lines += [f"Stored in `{stored}`.", ""]
    return "\n".join(lines)


def _cmd_calibrate(args: argparse.Namespace) -> int:
    from . import build, launch
    from .selection import SelectionError, build_selection

    root = build.source_root()
    if args.sessions < 1:
        print("meshgate calibrate: --sessions must be at least 1", file=sys.stderr)
        return 2
    if args.k < stats.smallest_k_reaching():
        print(f"meshgate calibrate: -k must be at least {stats.smallest_k_reaching()} "
              f"(fewer runs per side can never reach alpha = {stats.ALPHA})", file=sys.stderr)
        return 2
    try:
        selection = build_selection(args, root, [])
        runner = build.runner_command(root, args.preset)
    except (SelectionError, build.BuildError) as e:
        print(f"meshgate calibrate: {e}", file=sys.stderr)
        return 2
    side = replicate.Side(label="aa", rev="HEAD", runner=runner, case_paths=list(selection.paths))
    try:
        impl = impls.resolve(args.impl)
    except impls.ImplError as e:
        print(f"meshgate calibrate: {e}", file=sys.stderr)
        return 2
    launcher = replicate.DriverLauncher(backend=args.backend, ranks=args.ranks, run_prefix="calibrate",
                                        impl=impl)
    try:
        ids = replicate.perf_case_ids(launcher.list_cases(side, selection))
    except (launch.LaunchError, launch.RunnerInputError) as e:
        print(f"meshgate calibrate: the runner rejected the selection: {getattr(e, 'stderr', e)}", file=sys.stderr)
        return 2
    if not ids:
        print("meshgate calibrate: no performance case (with a `perf:` block) is selected", file=sys.stderr)
        return 2
    try:
        mclass = args.machine_class or _baseline.machine_class(launch.runner_machine(runner))
    except launch.LaunchError as e:
        print(f"meshgate calibrate: {e}", file=sys.stderr)
        return 2
    out_dir = pathlib.Path(args.out) if args.out else _compare.default_report_dir("calibrate")
    return calibrate_with(side, ids, launcher, out_dir, args.sessions, args.k, args.seed, mclass,
                          pathlib.Path(args.baselines), store=not args.no_store, max_gate=args.max_gate)


def calibrate_with(side: replicate.Side, ids: list[str], launch: replicate.LaunchFn, out_dir: pathlib.Path,
                   sessions: int, k: int, seed: int, machine_class: Optional[str], baselines_root: pathlib.Path,
                   store: bool = True, max_gate: float = stats.MAX_GATE, trials: int = SIMULATION_TRIALS) -> int:
    """Runs the A/A sessions, writes reports/<id>/ and stores the calibration; exit code.
    `machine_class` None takes the class from the sessions' results; a known one lets a stored
    calibration that cannot be merged into stop the command before the sessions run."""
    out_dir = pathlib.Path(out_dir)
    if store and machine_class:
        try:
            stored_calibration(baselines_root, machine_class)
        except _baseline.InputError as e:
            print(f"meshgate calibrate: {e}", file=sys.stderr)
            return 2
    cases, results = calibrate_sessions(side, ids, launch, out_dir, sessions, k, seed, max_gate, trials)
    _results.write_results(out_dir / "results.json", results)
    mclass = machine_class or _baseline.results_machine_class(results)
    stored = None
    if store and cases:
        try:
            stored = store_calibration(stored_calibration(baselines_root, mclass), cases, results, mclass)
        except _baseline.InputError as e:
            print(f"meshgate calibrate: {e}", file=sys.stderr)
            return 2
    text = calibration_markdown(cases, mclass, sessions, k, stored)
    (out_dir / "report.md").write_text(text)
    (out_dir / "calibration.json").write_text(json.dumps({"machine_class": mclass, "cases": cases}, indent=1) + "\n")
    from . import report

    report.write_run_report(out_dir / "runs-report", results)
    print(text)
    failing = [r["id"] for r in results["cases"] if r.get("status") in ("fail", "error")]
    if failing:
        print(f"meshgate calibrate: {len(failing)} case(s) failed and were not calibrated: {', '.join(failing)}",
              file=sys.stderr)
        return 1
    return 0


def register(subparsers: Any) -> None:
    from .selection import add_backend_arguments, add_selection_arguments

    parser = subparsers.add_parser(
        "calibrate", help="A/A sessions: noise floor, measured false alarms and detectable regression per case",
        description="Runs the selected performance cases of this checkout's build in interleaved A/A "
                    "sessions judged by the gate's own rule, and reports per case the noise floor, the "
                    "gate, the measured false-alarm rate after confirmation, how often A/A passes, and "
                    "the minimum regression detected with 80 % power after confirmation. Stores them "
                    "in baselines/<machine-class>/calibration.json.")
    add_selection_arguments(parser)
    add_backend_arguments(parser)
    parser.add_argument("--sessions", type=int, default=DEFAULT_SESSIONS, metavar="S",
                        help="interleaved A/A sessions, 2 x k launches each (default %(default)s)")
    parser.add_argument("-k", "--k", type=int, default=DEFAULT_K, help="runs per side the gate uses (default %(default)s)")
    parser.add_argument("--preset", metavar="P", help="CMake preset of the build (default: ci/preset)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the run orders and the simulation (default %(default)s)")
    parser.add_argument("--machine-class", help="store under this machine class instead of the derived one")
    parser.add_argument("--baselines", default=str(_baseline.default_baselines()), help="baselines root (default: %(default)s)")
    parser.add_argument("--no-store", action="store_true", help="report only; leave calibration.json alone")
    _compare.add_max_gate_argument(parser)
    parser.add_argument("--out", metavar="DIR", help="report folder (default: reports/calibrate-<time>)")
    parser.set_defaults(func=_cmd_calibrate)
