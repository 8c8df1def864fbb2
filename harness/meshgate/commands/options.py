"""The command-line options several commands share, and the checks of their values that make a
bad value a usage error (exit 2) before anything builds, launches or claims a report folder:
the case selection, backend, ranks and implementation, case timeout, memory limit, runs per
side, the gate, the verbose build switch and the Google Benchmark side of ab and bisect."""

from __future__ import annotations

import argparse
import math
from pathlib import Path

from ..core import tool_results
from ..gate import ab, stats, verdict
from ..core.markup import pct
from ..system import gbench, revisions
from ..system.launch import Selection
from ..system.selection import build_selection

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


def selection_from_args(args: argparse.Namespace, root: Path, default_tags: list[str]) -> Selection:
    """The selection the CASES and filters of `args` ask for (selection.build_selection)."""
    return build_selection(args.cases, args.suite, args.tag, args.case, root, default_tags)


def add_impl_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--impl", metavar="NAME", default=None,
                        help="the implementation under test: meshgate (default), torch, "
                             "torch@PYTHON (another interpreter or venv), or NAME=COMMAND for "
                             "any program speaking meshgate.impl/1 (docs/impl-protocol.md)")


def add_backend_arguments(parser: argparse.ArgumentParser) -> None:
    """--backend and --ranks, as every command that launches the runner takes them."""
    parser.add_argument("--backend", choices=["threads", "mpi", "nccl"], default="threads",
                        help="ranks as threads of one runner (default), or MPI/NCCL processes "
                             "started with mpirun (srun inside a Slurm allocation)")
    parser.add_argument("--ranks", type=rank_count, metavar="N",
                        help="threads: cap on the world size; mpi/nccl: number of processes")
    add_impl_argument(parser)


def add_cpus_argument(parser: argparse.ArgumentParser) -> None:
    """--cpus, for the commands that time cases: passed to every runner they launch."""
    parser.add_argument("--cpus", type=cpu_list, metavar="LIST",
                        help="pin each runner (its rank threads and the processes it starts) to these "
                             "CPUs, as taskset writes them: 0, 0-3, 0,2; results.json records the pinning")


def cpu_list(text: str) -> str:
    """--cpus: a taskset-style CPU list, checked here so that a bad one is a usage error before
    anything builds or launches; the runner reads the same text."""
    ranges = [item.partition("-") for item in text.split(",")]
    if not all(low.isdigit() and low.isascii() and (not dash or (high.isdigit() and high.isascii() and int(high) >= int(low)))
               for low, dash, high in ranges):
        raise argparse.ArgumentTypeError(f"{text!r}: a CPU list such as 0, 0-3 or 0,2")
    return text


def whole_number_of(noun: str, text: str) -> int:
    """A count option's value: a whole number >= 1, checked while parsing so that a bad value is
    a usage error before anything builds or claims a report folder."""
    try:
        count = int(text)
    except ValueError:
        count = 0
    if count < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: a whole number of {noun} >= 1")
    return count


def rank_count(text: str) -> int:
    """--ranks."""
    return whole_number_of("ranks", text)


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


def max_gate_fraction(text: str) -> float:
    """--max-gate accepts a fraction (0.1) or a percentage (10 or 10%)."""
    value = text.strip().rstrip("%").strip()
    try:
        number = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number such as 0.1 or 10%") from None
    fraction = number / 100.0 if text.strip().endswith("%") or number >= 1.0 else number
    if not 0.0 < fraction < 1.0:
        raise argparse.ArgumentTypeError(f"{text!r}: the gate must lie between 0 and 100 %")
    if fraction < stats.MIN_EFFECT:
        raise argparse.ArgumentTypeError(
            f"{text!r}: no gate is narrower than the {pct(stats.MIN_EFFECT)} minimum effect "
            "(docs/gate.md), so nothing could pass")
    return fraction


def add_max_gate_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--max-gate", type=max_gate_fraction, default=stats.MAX_GATE, metavar="G",
                        help="the largest regression you accept to miss: PASS needs the gate (max(2 %%, "
                             "3 x noise floor)) at most G and the CI's upper bound within the gate "
                             "(a fraction or a percentage; default 10%%)")


def runs_per_side(text: str) -> int:
    """--runs and the like: an integer no smaller than the fewest runs per side with which the
    decision rule can reach alpha (5 at alpha = 0.01); fewer could not judge any case."""
    try:
        k = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of runs") from None
    fewest = stats.smallest_k_reaching()
    if k < fewest:
        raise argparse.ArgumentTypeError(
            f"{k}: at least {fewest} runs per side, since fewer can never reach alpha = {stats.ALPHA}")
    return k


