"""`meshgate run`: the cases of a run session (run/session.py) from the command line; prints
the stored-timing lines, the collectives' tables and the summary, and exits with the results
CONTRACT code (or 128 + the signal that stopped it)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..run import session
from .options import (add_backend_arguments, add_cpus_argument, add_memory_limit_argument, add_selection_arguments,
                      case_timeout_seconds)


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "run", help="run cases and write reports/<run-id>/",
        description="Builds meshgate-runner, runs the selected cases (default: the smoke suite "
                    "of cases/ on the threads backend), recovers from runner crashes, repeats "
                    "performance cases in separate processes, writes the report and exits 0 "
                    "(all pass/skip), 1 (a failure, or a changed plan or signal against "
                    "--baseline) or 2 (an error).")
    add_selection_arguments(parser)
    add_backend_arguments(parser)
    add_cpus_argument(parser)
    parser.add_argument("--baseline", metavar="DIR",
                        help="check the deterministic signals against DIR/signals (or "
                             "DIR/../signals), which gates, and compare timing with DIR's "
                             "per-machine results (baselines or baselines/<machine>), which "
                             "is informational")
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--out", metavar="DIR",
                       help="where the run lands (default: reports/<run-id>)")
    where.add_argument("--resume", metavar="DIR",
                       help="continue the killed run in DIR (give the same cases and filters): the "
                            "cases with a row in DIR/results.jsonl are kept, the rest run")
    parser.add_argument("--preset", metavar="P",
                        help="CMake preset to build the runner with (default: ci/preset)")
    parser.add_argument("--runner", metavar="PATH",
                        help="run this prebuilt runner (such as one with kinds of your own, "
                             "docs/own-kernels.md) instead of building one; as MESHGATE_RUNNER")
    parser.add_argument("--allow-all-skipped", action="store_true",
                        help="exit 0 even when every selected case was skipped (by default a run "
                             "that tested nothing, e.g. --backend nccl without a GPU, exits 2)")
    parser.add_argument("--case-timeout", type=case_timeout_seconds, metavar="S",
                        help="seconds a case may run before it is an error (runner default 300; 0: no "
                             "limit)")
    add_memory_limit_argument(parser)
    parser.set_defaults(func=run_command)


def request_from_args(args: argparse.Namespace) -> session.RunRequest:
    return session.RunRequest(
        cases=list(args.cases), suites=list(args.suite), tags=list(args.tag), case_patterns=list(args.case),
        backend=args.backend, ranks=args.ranks, cpus=args.cpus, impl=args.impl, preset=args.preset, runner=args.runner,
        case_timeout=args.case_timeout, memory_limit=args.memory_limit,
        out=Path(args.out) if args.out else None, resume=Path(args.resume) if args.resume else None,
        allow_all_skipped=args.allow_all_skipped)


def run_command(args: argparse.Namespace) -> int:
    execution, outcome = session.run(request_from_args(args),
                                     baseline=Path(args.baseline) if args.baseline else None)
    if outcome is None:
        sys.stderr.write(execution.error)
        return execution.code
    for line in outcome.errors:
        print(line, file=sys.stderr)
    for line in outcome.lines:
        print(line)
    print(outcome.text())
    return outcome.code
