"""`meshgate compare BASE.json NEW.json`: a verdict per case between two results files (the
decision is gate/compare.py's, the reports gate/render.py's). Exit 1 when any case is a
regression or a correctness failure, 0 otherwise (inconclusive never blocks), 2 on unusable
input. Two separate runs (not one interleaved A/B) never fail on timing alone: their timing
verdicts are `inconclusive (separate runs)` unless --trust-separate-runs."""

from __future__ import annotations

import argparse
import pathlib
import sys
from typing import Any

from ..core import files, schema
from ..core.results import InputError, load_results
from ..gate import render, store
from ..gate.compare import compare_results, interleaved, verdicts_json
from .options import add_max_gate_argument


def _cmd_compare(args: argparse.Namespace) -> int:
    base_path, new_path = pathlib.Path(args.base), pathlib.Path(args.new)
    try:
        base = load_results(base_path)
        new = load_results(new_path)
        floors = store.calibration_for(
            new,
            base_path=base_path,
            explicit=pathlib.Path(args.calibration) if args.calibration else None,
            machine_class=args.machine_class,
        )
    except InputError as e:
        print(f"meshgate compare: {e}", file=sys.stderr)
        return 2
    separate = not interleaved(base.get("run") or {}, new.get("run") or {})
    if separate:
        # First, before any verdict: what kind of evidence the verdicts below rest on.
        trust = ("--trust-separate-runs: their timing is judged as if they were one A/B"
                 if args.trust_separate_runs else
                 "no timing difference between them is more than inconclusive "
                 "(--trust-separate-runs judges them as one A/B)")
        print(f"meshgate compare: warning: {base_path} and {new_path} come from separate runs "
              f"(ids {(base.get('run') or {}).get('id', '?')!r} and "
              f"{(new.get('run') or {}).get('id', '?')!r}), not one interleaved A/B: a drift of "
              f"the machine between them reads as a change of the code; `meshgate ab` "
              f"interleaves the two builds; {trust}", file=sys.stderr, flush=True)
    comparison = compare_results(
        base, new, floors, base_label=str(base_path), new_label=str(new_path), max_gate=args.max_gate,
        separate_runs=separate and not args.trust_separate_runs,
    )
    common = set(comparison.base_rows) & set(comparison.new_rows)
    if not common:
        # Every case would be "new" or "missing": nothing was judged, which must not pass a gate.
        print(f"meshgate compare: nothing to compare: {base_path} ({len(comparison.base_rows)} "
              f"case(s)) and {new_path} ({len(comparison.new_rows)} case(s)) have no case in "
              f"common", file=sys.stderr)
        return 2
    print(render.format_table(comparison))
    if args.json:
        json_path = pathlib.Path(args.json)
        json_path.parent.mkdir(parents=True, exist_ok=True)
        verdicts = verdicts_json(comparison)
        schema.check_if_asked(verdicts, "verdicts-1", json_path)
        files.write_json_atomic(json_path, verdicts)
    out_dir = pathlib.Path(args.out) if args.out else files.default_report_dir("compare")
    render.write_comparison(out_dir, comparison, new)
    print(f"report: {out_dir / 'report.md'}")
    return comparison.exit_code()


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "compare", help="verdict per case between two results files (exit 1 on regression)"
    )
    parser.add_argument("base", metavar="BASE.json", help="results.json of the reference run (or a baseline)")
    parser.add_argument("new", metavar="NEW.json", help="results.json of the run under test")
    parser.add_argument("--json", metavar="VERDICTS.json", help="also write the verdicts as JSON")
    parser.add_argument("--out", metavar="DIR", help="report directory (default: reports/compare-<time>)")
    parser.add_argument("--calibration", metavar="FILE", help="calibration.json with noise floors")
    parser.add_argument("--machine-class", help="machine class whose calibration applies")
    parser.add_argument(
        "--trust-separate-runs", action="store_true",
        help="judge the timing of two separate runs (not one interleaved `meshgate ab`) as if "
             "they were one A/B, so a regression can fail the comparison; without it their timing "
             "verdicts are at most 'inconclusive (separate runs)', since a drift of the machine "
             "between the runs reads as a change of the code",
    )
    add_max_gate_argument(parser)
    parser.set_defaults(func=_cmd_compare)
