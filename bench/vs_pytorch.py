#!/usr/bin/env python3
"""Times PyTorch's layout algebra and redistribution planner against meshgate's.

Two tables. Layout: for each op of the layout micro-benchmarks (lib/layout/layout_bench.cpp)
the same call on the same inputs in torch.distributed._pycute, against meshgate_layout_bench.
Planner: for each spec of BM_PlanAndMerge (lib/plan/plan_bench.cpp) the same src -> dst
redistribution on the same mesh with the same flattened dims, planned by DTensor without its
cache (_gen_transform_infos_non_cached, then the flattened-mesh merge _optimize_transform_infos,
as redistribute_local_tensor runs them) against meshgate_plan_bench. Each row prints
PyTorch ns / meshgate ns. It is a benchmark to run on demand, never a test: timings depend on
the machine and on whatever else runs on it.

Both sides count the CPU time of this process by default (--clock wall for elapsed time): on a
shared machine elapsed time also counts the time other programs hold the core. Both report the
best of several measurements (timeit's best repeat, the fastest benchmark repetition), the one
least disturbed by other work, with the medians beside them to show how noisy the machine was;
and the two sides alternate round by round, so that a burst of load elsewhere hits both.

    python3 bench/vs_pytorch.py --bench build/release/lib/layout/meshgate_layout_bench \
        --plan-bench build/release/lib/plan/meshgate_plan_bench
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

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_BENCH = ROOT / "build/release/lib/layout/meshgate_layout_bench"
DEFAULT_PLAN_BENCH = ROOT / "build/release/lib/plan/meshgate_plan_bench"
DEFAULT_GOAL = 250.0
DEFAULT_PLAN_GOAL = 100.0


@dataclass
class Op:
    label: str  # what the row shows
    benchmark: str  # the BM_* of layout_bench.cpp that times the same call
    call: Callable[[], object]  # the PyTorch call, inputs bound
    steps: int = 0  # planner rows: the steps of PyTorch's merged plan (the table shows both sides')


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


# The specs of plan_bench.cpp's problem(): mesh shape, dim names, flattened dims, src, dst. The
# tensor is 65536 x 4096 float32 on every mesh; all shards are even, so the plan is the same on
# every rank (meshgate plans for the last coordinate, PyTorch for rank 0).
PLAN_SPECS = [
    ((8,), ("A",), [], "S(0)", "R"),
    ((4, 2), ("A", "B"), [("A", "B")], "P(sum),P(avg)", "R,R"),
    ((2, 2, 2), ("A", "B", "C"), [("A", "C")], "P(sum),R,P(sum)", "R,R,R"),
    ((8, 16, 8, 16), ("pp", "dp", "cp", "tp"), [("dp", "cp")], "R,P(avg),P(avg),S(1)", "R,R,R,R"),
]


def planner_ops() -> list[Op]:
    """PyTorch's uncached plan + merge for each of PLAN_SPECS, on a fake process group (no
    communication: DeviceMesh only needs the group's ranks)."""
    import torch
    import torch.distributed as dist
    import torch.distributed.tensor._redistribute as redistribute
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Partial, Replicate, Shard
    from torch.distributed.tensor._dtensor_spec import DTensorSpec, TensorMeta
    from torch.testing._internal.distributed.fake_pg import FakeStore

    def placement(text: str):
        if text == "R":
            return Replicate()
        if text.startswith("S("):
            return Shard(int(text[2:-1]))
        if text.startswith("P("):
            return Partial(text[2:-1])
        raise ValueError(text)

    def placements(text: str) -> tuple:
        return tuple(placement(p) for p in text.split(","))

    world = max(_product(shape) for shape, *_ in PLAN_SPECS)
    if not dist.is_initialized():
        dist.init_process_group("fake", rank=0, world_size=world, store=FakeStore())
    meta = TensorMeta(torch.Size([1 << 16, 4096]), (4096, 1), torch.float32)
    ops = []
    for index, (shape, names, flats, src_text, dst_text) in enumerate(PLAN_SPECS, start=1):
        mesh = init_device_mesh("cpu", shape, mesh_dim_names=names)
        for dims in flats:
            mesh[dims]._flatten()
        src = DTensorSpec(mesh, placements(src_text), tensor_meta=meta)
        dst = DTensorSpec(mesh, placements(dst_text), tensor_meta=meta)

        # What redistribute_local_tensor does while tracing: plan without the @cache of
        # _gen_transform_infos, then merge runs over the flattened dims. The planner object
        # that get_redistribute_planner keeps per (mesh, tensor meta) stays cached, as it does
        # there.
        def call(src=src, dst=dst, mesh=mesh):
            infos = redistribute._gen_transform_infos_non_cached(src, dst)
            return redistribute._optimize_transform_infos(infos, mesh, src.placements,
                                                          dst.placements)

        label = f"{len(shape)}-D {'x'.join(map(str, shape))}: {src_text} -> {dst_text}"
        ops.append(Op(label, f"BM_PlanAndMerge/{index}", call, steps=len(call())))
    return ops


