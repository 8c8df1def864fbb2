"""Turning the CASES arguments and filters of `meshgate run`/`list` into the runner's
selection: existing paths are case files or folders, anything else shaped like a case id
(`suite/name`, fnmatch patterns allowed) selects cases by id."""

from __future__ import annotations

import argparse
import math
from pathlib import Path

from . import build, impls
from .launch import Selection

CASE_SUFFIXES = (".yaml", ".yml")


class SelectionError(Exception):
    """A CASES argument that is neither an existing path nor a case id."""


RUN_DEFAULT = "the cases of cases/ tagged smoke"


def add_selection_arguments(parser: argparse.ArgumentParser, default: str = RUN_DEFAULT) -> None:
    """CASES and the --suite/--tag/--case filters; `default` says what no CASES and no filter select."""
    parser.add_argument("cases", nargs="*", metavar="CASES",
                        help=f"case files or folders, or case ids / fnmatch patterns such as "
                             f"layout-algebra/coalesce-* (default: {default})")
    parser.add_argument("--suite", action="append", default=[], metavar="S",
                        help="only cases of this suite (repeatable)")
    parser.add_argument("--tag", action="append", default=[], metavar="T",
                        help="only cases with this tag (repeatable)")
    parser.add_argument("--case", action="append", default=[], metavar="ID",
                        help="only this case id or fnmatch pattern (repeatable)")


def add_backend_arguments(parser: argparse.ArgumentParser) -> None:
    """--backend and --ranks, as every command that launches the runner takes them."""
    parser.add_argument("--backend", choices=["threads", "mpi", "nccl"], default="threads",
                        help="ranks as threads of one runner (default), or MPI/NCCL processes "
                             "started with mpirun (srun inside a Slurm allocation)")
    parser.add_argument("--ranks", type=rank_count, metavar="N",
                        help="threads: cap on the world size; mpi/nccl: number of processes")
    impls.add_argument(parser)


def rank_count(text: str) -> int:
    """--ranks: a whole number >= 1, checked here so that a bad value is a usage error before
    anything builds or claims a report folder."""
    try:
        ranks = int(text)
    except ValueError:
        ranks = 0
    if ranks < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: a whole number of ranks >= 1")
    return ranks


def case_timeout_seconds(text: str) -> float:
    """--case-timeout: finite seconds >= 0 (0 turns the limit off), checked here so that a bad
    value is a usage error before anything builds or launches."""
    try:
        seconds = float(text)
    except ValueError:
        seconds = math.nan
    if not math.isfinite(seconds) or seconds < 0:
        raise argparse.ArgumentTypeError(f"{text!r}: a finite number of seconds >= 0 (0 = no limit)")
    return seconds


def add_memory_limit_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--memory-limit", metavar="SIZE",
                        help="reject cases whose estimated host memory is above SIZE, e.g. 64GiB "
                             "(the runner's default is 16GiB; a case's memory_limit: key wins)")


def build_selection(args: argparse.Namespace, root: Path, default_tags: list[str]) -> Selection:
    """The selection `args` asks for; with no CASES and no filter at all, cases/ restricted to
    `default_tags`."""
    paths: list[str] = []
    patterns: list[str] = list(args.case)
    for item in args.cases:
        if Path(item).exists():
            paths.append(item)
        elif item.endswith(CASE_SUFFIXES) or item.startswith((".", "/")) or "/" not in item:
            raise SelectionError(f"{item}: no such case file or folder, and not a case id "
                                 f"(ids look like <suite>/<name>)")
        else:
            patterns.append(item)
    nothing_asked = not (args.cases or args.suite or args.tag or args.case)
    return Selection(paths=paths or [str(build.default_cases(root))], suites=list(args.suite),
                     tags=list(args.tag) or (list(default_tags) if nothing_asked else []),
                     cases=patterns)
