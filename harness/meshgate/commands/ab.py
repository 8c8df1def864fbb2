"""`meshgate ab --base REV --candidate REV [CASES]`: the interleaved A/B of gate/ab.py from the
command line; prints the verdict table and where the report is. Exit codes as `meshgate
compare`: 1 confirmed regression or correctness failure, 0 otherwise, 2 unusable input or a
build that fails."""

from __future__ import annotations

import argparse
import pathlib
import sys
from typing import Any

from ..gate import ab
from ..system import progress
from ..gate.ab import CaseFilter
from .options import add_experiment_arguments, benchmark_from_args


def request_from_args(args: argparse.Namespace) -> ab.AbRequest:
    return ab.AbRequest(
        base=args.base, candidate=args.candidate,
        cases=CaseFilter(cases=list(args.cases), suites=list(args.suite), tags=list(args.tag),
                         case_patterns=list(args.case)),
        base_impl=args.base_impl, candidate_impl=args.candidate_impl, impl=args.impl, runs=args.runs,
        max_runs=args.max_runs, backend=args.backend, ranks=args.ranks, cpus=args.cpus, preset=args.preset, seed=args.seed,
        max_gate=args.max_gate, machine_class=args.machine_class,
        out=pathlib.Path(args.out) if args.out else None, repo=pathlib.Path(args.repo) if args.repo else None,
        verbose=args.verbose, confirm=not args.no_confirm, benchmark=benchmark_from_args(args),
        base_runner=args.base_runner, candidate_runner=args.candidate_runner)


def _cmd_ab(args: argparse.Namespace) -> int:
    progress.set_quiet(args.quiet)
    outcome = ab.run_request(request_from_args(args))
    if outcome.error:
        print(outcome.error, file=sys.stderr)
    for line in outcome.lines():
        print(line)
    return outcome.code


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "ab", help="interleaved A/B of two revisions' builds (exit 1 on a confirmed regression)",
        description="Builds --base and --candidate in git worktrees under build/ab/. Selects CASES (files, "
                    "folders or id patterns) and the --suite/--tag/--case filters; with none of them, the "
                    "cases `meshgate run` selects by default (tag smoke) plus every performance case of "
                    "the revision's cases/. Cases without a perf: block run once per side (correctness); "
                    "performance cases run --runs times per side in randomised ABBA order, inconclusive "
                    "ones get more runs up to --max-runs, and flagged ones (regressions and improvements) "
                    "are re-run in a fresh batch to confirm them by the same rule. With --google-benchmark "
                    "TARGET each revision builds that Google Benchmark binary instead, and its benchmarks "
                    "(selected by CASES and --case patterns of their names) are the timed cases, one launch "
                    "of the binary per run. With --base-runner and --candidate-runner two prebuilt runners "
                    "(e.g. a project's own, built elsewhere) run the same CASES and nothing is built.")
    parser.add_argument("--base", metavar="REV",
                        help="the revision to compare against (any git revision: branch, tag, "
                             "sha); HEAD when only the implementations differ")
    parser.add_argument("--candidate", metavar="REV",
                        help="the revision under test (a commit: uncommitted changes are not "
                             "part of it); HEAD when only the implementations differ")
    parser.add_argument("--base-impl", metavar="IMPL",
                        help="the implementation of the base side (default: --impl), e.g. "
                             "torch@/path/to/venv to compare two PyTorch environments")
    parser.add_argument("--candidate-impl", metavar="IMPL",
                        help="the implementation of the candidate side (default: --impl)")
    parser.add_argument("--base-runner", metavar="PATH",
                        help="a prebuilt runner as the base side (with --candidate-runner; instead of --base)")
    parser.add_argument("--candidate-runner", metavar="PATH",
                        help="a prebuilt runner as the candidate side (with --base-runner; instead of --candidate)")
    add_experiment_arguments(parser, "ab", ab.DEFAULT_RUNS)
    parser.add_argument("--no-confirm", action="store_true",
                        help="skip the confirmation batch (flagged cases then stand unconfirmed)")
    parser.set_defaults(func=_cmd_ab)
