"""`meshgate calibrate [CASES]`: A/A runs of one build to measure this machine's noise.

The selected performance cases run N times (default 2 x 9), each run a fresh runner process.
Per case it reports:
- noise floor: MAD of the per-run medians / their median (spec/gating.md);
- measured false-alarm rate: the share of random splits of the N runs into two groups of k
  that the gate's rule (one-sided MWU at alpha in either direction AND the median ratio past
  max(2 %, 3 x noise floor)) would flag, although both groups ran the same build;
- minimum detectable regression at k runs per side: the larger of the gate and the effect the
  test detects with 80 % power given the measured run-to-run spread.
The noise floors are stored in baselines/<machine-class>/calibration.json (merged with the
cases already there), where `compare`, `run --baseline` and `ab` pick them up.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import pathlib
import random
import sys
from typing import Any, Optional

from . import baseline as _baseline
from . import compare as _compare
from . import replicate, stats, svg

DEFAULT_K = 9
SPLITS = 400


def aa_false_alarm_rate(medians: list[float], k: int, gate: float, rng: random.Random,
                        splits: int = SPLITS, alpha: float = stats.ALPHA) -> Optional[float]:
    """Share of random k-vs-k splits of A/A per-run medians that the gate would flag."""
    if len(medians) < 4:
        return None
    k = min(k, len(medians) // 2)
    flagged = 0
    for _ in range(splits):
        shuffled = medians[:]
        rng.shuffle(shuffled)
        a, b = shuffled[:k], shuffled[k : 2 * k]
        ratio = stats.median(b) / stats.median(a)
        if ratio >= 1 + gate and stats.mann_whitney_greater(b, a) <= alpha:
            flagged += 1
        elif ratio <= 1 / (1 + gate) and stats.mann_whitney_greater(a, b) <= alpha:
            flagged += 1
    return flagged / splits


def calibrate_results(results: dict[str, Any], k: int = DEFAULT_K, seed: int = 0) -> dict[str, dict[str, Any]]:
    """Per case id: runs, median_s, noise_floor, false_alarm_rate, min_detectable (all fractions)."""
    rng = random.Random(seed)
    out: dict[str, dict[str, Any]] = {}
    for row in results.get("cases", []):
        if row.get("status") != "pass":
            continue
        medians = _compare.run_medians(row)
        if len(medians) < 3:
            continue
        floor = stats.relative_mad(medians)
        gate = stats.minimum_effect(floor)
        sigma = floor * stats.MAD_TO_SIGMA
        detectable = max(gate, stats.minimum_detectable_effect(sigma, k))
        out[row["id"]] = {
            "runs": len(medians),
            "median_s": stats.median(medians),
            "noise_floor": floor,
            "min_effect": gate,
            "false_alarm_rate": aa_false_alarm_rate(medians, k, gate, rng),
            "min_detectable": detectable,
            "k": k,
        }
    return out


def store_calibration(path: pathlib.Path, cases: dict[str, dict[str, Any]], results: dict[str, Any], machine_class: str) -> dict:
    """Merges `cases` into the calibration file at `path` (atomic write); returns the document."""
    path = pathlib.Path(path)
    doc: dict[str, Any] = {"schema": _baseline.CALIBRATION_SCHEMA, "machine_class": machine_class, "cases": {}}
    if path.exists():
        _baseline.load_calibration(path)  # refuses a corrupt file with a remedy
        doc = json.loads(path.read_text())
    run = results.get("run", {})
    stamp = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
    for case_id, entry in cases.items():
        doc["cases"][case_id] = dict(entry, commit=run.get("commit"), calibrated=stamp)
    doc["machine_class"] = machine_class
    doc["machine"] = run.get("machine", {})
    doc["updated"] = stamp
    _baseline.atomic_write_json(path, doc)
    return doc


def _pct(x: Optional[float]) -> str:
    if x is None:
        return "-"
    return f"{x * 100:.2f} %"


def calibration_markdown(cases: dict[str, dict[str, Any]], machine_class: str, runs: int, k: int,
                         stored: Optional[pathlib.Path]) -> str:
    lines = [
        f"# meshgate calibrate: {len(cases)} case(s) on machine class `{machine_class}`",
        "",
        f"{runs} A/A runs of one build per case; false alarms measured over random {k}-vs-{k} splits; "
        f"minimum detectable regression at k = {k} runs per side with 80 % power.",
        "",
        "| case | runs | median time | noise floor | gate | false alarms | min detectable |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for case_id, e in sorted(cases.items(), key=lambda item: -item[1]["noise_floor"]):
        lines.append(
            f"| `{case_id}` | {e['runs']} | {svg.format_seconds(e['median_s'])} | {_pct(e['noise_floor'])} | "
            f"{_pct(e['min_effect'])} | {_pct(e['false_alarm_rate'])} | {_pct(e['min_detectable'])} |"
        )
    lines.append("")
    if stored:
        lines += [f"Noise floors stored in `{stored}`.", ""]
    return "\n".join(lines)


def _cmd_calibrate(args: argparse.Namespace) -> int:
    from . import build, launch
    from .selection import SelectionError, build_selection

    root = build.source_root()
    runs = args.runs if args.runs else 2 * args.k
    if runs < 4:
        print("meshgate calibrate: --runs must be at least 4", file=sys.stderr)
        return 2
    try:
        selection = build_selection(args, root, [])
        runner = build.runner_command(root, args.preset)
    except (SelectionError, build.BuildError) as e:
        print(f"meshgate calibrate: {e}", file=sys.stderr)
        return 2
    side = replicate.Side(label="aa", rev="HEAD", runner=runner, case_paths=list(selection.paths))
    launcher = replicate.DriverLauncher(backend=args.backend, ranks=args.ranks, run_prefix="calibrate")
    try:
        ids = replicate.perf_case_ids(launcher.list_cases(side, selection))
    except (launch.LaunchError, launch.RunnerInputError) as e:
        print(f"meshgate calibrate: the runner rejected the selection: {getattr(e, 'stderr', e)}", file=sys.stderr)
        return 2
    if not ids:
        print("meshgate calibrate: no performance case (with a `perf:` block) is selected", file=sys.stderr)
        return 2
    out_dir = pathlib.Path(args.out) if args.out else _compare.default_report_dir("calibrate")
    return calibrate_with(side, ids, launcher, out_dir, runs, args.k, args.seed, args.machine_class,
                          pathlib.Path(args.baselines), store=not args.no_store)


def calibrate_with(side: replicate.Side, ids: list[str], launch: replicate.LaunchFn, out_dir: pathlib.Path,
                   runs: int, k: int, seed: int, machine_class: Optional[str], baselines_root: pathlib.Path,
                   store: bool = True) -> int:
    """Runs the A/A launches, writes reports/<id>/ and stores the noise floors; exit code."""
    docs = replicate.collect_runs([side], [0] * runs, {side.label: ids}, launch, out_dir / "runs")
    results = docs[side.label]
    _baseline.atomic_write_json(out_dir / "results.json", results)
    cases = calibrate_results(results, k=k, seed=seed)
    mclass = machine_class or _baseline.results_machine_class(results)
    stored = None
    if store and cases:
        stored = pathlib.Path(baselines_root) / mclass / _baseline.CALIBRATION_FILE
        try:
            store_calibration(stored, cases, results, mclass)
        except _baseline.InputError as e:
            print(f"meshgate calibrate: {e}", file=sys.stderr)
            return 2
    text = calibration_markdown(cases, mclass, runs, k, stored)
    (out_dir / "report.md").write_text(text)
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
    from .selection import add_selection_arguments

    parser = subparsers.add_parser(
        "calibrate", help="A/A runs: noise floor, false-alarm rate and detectable regression per case",
        description="Runs the selected performance cases of this checkout's build many times, "
                    "reports per case the noise floor, the measured false-alarm rate and the "
                    "minimum detectable regression at k runs per side, and stores the noise "
                    "floors in baselines/<machine-class>/calibration.json.")
    add_selection_arguments(parser)
    parser.add_argument("--runs", type=int, metavar="N", help="A/A runs per case (default: 2 x k)")
    parser.add_argument("-k", "--k", type=int, default=DEFAULT_K, help="runs per side the gate uses (default %(default)s)")
    parser.add_argument("--backend", choices=["threads", "mpi", "nccl"], default="threads")
    parser.add_argument("--ranks", type=int, metavar="N")
    parser.add_argument("--preset", metavar="P")
    parser.add_argument("--seed", type=int, default=0, help="seed of the A/A splits (default %(default)s)")
    parser.add_argument("--machine-class", help="store under this machine class instead of the derived one")
    parser.add_argument("--baselines", default=str(_baseline.DEFAULT_BASELINES), help="baselines root (default: %(default)s)")
    parser.add_argument("--no-store", action="store_true", help="report only; leave calibration.json alone")
    parser.add_argument("--out", metavar="DIR", help="report folder (default: reports/calibrate-<time>)")
    parser.set_defaults(func=_cmd_calibrate)
