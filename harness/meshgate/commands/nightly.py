"""`meshgate nightly`: the nightly job of timeline/nightly.py from the command line (its
steps, outputs and exit code are described there)."""

from __future__ import annotations

import argparse
import pathlib
import sys
from typing import Any

from ..gate import store
from ..system import progress
from ..timeline import history, nightly
from .options import add_backend_arguments, add_quiet_argument, case_timeout_seconds, runs_per_side


def _cmd_nightly(args: argparse.Namespace) -> int:
    progress.set_quiet(args.quiet)
    options = nightly.Options(
        cases=list(args.cases), backend=args.backend, ranks=args.ranks, impl=args.impl, runs=args.runs,
        preset=args.preset, case_timeout=args.case_timeout,
        out=pathlib.Path(args.out) if args.out else None,
        signals=pathlib.Path(args.signals), state=pathlib.Path(args.state),
        last_good=args.last_good, db=pathlib.Path(args.db), bisect=not args.no_bisect,
    )
    try:
        return nightly.nightly(options).exit_code
    except nightly.NightlyError as e:
        print(f"meshgate nightly: {e}", file=sys.stderr)
        return 2


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "nightly", help="every case at HEAD, signals against the committed baseline, A/B of the "
                        "last good commit against HEAD",
        description="Runs every case at HEAD, checks the deterministic signals against "
                    "baselines/signals (no timing involved), then gates timing with an "
                    "interleaved `meshgate ab` of the last good commit against HEAD on the perf "
                    "cases. HEAD becomes the last good commit when both pass. Exit 0 pass, 1 a "
                    "failure, changed signal or confirmed regression, 2 errors or unusable input.")
    parser.add_argument("cases", nargs="*", metavar="CASES",
                        help="case files or folders (default: cases/, every tag)")
    add_backend_arguments(parser)
    parser.add_argument("--runs", type=runs_per_side, metavar="K", help="A/B runs per side (default: ab's)")
    parser.add_argument("--preset", metavar="P", help="CMake preset of the builds")
    parser.add_argument("--case-timeout", type=case_timeout_seconds, metavar="S",
                        help="seconds a case may run before it becomes an error row (run's default; 0: "
                             "no limit)")
    parser.add_argument("--out", metavar="DIR", help="report folder (default: reports/nightly-<time>)")
    parser.add_argument("--signals", metavar="DIR",
                        default=str(store.default_signals()),
                        help="committed signals (default: %(default)s)")
    parser.add_argument("--state", metavar="F", default=str(nightly.default_state()),
                        help="where the last good commit is kept (default: %(default)s)")
    parser.add_argument("--last-good", metavar="REV",
                        help="A/B against this revision instead of the recorded last good commit")
    parser.add_argument("--db", metavar="F", default=str(history.default_db()),
                        help="history database the night is added to (default: %(default)s)")
    add_quiet_argument(parser)
    parser.add_argument("--no-bisect", action="store_true",
                        help="report new change points without bisecting them")
    parser.set_defaults(func=_cmd_nightly)
