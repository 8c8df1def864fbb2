"""`meshgate run`: build the runner, run the selected cases with live progress, survive
runner crashes, repeat performance cases in fresh processes, merge, report, compare with a
baseline, print the summary and exit with the results CONTRACT code."""

from __future__ import annotations

import argparse
import contextlib
import datetime
import io
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from . import build, impls, jsonfile, launch, perfruns, project, results, summary
from .markup import visible
from .launch import RunnerSetup, Selection
from .progress import ProgressView, Tally, make_view
from .selection import (SelectionError, add_backend_arguments, add_memory_limit_argument,
                        add_selection_arguments, build_selection, case_timeout_seconds)

DEFAULT_TAGS = ["smoke"]


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
                        help="seconds a case may run before it is an error (runner default 300)")
    add_memory_limit_argument(parser)
    parser.set_defaults(func=run_command)


def short_commit(root: Path, env: dict | None = None) -> str:
    """The commit the run is of: MESHGATE_COMMIT (builds of other revisions) or git HEAD."""
    env = os.environ if env is None else env
    if env.get("MESHGATE_COMMIT"):
        return env["MESHGATE_COMMIT"][:7]
    try:
        proc = subprocess.run(["git", "-C", str(root), "rev-parse", "--short=7", "HEAD"],
                              capture_output=True, text=True, check=True)
        return proc.stdout.strip() or "nocommit"
    except (OSError, subprocess.CalledProcessError):
        return "nocommit"


def default_run_id(root: Path, now: datetime.datetime | None = None,
                   env: dict | None = None) -> str:
    """'20261121-071500-59fa4d3': UTC start time and short commit."""
    now = now or datetime.datetime.now(datetime.timezone.utc)
    return f"{now.strftime('%Y%m%d-%H%M%S')}-{short_commit(root, env)}"


