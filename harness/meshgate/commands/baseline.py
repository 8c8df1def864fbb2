"""`meshgate baseline update|check`: the baseline store (gate/store.py) from the command line.

`meshgate baseline update RESULTS.json` accepts the results as the baseline of their suites on
their machine class and writes the deterministic signals of every case to
`baselines/signals/<suite>.json` (with `--signals-only`, nothing else).

`meshgate baseline check RESULTS.json` compares every case's signals with the committed ones
(gate/checks.py) and exits 1 on a changed plan or signal, or on a case that passed and now
fails (a new failure); 0 otherwise (new, removed and skipped cases are listed); 2 on unusable
input.
"""

from __future__ import annotations

import argparse
import pathlib
import sys
from typing import Any, Optional

from ..core.results import InputError, load_results
from ..gate import checks, store


def _cmd_update(args: argparse.Namespace) -> int:
    results_path = pathlib.Path(args.results)
    signals_dir = pathlib.Path(args.signals) if args.signals else pathlib.Path(args.baselines) / store.SIGNALS_DIR_NAME
    suites = args.suite or None
    try:
        # Refusals first, so that a refused update writes neither kind of baseline.
        store.refuse_failures(results_path, load_results(results_path), suites, args.accept_failures)
        written = []
        if not args.signals_only:
            written = store.update_baseline(
                results_path,
                pathlib.Path(args.baselines),
                machine_class_override=args.machine_class,
                force=args.force,
                suites=suites,
            )
        outcome = store.update_signals(results_path, signals_dir, suites=suites, prune=args.prune,
                                 accept_failures=args.accept_failures)
    except InputError as e:
        print(f"meshgate baseline: {e}", file=sys.stderr)
        return 2
    for path in written:
        print(f"baseline written: {path}")
    for path in outcome.written:
        print(f"signals written: {path}")
    if outcome.unchanged:
        print(f"signals unchanged: {len(outcome.unchanged)} suite file(s) in {signals_dir}")
    if outcome.kept_skipped:
        print(f"signals kept for {len(outcome.kept_skipped)} case(s) skipped here (recorded where "
              f"they could run), e.g. {outcome.kept_skipped[0]}")
    if outcome.kept_absent:
        print(f"signals kept for {len(outcome.kept_absent)} case(s) not in the results, e.g. "
              f"{outcome.kept_absent[0]}: pass --prune to drop them")
    if outcome.pruned:
        print(f"signals dropped for {len(outcome.pruned)} case(s) not in the results")
    return 0


def run_check(results_path: pathlib.Path, signals_dir: pathlib.Path, out_dir: Optional[pathlib.Path],
              json_path: Optional[pathlib.Path] = None) -> int:
    """`meshgate baseline check`: the signal check of a results file against signals_dir
    (gate/checks.py), its lines printed: the plan diffs and changed signals. Writes
    signals-report.md and signals-check.json into out_dir (when given) and the check as JSON to
    json_path. Returns 0, 1 (a change or new failure) or 2."""
    try:
        results = load_results(results_path)
    except InputError as e:
        print(f"meshgate baseline check: {e}", file=sys.stderr)
        return 2
    found = checks.check_signals(results, results_path, signals_dir, out_dir, json_path)
    for line in found.errors:
        print(line, file=sys.stderr)
    for line in found.lines:
        print(line)
    return found.code


def _cmd_check(args: argparse.Namespace) -> int:
    results_path = pathlib.Path(args.results)
    out_dir = pathlib.Path(args.out) if args.out else results_path.resolve().parent
    return run_check(results_path, pathlib.Path(args.signals), out_dir,
                     pathlib.Path(args.json) if args.json else None)


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("baseline", help="manage accepted baselines, check signals against them")
    sub = parser.add_subparsers(dest="baseline_command", required=True)
    update = sub.add_parser(
        "update", help="accept RESULTS.json as the new baseline of its suites",
        description="Writes baselines/<machine-class>/<suite>.json (results with timing, for this "
                    "machine class) and baselines/signals/<suite>.json (the deterministic signals "
                    "of every case, committed).")
    update.add_argument("results", metavar="RESULTS.json", help="the results.json to accept")
    update.add_argument("--baselines", default=str(store.default_baselines()), help="baselines root (default: %(default)s)")
    update.add_argument("--machine-class", help="file under this machine class instead of the derived one")
    update.add_argument("--suite", action="append", help="accept only this suite (repeatable)")
    update.add_argument("--force", action="store_true", help="replace despite a schema or machine-class mismatch")
    update.add_argument("--signals", metavar="DIR",
                        help="signals folder (default: <baselines>/signals)")
    update.add_argument("--signals-only", action="store_true",
                        help="write only the signals, no per-machine timing baseline")
    update.add_argument("--prune", action="store_true",
                        help="drop signals of cases the results lack (default: keep them)")
    update.add_argument("--accept-failures", action="store_true",
                        help="record failing or erroring cases instead of refusing")
    update.set_defaults(func=_cmd_update)
    chk = sub.add_parser(
        "check", help="compare RESULTS.json's deterministic signals with the committed ones "
                      "(exit 1 on a changed plan or signal or a new failure)",
        description="Compares every case's deterministic signals (status, plan, bytes, modeled "
                    "cost, GEMM algorithm on the same GPU, counts) with baselines/signals. No "
                    "timing is involved. Exit 1 when a plan or signal changed or a case that "
                    "passed now fails or errors; 0 otherwise (new, removed and skipped cases are "
                    "listed); 2 on unusable input.")
    chk.add_argument("results", metavar="RESULTS.json", help="the results.json whose signals to check")
    chk.add_argument("--signals", metavar="DIR", default=str(store.default_signals()),
                     help="committed signals folder (default: %(default)s)")
    chk.add_argument("--out", metavar="DIR",
                     help="where signals-report.md and signals-check.json go (default: the "
                          "results file's folder)")
    chk.add_argument("--json", metavar="F", help="also write the check as JSON to F")
    chk.set_defaults(func=_cmd_check)