def add_quiet_argument(parser: argparse.ArgumentParser) -> None:
    """-q/--quiet of a long command: no progress lines (system/progress.set_quiet)."""
    parser.add_argument("-q", "--quiet", action="store_true",
                        help="no progress: neither the phases' k of N with elapsed time and ETA, nor the "
                             "per-run and build progress lines (verdicts, reports and errors still show)")


def add_verbose_argument(parser: argparse.ArgumentParser) -> None:
    """-v/--verbose of a command that builds revisions: their build output on the terminal."""
    parser.add_argument("-v", "--verbose", action="store_true",
                        help=f"show each build's output as it comes (by default it goes to "
                             f"build/<preset>/{revisions.BUILD_LOG} in the revision's worktree, and only a "
                             f"failing build's last lines are shown)")


def add_experiment_arguments(parser: argparse.ArgumentParser, report_prefix: str, default_runs: int) -> None:
    """The options `ab` shares with the commands built on it (bisect): the case selection,
    runs per side, backend, preset, seed, gate, calibration, report folder and repository."""
    add_selection_arguments(parser, default="the cases of the revision's cases/ tagged smoke, once per side "
                                             "for correctness, plus every performance case, timed")
    parser.add_argument("--runs", type=runs_per_side, default=default_runs, metavar="K",
                        help="runs per side (default %(default)s; 15 for revert-grade evidence)")
    parser.add_argument("--max-runs", type=runs_per_side, default=verdict.DEFAULT_MAX_RUNS, metavar="N",
                        help="budget of runs per side for a case still inconclusive after --runs: it gets more "
                             "interleaved runs (doubling) while its estimated need is within N, judged at a "
                             "spent-down alpha so that false alarms stay within alpha (default %(default)s; "
                             "equal to --runs: no adaptive runs)")
    add_backend_arguments(parser)
    add_cpus_argument(parser)
    parser.add_argument("--preset", metavar="P", help="CMake preset of every build (default: ci/preset)")
    parser.add_argument("--seed", type=int, help="seed of the run order (default: random, recorded)")
    add_max_gate_argument(parser)
    parser.add_argument("--machine-class", help="use this machine class's calibration")
    parser.add_argument("--out", metavar="DIR", help=f"report folder (default: reports/{report_prefix}-<time>)")
    parser.add_argument("--repo", metavar="DIR", help="git repository of the revisions (default: this checkout)")
    add_verbose_argument(parser)
    add_quiet_argument(parser)
    add_benchmark_arguments(parser)


def add_benchmark_arguments(parser: argparse.ArgumentParser) -> None:
    """--google-benchmark TARGET and how its launches run (system/gbench.py)."""
    group = parser.add_argument_group(
        "Google Benchmark", "time a Google Benchmark binary of each revision instead of meshgate's cases")
    group.add_argument("--google-benchmark", metavar="TARGET",
                       help="build the CMake target TARGET (a Google Benchmark binary, e.g. meshgate_layout_bench) "
                            f"in each revision's worktree, preset {ab.BENCHMARK_PRESET} unless --preset names "
                            "another; its benchmarks are the cases (CASES and --case: fnmatch patterns of their "
                            "names, e.g. 'BM_Coalesce*'), and each run launches the binary once")
    group.add_argument("--benchmark-clock", choices=list(tool_results.CLOCKS), default="real",
                       help="the samples: each repetition's real_time (wall clock, default) or cpu_time, which "
                            "leaves out time spent waiting for a CPU and is the steadier measure of a "
                            "single-threaded benchmark on a machine shared with other work")
    group.add_argument("--benchmark-repetitions", type=repetition_count, default=gbench.DEFAULT_REPETITIONS,
                       metavar="R", help="--benchmark_repetitions of each launch: the samples of one run "
                                         "(default %(default)s)")
    group.add_argument("--benchmark-min-time", type=min_time_seconds, metavar="S",
                       help="--benchmark_min_time of each launch, in seconds per repetition (default: the "
                            "binary's own, 0.5 s)")


def repetition_count(text: str) -> int:
    """--benchmark-repetitions."""
    return whole_number_of("repetitions", text)


def min_time_seconds(text: str) -> float:
    """--benchmark-min-time: finite seconds > 0."""
    try:
        seconds = float(text.strip().rstrip("s"))
    except ValueError:
        seconds = math.nan
    if not math.isfinite(seconds) or seconds <= 0:
        raise argparse.ArgumentTypeError(f"{text!r}: a finite number of seconds > 0, such as 0.05")
    return seconds


def benchmark_from_args(args: argparse.Namespace) -> "ab.BenchmarkOptions | None":
    """The --google-benchmark options of `args`, None without --google-benchmark."""
    target = getattr(args, "google_benchmark", None)
    if not target:
        return None
    return ab.BenchmarkOptions(target=target, clock=args.benchmark_clock, repetitions=args.benchmark_repetitions,
                               min_time=args.benchmark_min_time)