class Stopped(Exception):
    """SIGTERM or SIGINT arrived (a cancelled CI job, Ctrl-C); the exit code is 128 + signal."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


@contextlib.contextmanager
def stop_on_signals():
    """Turns SIGTERM and SIGINT into Stopped while a run is in flight, so the launch code stops
    the runner's process group (mpirun and ranks included) on its way out and the run writes
    what finished, instead of the driver dying at once and leaving the runner holding the
    machine. The previous handlers come back afterwards."""
    def handler(signum, _frame):
        raise Stopped(signum)

    if threading.current_thread() is not threading.main_thread():  # only it may set handlers
        yield
        return
    previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


def _finished_document(out_dir: Path, run_id: str, recovery: launch.RecoveryResult,
                       plan_ids: list[str], header: dict) -> dict:
    """Results of one (possibly relaunched) run of the runner in `out_dir`."""
    written = results.load_results(out_dir / "results.json")
    if written is not None and (written.get("run") or {}).get("id") not in (None, run_id):
        written = None  # left over from an earlier run into the same folder
    return results.assemble(written, recovery.rows, plan_ids, header)


def _repeat_perf_cases(document: dict, catalogue: dict[str, dict], setup: RunnerSetup,
                       selection: Selection, out_dir: Path, run_id: str,
                       view: ProgressView) -> tuple[dict, int]:
    """Runs 2..k of the performance cases, each in its own runner process under
    out_dir/runs/<n>, and merges them into `document`. Returns it and the launches made."""
    schedule = perfruns.repeat_schedule(document["cases"], catalogue)
    runs: dict[int, dict[str, dict]] = {}
    launches = 0
    for n, ids in schedule.items():
        run_dir = out_dir / "runs" / str(n)
        if run_dir.exists():
            shutil.rmtree(run_dir)
        view.heading(f"meshgate: performance run {n} of {max(schedule)}: {len(ids)} case(s)")
        repeat = Selection(paths=selection.paths, cases=ids)
        outcome = launch.run_with_recovery(setup, repeat, run_dir, run_id, view, Tally(),
                                           catalogue)
        launches += len(outcome.launches)
        rows = _finished_document(run_dir, run_id, outcome, outcome.plan_ids,
                                  {"id": run_id})["cases"]
        runs[n] = {row["id"]: row for row in rows}
    if not schedule:
        return document, launches
    return perfruns.merge_runs(document, runs, catalogue), launches


def _write_report(out_dir: Path, document: dict) -> tuple[list[Path], str]:
    try:
        from . import report
        return list(report.write_run_report(out_dir, document) or []), ""
    except Exception as e:  # a broken report must not hide the run's own outcome
        return [], f"meshgate: the report could not be written: {type(e).__name__}: {e}"


def _timing_baseline_present(baseline: Path, signals_root: Path | None, results_path: Path) -> bool:
    """Whether `--baseline DIR` holds a timing baseline to compare with. A baselines root that
    has signals/ but no folder for this machine class (and no suite files of its own) holds
    only the committed signals; a missing DIR is left to the comparison to report."""
    if signals_root is None or signals_root.parent != baseline or not baseline.is_dir():
        return True
    if any(baseline.glob("*.json")):
        return True
    try:
        from . import baseline as _baseline
        return (baseline / _baseline.results_machine_class(_baseline.load_results(results_path))).is_dir()
    except Exception:
        return True


def _compare(out_dir: Path, baseline: Path) -> tuple[int, list[str]]:
    """`--baseline DIR`: the signal check against the committed signals beside DIR (DIR/signals
    or DIR/../signals), which gates, and the timing comparison with DIR's per-machine results,
    which is informational: a timing recorded on another day is a blocked comparison that
    machine drift turns into false alarms (docs/gate.md); `meshgate ab` is the timing gate.
    Returns the exit code to combine with the run's and the summary lines."""
    from . import baseline as _baseline

    results_path = out_dir / "results.json"
    code, lines = 0, []
    signals_root = _baseline.signals_root_for(baseline)
    if signals_root is not None:
        out = io.StringIO()
        try:
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
                signals_code = _baseline.run_check(results_path, signals_root, out_dir,
                                                   report_md=out_dir / "report.md", quiet=True)
        except Exception as e:
            signals_code = 2
            out.write(f"meshgate: signal check against {signals_root} failed: "
                      f"{type(e).__name__}: {e}\n")
        verdict = {0: "no change", 1: "CHANGED"}.get(signals_code, "check unusable")
        lines.append(f"signals {signals_root}: {verdict} (exit {signals_code}); "
                     f"{out_dir / 'signals-report.md'}")
        if signals_code:
            lines += [line for line in out.getvalue().splitlines() if line.strip()]
        code = max(code, signals_code)
    if not _timing_baseline_present(baseline, signals_root, results_path):
        return code, lines
    try:
        from . import compare
        timing_code = compare.compare_with_baseline(results_path, baseline, out_dir)
    except Exception as e:
        lines.append(f"meshgate: comparison with {baseline} failed: {type(e).__name__}: {e}")
        return max(code, 2), lines
    if timing_code == 1:
        lines.append(f"baseline {baseline}: regression (exit 1), informational: a stored timing "
                     "is not an interleaved A/B; `meshgate ab` gates timing")
        return code, lines
    verdict = {0: "no regression"}.get(timing_code, "comparison unusable")
    lines.append(f"baseline {baseline}: {verdict} (exit {timing_code})")
    return max(code, timing_code), lines


