#!/usr/bin/env python3
"""Times the layout algebra of PyTorch's torch.distributed._pycute against meshgate's.

For each op of the layout micro-benchmarks (lib/layout/layout_bench.cpp) this times the same call
on the same inputs in pycute with timeit, runs meshgate_layout_bench for that op with JSON
output, and prints pycute ns / meshgate ns. It is a benchmark to run on demand, never a test:
timings depend on the machine and on whatever else runs on it.

Both sides count the CPU time of this process by default (--clock wall for elapsed time): on a
shared machine elapsed time also counts the time other programs hold the core. Both report the
best of several measurements (timeit's best repeat, the fastest benchmark repetition), the one
least disturbed by other work, with the medians beside them to show how noisy the machine was;
and the two sides alternate round by round, so that a burst of load elsewhere hits both.

    python3 bench/vs_pytorch.py --bench build/release/lib/layout/meshgate_layout_bench
    cmake --build build/release --target bench_vs_pytorch      # the same, through CMake
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
import timeit
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

DEFAULT_BENCH = Path(__file__).resolve().parent.parent / "build/release/lib/layout/meshgate_layout_bench"
DEFAULT_GOAL = 250.0


@dataclass
class Op:
    label: str  # what the row shows
    benchmark: str  # the BM_* of layout_bench.cpp that times the same call
    call: Callable[[], object]  # the pycute call, inputs bound


def pycute_ops() -> list[Op]:
    """The calls of layout_bench.cpp, written with pycute's Layout (shape, stride) pairs."""
    from torch.distributed._pycute import Layout, coalesce, complement, composition, right_inverse

    four_modes = Layout(((2, 2), (2, 2)), ((32, 8), (4, 1)))  # ((2,2),(2,2)):((32,8),(4,1))
    nested = Layout((2, (1, 6)), (1, (6, 2)))  # (2,(1,6)):(1,(6,2))
    comp_a_int = Layout((10, 8, 6, 4), (7, 5, 3, 2))
    comp_b_int = Layout(6, 12)
    comp_a_tuple = Layout((4, 8, 2), (2, 8, 1))
    comp_b_tuple = Layout((4, 2, 2), (2, 8, 1))
    two_modes = Layout((2, 2), (4, 1))
    four_flat = Layout((2, 3, 2, 2), (96, 8, 2, 1))
    to_invert = Layout((2, 3, 4), (1, 8, 2))
    return [
        Op("coalesce ((2,2),(2,2)):((32,8),(4,1))", "BM_Coalesce", lambda: coalesce(four_modes)),
        Op("coalesce (2,(1,6)):(1,(6,2))", "BM_CoalesceNested", lambda: coalesce(nested)),
        Op("composition, int B 6:12", "BM_CompositionIntB", lambda: composition(comp_a_int, comp_b_int)),
        Op("composition, tuple B (4,2,2):(2,8,1)", "BM_CompositionTupleB",
           lambda: composition(comp_a_tuple, comp_b_tuple)),
        Op("complement (2,2):(4,1), 16", "BM_Complement", lambda: complement(two_modes, 16)),
        Op("complement (2,3,2,2):(96,8,2,1), 384", "BM_ComplementFourModes",
           lambda: complement(four_flat, 384)),
        Op("right_inverse (2,3,4):(1,8,2)", "BM_RightInverse", lambda: right_inverse(to_invert)),
    ]


def time_pycute(call: Callable[[], object], repeats: int, clock: str) -> list[float]:
    """ns per call of each of `repeats` timeit measurements, each long enough (autorange) to
    make the timer's resolution negligible."""
    timer = timeit.Timer(call, timer=time.process_time if clock == "cpu" else time.perf_counter)
    number, _ = timer.autorange()
    return [total / number * 1e9 for total in timer.repeat(repeat=repeats, number=number)]


def min_time_flag(bench: Path, seconds: float) -> str:
    """Google Benchmark 1.8 wants '0.2s'; 1.7 only understands '0.2'."""
    with_unit = f"--benchmark_min_time={seconds}s"
    probe = subprocess.run([str(bench), with_unit, "--benchmark_list_tests=true"],
                           capture_output=True, text=True)
    return with_unit if probe.returncode == 0 else f"--benchmark_min_time={seconds}"


