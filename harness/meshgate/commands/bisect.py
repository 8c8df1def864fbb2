"""`meshgate bisect --good REV --bad REV [CASES]`: the bisection of timeline/culprit.py from the
command line; prints the culprit, why, what was tested and where revert.md is. Exit 0 a culprit
is isolated, 1 none, 2 unusable input."""

from __future__ import annotations

import argparse
import pathlib
import sys
from typing import Any

from ..gate.ab import DEFAULT_RUNS, CaseFilter
from ..timeline import culprit
from ..system import progress
from .options import add_experiment_arguments, benchmark_from_args, case_timeout_seconds, runs_per_side


def request_from_args(args: argparse.Namespace) -> culprit.BisectRequest:
    return culprit.BisectRequest(
        good=args.good, bad=args.bad,
        cases=CaseFilter(cases=list(args.cases), suites=list(args.suite), tags=list(args.tag),
                         case_patterns=list(args.case)),
        runs=args.runs, max_runs=args.max_runs, revert_runs=args.revert_runs, backend=args.backend,
        ranks=args.ranks, cpus=args.cpus, impl=args.impl, preset=args.preset, seed=args.seed, max_gate=args.max_gate,
        machine_class=args.machine_class, case_timeout=args.case_timeout,
        out=pathlib.Path(args.out) if args.out else None, repo=pathlib.Path(args.repo) if args.repo else None,
        json=pathlib.Path(args.json) if args.json else None, verbose=args.verbose,
        benchmark=benchmark_from_args(args))


def _cmd_bisect(args: argparse.Namespace) -> int:
    progress.set_quiet(args.quiet)
    result = culprit.run_request(request_from_args(args))
    if result.error:
        print(result.error, file=sys.stderr)
    for line in result.lines():
        print(line)
    return result.code


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "bisect", help="find the commit that made the selected cases fail or slow down, and whether to revert it",
        description="Builds --good and --bad, finds the target cases (fail at bad and pass at good, or a "
                    "confirmed A/B regression), binary-searches good..bad with the same interleaved A/B "
                    "against good at every step (unbuildable commits skipped), confirms the culprit "
                    "against its parent and writes revert.md. With --google-benchmark TARGET every commit builds "
                    "that Google Benchmark binary and its benchmarks are the cases. Exit 0 culprit found, 1 none, "
                    "2 unusable input.")
    parser.add_argument("--good", required=True, metavar="REV", help="a revision without the problem")
    parser.add_argument("--bad", required=True, metavar="REV", help="a later revision with it")
    add_experiment_arguments(parser, "bisect", DEFAULT_RUNS)
    parser.add_argument("--revert-runs", type=runs_per_side, default=culprit.REVERT_RUNS, metavar="K",
                        help="runs per side of the culprit-vs-parent A/B (default %(default)s: revert grade)")
    parser.add_argument("--case-timeout", type=case_timeout_seconds, metavar="S",
                        help="seconds a case may run before it is an error, which counts as slow (runner default 300; "
                             "0: no limit; with --google-benchmark, the limit of one launch of the "
                             "binary)")
    parser.add_argument("--json", metavar="F", help="also write the bisection's JSON document to F")
    parser.set_defaults(func=_cmd_bisect)