def run_command(args: argparse.Namespace) -> int:
    root = build.source_root()
    started = time.monotonic()
    try:
        selection = build_selection(args, root, DEFAULT_TAGS)
    except SelectionError as e:
        print(f"meshgate: {e}", file=sys.stderr)
        return 2
    if args.resume:
        # Checked before the runner is built (minutes, on a fresh checkout).
        out_dir = Path(args.resume).resolve()
        if not (out_dir / "results.jsonl").is_file():
            print(f"meshgate: --resume {args.resume}: no results.jsonl there to continue from",
                  file=sys.stderr)
            return 2
        try:
            # The runner drops lines it cannot read when it resumes: a damaged line is the
            # user's to repair or remove, before anything is rewritten.
            results.read_rows(out_dir / "results.jsonl")
        except jsonfile.JsonFileError as e:
            print(f"meshgate: --resume {args.resume}: {e}: repair or remove that line to continue "
                  "the run", file=sys.stderr)
            return 2
    try:
        runner = project.given_runner(args.runner) if args.runner else build.runner_command(root, args.preset)
    except build.BuildError as e:
        print(f"meshgate: {e}", file=sys.stderr)
        return 2
    if args.resume:
        run_id = out_dir.name
    elif args.out:
        run_id, out_dir = default_run_id(root), Path(args.out).resolve()
    else:
        run_id, out_dir = results.claim_run_dir(root / "reports", default_run_id(root))
    try:
        impl = impls.resolve(args.impl)
    except impls.ImplError as e:
        print(f"meshgate: {e}", file=sys.stderr)
        return 2
    setup = RunnerSetup(runner=runner, backend=args.backend, ranks=args.ranks,
                        case_timeout=args.case_timeout, memory_limit=args.memory_limit, impl=impl)
    try:
        setup.launcher()
        listing = launch.list_cases(setup, selection)
    except launch.LaunchError as e:
        print(f"meshgate: {e}", file=sys.stderr)
        return 2
    except launch.RunnerInputError as e:
        sys.stderr.write(visible(e.stderr, multiline=True))
        return 2
    if not listing:
        print(f"meshgate: no case matches {visible(' '.join(selection.args()))}", file=sys.stderr)
        return 2
    catalogue = {entry["id"]: entry for entry in listing}
    view = make_view()
    on = args.backend if impl is None else f"{args.backend} with --impl {impl.name}"
    view.heading(f"meshgate: {len(listing)} case(s) on {on} -> {out_dir}")
    header = {"id": run_id, "backend": args.backend}
    stopped: Stopped | None = None
    try:
        with stop_on_signals():
            first = launch.run_with_recovery(setup, selection, out_dir, run_id, view, Tally(),
                                             catalogue, resume=bool(args.resume))
            if not first.started:
                view.close()
                if first.last.returncode != 2:
                    started_as = " ".join(setup.launcher() + ["meshgate-runner"])
                    print(f"meshgate: {started_as} {first.last.death()} before running any case",
                          file=sys.stderr)
                return 2
            order = list(catalogue) if args.resume else first.plan_ids  # kept rows in place
            document = _finished_document(out_dir, run_id, first, order, header)
            document, repeat_launches = _repeat_perf_cases(document, catalogue, setup, selection,
                                                           out_dir, run_id, view)
    except Stopped as e:
        stopped = e
        view.close()
        print(f"\nmeshgate: {e} received: the runner is stopped; writing the results and reports "
              f"of the cases that finished", file=sys.stderr)
        document = results.assemble(results.load_results(out_dir / "results.json"),
                                    results.read_rows(out_dir / "results.jsonl"), list(catalogue), header)
        first, repeat_launches = None, 0
    if stopped is None:
        view.close()
    results.write_results(out_dir / "results.json", document)

    cases = document["cases"]
    code = results.exit_code(cases)
    notes = []
    if first is not None:
        last_code = first.last.returncode
        if 0 <= last_code <= 2:
            code = max(code, last_code)
        if len(first.launches) > 1:
            notes.append(f"runner relaunched {len(first.launches) - 1} time(s) after it died")
        if first.gave_up:
            notes.append(f"gave up: {first.gave_up}")
    if repeat_launches:
        notes.append(f"performance cases repeated in {repeat_launches} more runner launch(es)")
    report_paths, report_problem = _write_report(out_dir, document)
    if report_problem:
        notes.append(report_problem)
        code = max(code, 2)
    if args.baseline and stopped is None:
        compare_code, lines = _compare(out_dir, Path(args.baseline))
        notes += lines
        code = max(code, compare_code)
    if cases and all(c.get("status") == "skip" for c in cases) and not args.allow_all_skipped:
        # A CI job on a machine without the GPUs or ranks it expects must not go green.
        notes.append(f"nothing was tested: all {len(cases)} case(s) were skipped (first reason: "
                     f"{cases[0].get('message') or 'none given'}); pass --allow-all-skipped if that is expected")
        code = max(code, 2)
    # The collectives' per-size tables (nccl-tests' view of a sweep) come before the summary,
    # which stays the last thing printed.
    for line in summary.collective_text(summary.collective_tables(cases)):
        print(line)
    if stopped is not None:
        notes.append(f"stopped by {stopped}: {len(cases)} of {len(catalogue)} case(s) finished")
        print(summary.render(cases, time.monotonic() - started, out_dir, report_paths, notes))
        return 128 + stopped.signum
    print(summary.render(cases, time.monotonic() - started, out_dir, report_paths, notes))
    return code