def _product(values) -> int:
    result = 1
    for v in values:
        result *= v
    return result


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
                  clock: str, labels: dict[str, str] | None = None) -> dict[str, list[float]]:
    """ns per call of every repetition of each benchmark, from the binary's JSON output; each
    benchmark's label goes into `labels` when given."""
    command = [str(bench), "--benchmark_filter=^(" + "|".join(benchmarks) + ")$",
               f"--benchmark_repetitions={repetitions}", min_time, "--benchmark_format=json"]
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode != 0 or not result.stdout.strip():
        sys.exit(f"{' '.join(command)} failed ({result.returncode}):\n{result.stderr}")
    scale = {"ns": 1.0, "us": 1e3, "ms": 1e6, "s": 1e9}
    field = "cpu_time" if clock == "cpu" else "real_time"
    times: dict[str, list[float]] = {name: [] for name in benchmarks}
    for row in json.loads(result.stdout)["benchmarks"]:
        if row.get("run_type", "iteration") == "iteration" and row["run_name"] in times:
            times[row["run_name"]].append(row[field] * scale[row["time_unit"]])
            if labels is not None:
                labels[row["run_name"]] = row.get("label", "")
    missing = [name for name, values in times.items() if not values]
    if missing:
        sys.exit(f"{bench} has no benchmark named {', '.join(missing)}")
    return times


@dataclass
class Section:
    title: str  # what is compared
    reference: str  # the PyTorch side's column name
    ops: list[Op]
    bench: Path  # the meshgate benchmark binary that times the same calls
    goal: float
    torch_ns: dict[str, list[float]]
    meshgate_ns: dict[str, list[float]]
    labels: dict[str, str]


