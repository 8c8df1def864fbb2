"""`meshgate calibrate [CASES]`: the A/A sessions of gate/calibrate.py on this checkout's build,
from the command line: what the gate can and cannot see on this machine, measured and stored
in baselines/<machine-class>/calibration.json."""

from __future__ import annotations

import argparse
import pathlib
import sys
from typing import Any, Optional

from ..core import files
from ..core.results import machine_class
from ..gate import calibrate, power, stats
from ..gate import store as _store
from ..run import report
from ..system import build, implementations, launch, repeats
from ..system.selection import SelectionError
from .options import add_backend_arguments, add_cpus_argument, add_max_gate_argument, add_selection_arguments, selection_from_args


def _cmd_calibrate(args: argparse.Namespace) -> int:
    root = files.source_root()
    if args.sessions < 1:
        print("meshgate calibrate: --sessions must be at least 1", file=sys.stderr)
        return 2
    if args.k < stats.smallest_k_reaching():
        print(f"meshgate calibrate: -k must be at least {stats.smallest_k_reaching()} "
              f"(fewer runs per side can never reach alpha = {stats.ALPHA})", file=sys.stderr)
        return 2
    try:
        selection = selection_from_args(args, root, [])
        runner = build.runner_command(root, args.preset)
    except (SelectionError, build.BuildError) as e:
        print(f"meshgate calibrate: {e}", file=sys.stderr)
        return 2
    side = repeats.Side(label="aa", rev="HEAD", runner=runner, case_paths=list(selection.paths))
    try:
        impl = implementations.resolve(args.impl)
    except implementations.ImplError as e:
        print(f"meshgate calibrate: {e}", file=sys.stderr)
        return 2
    launcher = repeats.DriverLauncher(backend=args.backend, ranks=args.ranks, run_prefix="calibrate",
                                        impl=impl, cpus=args.cpus)
    try:
        ids = repeats.perf_case_ids(launcher.list_cases(side, selection))
    except (launch.LaunchError, launch.RunnerInputError) as e:
        print(f"meshgate calibrate: the runner rejected the selection: {getattr(e, 'stderr', e)}", file=sys.stderr)
        return 2
    if not ids:
        print("meshgate calibrate: no performance case (with a `perf:` block) is selected", file=sys.stderr)
        return 2
    try:
        mclass = args.machine_class or machine_class(launch.runner_machine(runner))
    except launch.LaunchError as e:
        print(f"meshgate calibrate: {e}", file=sys.stderr)
        return 2
    out_dir = pathlib.Path(args.out) if args.out else files.default_report_dir("calibrate")
    return calibrate_with(side, ids, launcher, out_dir, args.sessions, args.k, args.seed, mclass,
                          pathlib.Path(args.baselines), store=not args.no_store, max_gate=args.max_gate)


def calibrate_with(side: repeats.Side, ids: list[str], launch: repeats.LaunchFn, out_dir: pathlib.Path,
                   sessions: int, k: int, seed: int, machine_class: Optional[str], baselines_root: pathlib.Path,
                   store: bool = True, max_gate: float = stats.MAX_GATE, trials: int = power.SIMULATION_TRIALS) -> int:
    """Runs the A/A sessions (gate/calibrate.py), stores the calibration, writes reports/<id>/
    with the report of every launch in runs-report/, and prints the calibration; exit code."""
    found = calibrate.calibrate(side, ids, launch, out_dir, sessions, k, seed, machine_class, baselines_root,
                                keep=store, max_gate=max_gate, trials=trials)
    if found.error:
        print(found.error, file=sys.stderr)
        return found.code
    report.write_run_report(pathlib.Path(out_dir) / "runs-report", found.results)
    print(found.text)
    if found.failing:
        print(f"meshgate calibrate: {len(found.failing)} case(s) failed and were not calibrated: "
              f"{', '.join(found.failing)}", file=sys.stderr)
    return found.code


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "calibrate", help="A/A sessions: noise floor, measured false alarms and detectable regression per case",
        description="Runs the selected performance cases of this checkout's build in interleaved A/A "
                    "sessions judged by the gate's own rule, and reports per case the noise floor, the "
                    "gate, the measured false-alarm rate after confirmation, how often A/A passes, and "
                    "the minimum regression detected with 80 % power after confirmation. Stores them "
                    "in baselines/<machine-class>/calibration.json.")
    add_selection_arguments(parser)
    add_backend_arguments(parser)
    add_cpus_argument(parser)
    parser.add_argument("--sessions", type=int, default=calibrate.DEFAULT_SESSIONS, metavar="S",
                        help="interleaved A/A sessions, 2 x k launches each (default %(default)s)")
    parser.add_argument("-k", "--k", type=int, default=calibrate.DEFAULT_K, help="runs per side the gate uses (default %(default)s)")
    parser.add_argument("--preset", metavar="P", help="CMake preset of the build (default: ci/preset)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the run orders and the simulation (default %(default)s)")
    parser.add_argument("--machine-class", help="store under this machine class instead of the derived one")
    parser.add_argument("--baselines", default=str(_store.default_baselines()), help="baselines root (default: %(default)s)")
    parser.add_argument("--no-store", action="store_true", help="report only; leave calibration.json alone")
    add_max_gate_argument(parser)
    parser.add_argument("--out", metavar="DIR", help="report folder (default: reports/calibrate-<time>)")
    parser.set_defaults(func=_cmd_calibrate)