def time_meshgate(bench: Path, benchmarks: list[str], repetitions: int, min_time: str,
                  clock: str) -> dict[str, list[float]]:
    """ns per call of every repetition of each benchmark, from the binary's JSON output."""
    command = [str(bench), "--benchmark_filter=^(" + "|".join(benchmarks) + ")$",
               f"--benchmark_repetitions={repetitions}", min_time, "--benchmark_format=json"]
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode != 0:
        sys.exit(f"{' '.join(command)} failed ({result.returncode}):\n{result.stderr}")
    scale = {"ns": 1.0, "us": 1e3, "ms": 1e6, "s": 1e9}
    field = "cpu_time" if clock == "cpu" else "real_time"
    times: dict[str, list[float]] = {name: [] for name in benchmarks}
    for row in json.loads(result.stdout)["benchmarks"]:
        if row.get("run_type", "iteration") == "iteration" and row["run_name"] in times:
            times[row["run_name"]].append(row[field] * scale[row["time_unit"]])
    missing = [name for name, values in times.items() if not values]
    if missing:
        sys.exit(f"{bench} has no benchmark named {', '.join(missing)}")
    return times


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bench", type=Path, default=DEFAULT_BENCH,
                        help="meshgate_layout_bench of an optimised build (default: %(default)s)")
    parser.add_argument("--rounds", type=int, default=3,
                        help="alternations of pycute and meshgate timings (default: %(default)s)")
    parser.add_argument("--repeats", type=int, default=5,
                        help="timeit repeats per op and round (default: %(default)s)")
    parser.add_argument("--repetitions", type=int, default=10,
                        help="benchmark repetitions per round (default: %(default)s)")
    parser.add_argument("--min-time", type=float, default=0.2,
                        help="seconds per benchmark repetition (default: %(default)s)")
    parser.add_argument("--clock", choices=("cpu", "wall"), default="cpu",
                        help="CPU time of the process or elapsed time (default: %(default)s)")
    parser.add_argument("--goal", type=float, default=DEFAULT_GOAL,
                        help="the ratio every op should reach (default: %(default)s)")
    parser.add_argument("--check", action="store_true",
                        help="exit 1 when an op's ratio is below --goal")
    parser.add_argument("--json", type=Path, help="also write the measurements to this file")
    args = parser.parse_args()
    if not args.bench.is_file():
        sys.exit(f"no benchmark binary at {args.bench}: build one with\n"
                 "  cmake --preset release && cmake --build build/release --target meshgate_layout_bench\n"
                 "or name it with --bench")

    ops = pycute_ops()
    min_time = min_time_flag(args.bench, args.min_time)
    pycute_ns: dict[str, list[float]] = {op.benchmark: [] for op in ops}
    meshgate_ns: dict[str, list[float]] = {op.benchmark: [] for op in ops}
    for _ in range(args.rounds):
        for op in ops:
            pycute_ns[op.benchmark] += time_pycute(op.call, args.repeats, args.clock)
        for name, values in time_meshgate(args.bench, list(meshgate_ns), args.repetitions, min_time,
                                          args.clock).items():
            meshgate_ns[name] += values

    print(f"{args.clock} time per call; best of {args.rounds} rounds, meshgate's median beside its best")
    header = f"{'op':<40} {'pycute ns':>10} {'meshgate ns':>12} {'(median)':>9} {'ratio':>7}"
    print(header)
    print("-" * len(header))
    rows = []
    for op in ops:
        pycute_best = min(pycute_ns[op.benchmark])
        meshgate_best = min(meshgate_ns[op.benchmark])
        ratio = pycute_best / meshgate_best
        mark = "" if ratio >= args.goal else f"  below {args.goal:g}x"
        print(f"{op.label:<40} {pycute_best:>10.0f} {meshgate_best:>12.1f} "
              f"{statistics.median(meshgate_ns[op.benchmark]):>9.1f} {ratio:>6.0f}x{mark}")
        rows.append({"op": op.benchmark, "pycute_ns": pycute_best, "meshgate_ns": meshgate_best,
                     "pycute_median_ns": statistics.median(pycute_ns[op.benchmark]),
                     "meshgate_median_ns": statistics.median(meshgate_ns[op.benchmark]), "ratio": ratio})
    worst = min(rows, key=lambda row: row["ratio"])
    print(f"\nlowest ratio {worst['ratio']:.0f}x ({worst['op']}); goal {args.goal:g}x on every op")
    if args.json:
        args.json.write_text(json.dumps({"goal": args.goal, "clock": args.clock, "ops": rows}, indent=2) + "\n")
    return 1 if args.check and worst["ratio"] < args.goal else 0


if __name__ == "__main__":
    sys.exit(main())