def report(section: Section, clock: str, rounds: int) -> list[dict]:
    """Prints the section's table; returns its rows."""
    print(f"\n{section.title}: {clock} time per call; best of {rounds} rounds, "
          f"meshgate's median beside its best")
    planner = any(op.steps for op in section.ops)
    steps_head = f" {'steps':>5}" if planner else ""
    width = max(40, max(len(op.label) for op in section.ops))
    header = (f"{'op':<{width}}{steps_head} {section.reference + ' ns':>11} {'meshgate ns':>12} "
              f"{'(median)':>9} {'ratio':>7}")
    print(header)
    print("-" * len(header))
    rows = []
    for op in section.ops:
        torch_best = min(section.torch_ns[op.benchmark])
        meshgate_best = min(section.meshgate_ns[op.benchmark])
        ratio = torch_best / meshgate_best
        mark = "" if ratio >= section.goal else f"  below {section.goal:g}x"
        steps = ""
        if planner:
            # plan_bench.cpp labels each problem "<ranks> ranks, <steps> steps": the two plans
            # must have as many steps, or the rows do not time the same plan.
            ours = section.labels.get(op.benchmark, "").rsplit(", ", 1)[-1].split(" ")[0]
            steps = f" {op.steps:>5}" if ours == str(op.steps) else f" {op.steps}/{ours}"
            if ours != str(op.steps):
                mark += f"  plans differ: PyTorch {op.steps} steps, meshgate {ours}"
        print(f"{op.label:<{width}}{steps} {torch_best:>11.0f} {meshgate_best:>12.1f} "
              f"{statistics.median(section.meshgate_ns[op.benchmark]):>9.1f} {ratio:>6.0f}x{mark}")
        rows.append({"op": op.benchmark, "label": op.label, "torch_ns": torch_best,
                     "meshgate_ns": meshgate_best,
                     "torch_median_ns": statistics.median(section.torch_ns[op.benchmark]),
                     "meshgate_median_ns": statistics.median(section.meshgate_ns[op.benchmark]),
                     "ratio": ratio, "goal": section.goal})
    worst = min(rows, key=lambda row: row["ratio"])
    print(f"lowest ratio {worst['ratio']:.0f}x ({worst['op']}); goal {section.goal:g}x on every op")
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bench", type=Path, default=DEFAULT_BENCH,
                        help="meshgate_layout_bench of an optimised build (default: %(default)s)")
    parser.add_argument("--plan-bench", type=Path, default=DEFAULT_PLAN_BENCH,
                        help="meshgate_plan_bench of an optimised build (default: %(default)s)")
    parser.add_argument("--only", choices=("layout", "plan"),
                        help="time only the layout ops or only the planner (default: both)")
    parser.add_argument("--rounds", type=int, default=3,
                        help="alternations of PyTorch and meshgate timings (default: %(default)s)")
    parser.add_argument("--repeats", type=int, default=5,
                        help="timeit repeats per op and round (default: %(default)s)")
    parser.add_argument("--repetitions", type=int, default=10,
                        help="benchmark repetitions per round (default: %(default)s)")
    parser.add_argument("--min-time", type=float, default=0.2,
                        help="seconds per benchmark repetition (default: %(default)s)")
    parser.add_argument("--clock", choices=("cpu", "wall"), default="cpu",
                        help="CPU time of the process or elapsed time (default: %(default)s)")
    parser.add_argument("--goal", type=float, default=DEFAULT_GOAL,
                        help="the ratio every layout op should reach (default: %(default)s)")
    parser.add_argument("--plan-goal", type=float, default=DEFAULT_PLAN_GOAL,
                        help="the ratio every planner row should reach (default: %(default)s)")
    parser.add_argument("--check", action="store_true",
                        help="exit 1 when a row's ratio is below its goal")
    parser.add_argument("--json", type=Path, help="also write the measurements to this file")
    args = parser.parse_args()

    sections = []
    wanted = [("layout", args.bench, "meshgate_layout_bench"),
              ("plan", args.plan_bench, "meshgate_plan_bench")]
    for name, bench, target in wanted:
        if args.only not in (None, name):
            continue
        if not bench.is_file():
            sys.exit(f"no benchmark binary at {bench}: build one with\n"
                     f"  cmake --preset release && cmake --build build/release --target {target}\n"
                     f"or name it with --{'bench' if name == 'layout' else 'plan-bench'}")
        if name == "layout":
            sections.append(Section("Layout algebra vs torch.distributed._pycute", "pycute",
                                    pycute_ops(), bench, args.goal, {}, {}, {}))
        else:
            sections.append(Section("Uncached plan + flattened-mesh merge vs DTensor's planner",
                                    "PyTorch", planner_ops(), bench, args.plan_goal, {}, {}, {}))
    for section in sections:
        section.torch_ns = {op.benchmark: [] for op in section.ops}
        section.meshgate_ns = {op.benchmark: [] for op in section.ops}

    for _ in range(args.rounds):
        for section in sections:
            for op in section.ops:
                section.torch_ns[op.benchmark] += time_pycute(op.call, args.repeats, args.clock)
            min_time = min_time_flag(section.bench, args.min_time)
            for name, values in time_meshgate(section.bench, list(section.meshgate_ns),
                                              args.repetitions, min_time, args.clock,
                                              section.labels).items():
                section.meshgate_ns[name] += values

    rows = []
    for section in sections:
        rows += report(section, args.clock, args.rounds)
    if args.json:
        args.json.write_text(json.dumps({"clock": args.clock, "ops": rows}, indent=2) + "\n")
    return 1 if args.check and any(row["ratio"] < row["goal"] for row in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
