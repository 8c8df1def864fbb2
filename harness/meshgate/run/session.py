"""A run session, as `meshgate run` and `meshgate nightly` run one: build the runner, run the
selected cases with live progress, survive runner crashes, repeat performance cases in fresh
processes, merge (execute); then check the results against what they are asked to be checked
against and write the reports once, with the checks' sections (finish). Each step returns an
outcome object (Execution, RunOutcome); commands/run.py prints them and exits with the results
CONTRACT code."""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Optional, Sequence, TextIO

from ..core import files, jsonfile
from ..core import results
from ..core.markup import visible
from ..gate import checks, store
from ..gate.checks import SignalsCheck, TimingCheck
from ..system import build, git, implementations, launch, project, repeats
from ..system.launch import RunnerSetup
from ..system.progress import Tally, make_view
from ..system.selection import DEFAULT_TAGS, SelectionError, build_selection
from . import report, summary


def default_run_id(root: Path, now: datetime.datetime | None = None,
                   env: dict | None = None) -> str:
    """'20261121-071500-59fa4d3': UTC start time and short commit."""
    now = now or datetime.datetime.now(datetime.timezone.utc)
    return f"{now.strftime('%Y%m%d-%H%M%S')}-{git.short_commit(root, env)}"


def project_of_run(cases: Sequence[str], cwd: Optional[Path] = None) -> Optional[Path]:
    """The project of its own kinds a run is of: the one the working directory is in, else the
    one that holds the first CASES path (`meshgate run ~/proj/cases` from elsewhere); None for
    meshgate's own cases. Its reports/ get the run, and its commit stamps it."""
    found = files.find_project(cwd)
    if found is not None:
        return found
    for item in cases:
        path = Path(item)
        if path.exists():
            return files.find_project(path if path.is_dir() else path.parent)
    return None


def project_commit_env(home: Optional[Path], env: Optional[dict] = None) -> Optional[dict]:
    """The runner's environment for a run of a project: MESHGATE_COMMIT and MESHGATE_DIRTY
    naming the project's HEAD, since a runner built against an installed meshgate would stamp
    its results with meshgate's own commit (results.json keeps meshgate's version in
    `versions.meshgate`). None (the driver's environment as it is) for meshgate's own cases,
    where git cannot say, or where MESHGATE_COMMIT is set already (a build of another revision)."""
    env = dict(os.environ if env is None else env)
    if home is None or env.get("MESHGATE_COMMIT"):
        return None
    head = git.describe_head(home)
    if head is None:
        return None
    env["MESHGATE_COMMIT"], env["MESHGATE_DIRTY"] = head[0], "1" if head[1] else "0"
    return env


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


@dataclasses.dataclass
class RunRequest:
    """What a run is asked: the cases (CASES and the filters; none at all selects the cases of
    cases/ tagged smoke), how to launch them, and where the run lands."""

    cases: list[str] = dataclasses.field(default_factory=list)
    suites: list[str] = dataclasses.field(default_factory=list)
    tags: list[str] = dataclasses.field(default_factory=list)
    case_patterns: list[str] = dataclasses.field(default_factory=list)
    backend: str = "threads"
    ranks: Optional[int] = None
    cpus: Optional[str] = None  # --cpus LIST: pin every runner to these CPUs; None: not pinned
    impl: Optional[str] = None
    preset: Optional[str] = None
    runner: Optional[str] = None  # a prebuilt runner to run (--runner): nothing is built
    case_timeout: Optional[float] = None
    memory_limit: Optional[str] = None
    out: Optional[Path] = None  # default: reports/<run-id>
    resume: Optional[Path] = None  # continue the killed run in this folder
    allow_all_skipped: bool = False


@dataclasses.dataclass
class Execution:
    """The cases run: `document` is the merged results (written to out_dir/results.json), None
    when nothing ran, `error` then the text to show on stderr. `code` is the results CONTRACT
    code of the rows combined with the runner's own, 2 when the run could not start."""

    code: int
    out_dir: Optional[Path] = None
    document: Optional[dict] = None
    error: str = ""
    notes: list[str] = dataclasses.field(default_factory=list)
    selected: int = 0  # cases the runner listed
    stopped: Optional[Stopped] = None
    allow_all_skipped: bool = False
    started: float = dataclasses.field(default_factory=time.monotonic)


def execute(request: RunRequest, err: Optional[TextIO] = None) -> Execution:
    """Runs the cases of `request`: builds the runner, lists the cases, launches the runner
    (relaunching it after crashes), repeats the performance cases, and writes the merged
    results.json. Progress goes to the terminal as it comes; the message of a SIGTERM or SIGINT
    to `err` (stderr)."""
    err = err or sys.stderr
    started = time.monotonic()
    home = project_of_run(request.cases)
    root = home or files.source_root()
    try:
        selection = build_selection(request.cases, request.suites, request.tags, request.case_patterns,
                                    root, DEFAULT_TAGS)
    except SelectionError as e:
        return Execution(2, error=f"meshgate: {e}\n")
    out_dir: Optional[Path] = None
    if request.resume:
        # Checked before the runner is built (minutes, on a fresh checkout).
        out_dir = Path(request.resume).resolve()
        if not (out_dir / "results.jsonl").is_file():
            return Execution(2, error=f"meshgate: --resume {request.resume}: no results.jsonl there to "
                                      f"continue from\n")
        try:
            # The runner drops lines it cannot read when it resumes: a damaged line is the
            # user's to repair or remove, before anything is rewritten.
            results.read_rows(out_dir / "results.jsonl")
        except jsonfile.JsonFileError as e:
            return Execution(2, error=f"meshgate: --resume {request.resume}: {e}: repair or remove that "
                                      f"line to continue the run\n")
    try:
        runner = (project.given_runner(request.runner) if request.runner
                  else build.runner_command(root, request.preset))
    except build.BuildError as e:
        return Execution(2, error=f"meshgate: {e}\n")
    if request.resume:
        run_id = out_dir.name
    elif request.out:
        run_id, out_dir = default_run_id(root), Path(request.out).resolve()
    else:
        run_id, out_dir = files.claim_run_dir(root / "reports", default_run_id(root))
    try:
        impl = implementations.resolve(request.impl)
    except implementations.ImplError as e:
        return Execution(2, error=f"meshgate: {e}\n")
    setup = RunnerSetup(runner=runner, backend=request.backend, ranks=request.ranks,
                        case_timeout=request.case_timeout, memory_limit=request.memory_limit, impl=impl,
                        cpus=request.cpus, env=project_commit_env(home))
    try:
        setup.launcher()
        listing = launch.list_cases(setup, selection)
    except launch.LaunchError as e:
        return Execution(2, error=f"meshgate: {e}\n")
    except launch.RunnerInputError as e:
        return Execution(2, error=visible(e.stderr, multiline=True))
    if not listing:
        return Execution(2, error=f"meshgate: no case matches {visible(' '.join(selection.args()))}\n")
    catalogue = {entry["id"]: entry for entry in listing}
    view = make_view()
    on = request.backend if impl is None else f"{request.backend} with --impl {impl.name}"
    view.heading(f"meshgate: {len(listing)} case(s) on {on} -> {out_dir}")
    header = {"id": run_id, "backend": request.backend}
    stopped: Stopped | None = None
    try:
        with stop_on_signals():
            first = launch.run_with_recovery(setup, selection, out_dir, run_id, view, Tally(),
                                             catalogue, resume=bool(request.resume))
            if not first.started:
                view.close()
                error = ""
                if first.last.returncode != 2:
                    started_as = " ".join(setup.launcher() + ["meshgate-runner"])
                    error = f"meshgate: {started_as} {first.last.death()} before running any case\n"
                return Execution(2, out_dir=out_dir, error=error)
            order = list(catalogue) if request.resume else first.plan_ids  # kept rows in place
            document = repeats.launched_document(out_dir, run_id, first, order, header)
            document, repeat_launches = repeats.repeat_perf_cases(document, catalogue, setup, selection,
                                                                  out_dir, run_id, view)
    except Stopped as e:
        stopped = e
        view.close()
        print(f"\nmeshgate: {e} received: the runner is stopped; writing the results and reports "
              f"of the cases that finished", file=err)
        document = results.assemble(repeats.runner_results(out_dir / "results.json"),
                                    results.read_rows(out_dir / "results.jsonl"), list(catalogue), header)
        first, repeat_launches = None, 0
    if stopped is None:
        view.close()
    results.write_results(out_dir / "results.json", document)

    code = results.exit_code(document["cases"])
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
    return Execution(code, out_dir, document, notes=notes, selected=len(catalogue), stopped=stopped,
                     allow_all_skipped=request.allow_all_skipped, started=started)


@dataclasses.dataclass
class RunOutcome:
    """A finished run: its exit code (the results CONTRACT's, combined with the checks that
    gate), the notes of its summary, the reports written, and the checks made against it."""

    code: int
    execution: Execution
    notes: list[str] = dataclasses.field(default_factory=list)
    report_paths: list[Path] = dataclasses.field(default_factory=list)
    signals: Optional[SignalsCheck] = None
    timing: Optional[TimingCheck] = None
    ended: float = dataclasses.field(default_factory=time.monotonic)

    @property
    def lines(self) -> list[str]:
        """What the terminal shows before the summary: the stored-timing comparison's lines."""
        return self.timing.lines if self.timing is not None else []

    @property
    def errors(self) -> list[str]:
        return self.timing.errors if self.timing is not None else []

    def text(self) -> str:
        """The collectives' per-size tables (nccl-tests' view of a sweep), then the summary,
        which stays the last thing printed."""
        cases = self.execution.document["cases"]
        lines = summary.collective_text(summary.collective_tables(cases))
        lines.append(summary.render(cases, self.ended - self.execution.started, self.execution.out_dir,
                                    self.report_paths, self.notes))
        return "\n".join(lines)


def _timing_baseline_present(baseline: Path, signals_root: Path | None, document: dict) -> bool:
    """Whether `--baseline DIR` holds a timing baseline to compare with. A baselines root that
    has signals/ but no folder for this machine class (and no suite files of its own) holds
    only the committed signals; a missing DIR is left to the comparison to report."""
    if signals_root is None or signals_root.parent != baseline or not baseline.is_dir():
        return True
    if any(baseline.glob("*.json")):
        return True
    try:
        return (baseline / results.results_machine_class(document)).is_dir()
    except Exception:
        return True


@dataclasses.dataclass
class BaselineChecks:
    """`--baseline DIR`'s checks of a run: the exit code to combine with the run's, the lines
    of the summary, and the checks themselves (their sections go into report.md)."""

    code: int = 0
    lines: list[str] = dataclasses.field(default_factory=list)
    signals: Optional[SignalsCheck] = None
    timing: Optional[TimingCheck] = None

    def sections(self) -> list:
        return [s for s in (self.signals and self.signals.section(),
                            self.timing and self.timing.section()) if s]


def baseline_checks(document: dict, out_dir: Path, baseline: Path) -> BaselineChecks:
    """`--baseline DIR`: the signal check against the committed signals beside DIR (DIR/signals
    or DIR/../signals), which gates, and the timing comparison with DIR's per-machine results,
    which is informational: a timing recorded on another day is a blocked comparison that
    machine drift turns into false alarms (docs/gate.md); `meshgate ab` is the timing gate."""
    results_path = out_dir / "results.json"
    found = BaselineChecks()
    signals_root = store.signals_root_for(baseline)
    if signals_root is not None:
        try:
            found.signals = checks.check_signals(document, results_path, signals_root, out_dir, quiet=True)
        except Exception as e:
            found.signals = SignalsCheck(2, errors=[f"meshgate: signal check against {signals_root} failed: "
                                                    f"{type(e).__name__}: {e}"])
        signals_code = found.signals.code
        verdict = {0: "no change", 1: "CHANGED"}.get(signals_code, "check unusable")
        found.lines.append(f"signals {signals_root}: {verdict} (exit {signals_code}); "
                           f"{out_dir / 'signals-report.md'}")
        if signals_code:
            found.lines += [line for line in found.signals.errors + found.signals.lines if line.strip()]
        found.code = max(found.code, signals_code)
    if not _timing_baseline_present(baseline, signals_root, document):
        return found
    try:
        found.timing = checks.compare_with_baseline(document, results_path, baseline, out_dir)
    except Exception as e:
        found.lines.append(f"meshgate: comparison with {baseline} failed: {type(e).__name__}: {e}")
        found.code = max(found.code, 2)
        return found
    timing_code = found.timing.code
    if timing_code == 1:
        found.lines.append(f"baseline {baseline}: regression (exit 1), informational: a stored timing "
                           "is not an interleaved A/B; `meshgate ab` gates timing")
        return found
    verdict = {0: "no regression"}.get(timing_code, "comparison unusable")
    found.lines.append(f"baseline {baseline}: {verdict} (exit {timing_code})")
    found.code = max(found.code, timing_code)
    return found


def _write_report(out_dir: Path, document: dict, sections: list) -> tuple[list[Path], str]:
    try:
        return list(report.write_run_report(out_dir, document, sections) or []), ""
    except Exception as e:  # a broken report must not hide the run's own outcome
        return [], f"meshgate: the report could not be written: {type(e).__name__}: {e}"


def finish(execution: Execution, baseline: Optional[Path] = None,
           signals: Optional[Path] = None, results_label: Optional[Path] = None) -> RunOutcome:
    """The checks of an executed run and its reports, written once. `baseline` is `meshgate
    run --baseline DIR` (baseline_checks: their lines go into the summary, their codes into the
    run's); `signals` is a committed signals folder to check the results against apart from
    the run's own code (`meshgate nightly`), with the check's full terminal view. Both checks
    land in report.md as sections. `results_label` names the results in the signal check's
    reports (default: the run folder's results.json)."""
    out_dir, document = execution.out_dir, execution.document
    code = execution.code
    notes = list(execution.notes)
    outcome = RunOutcome(code, execution)
    sections = []
    found = None
    if signals is not None:
        outcome.signals = checks.check_signals(document, results_label or out_dir / "results.json",
                                               Path(signals), out_dir)
        sections += [s for s in [outcome.signals.section()] if s]
    if baseline is not None and execution.stopped is None:
        found = baseline_checks(document, out_dir, Path(baseline))
        outcome.signals, outcome.timing = found.signals or outcome.signals, found.timing
        sections += found.sections()
    outcome.report_paths, report_problem = _write_report(out_dir, document, sections)
    if report_problem:
        notes.append(report_problem)
        code = max(code, 2)
    if found is not None:
        notes += found.lines
        code = max(code, found.code)
    cases = document["cases"]
    if cases and all(c.get("status") == "skip" for c in cases) and not execution.allow_all_skipped:
        # A CI job on a machine without the GPUs or ranks it expects must not go green.
        notes.append(f"nothing was tested: all {len(cases)} case(s) were skipped (first reason: "
                     f"{cases[0].get('message') or 'none given'}); pass --allow-all-skipped if that is expected")
        code = max(code, 2)
    if execution.stopped is not None:
        notes.append(f"stopped by {execution.stopped}: {len(cases)} of {execution.selected} case(s) finished")
        code = 128 + execution.stopped.signum
    outcome.code, outcome.notes = code, notes
    outcome.ended = time.monotonic()
    return outcome


def run(request: RunRequest, baseline: Optional[Path] = None) -> tuple[Execution, Optional[RunOutcome]]:
    """`meshgate run`: execute, then finish with `--baseline DIR`'s checks; the outcome is None
    when nothing ran (the execution's error says why)."""
    execution = execute(request)
    if execution.document is None:
        return execution, None
    return execution, finish(execution, baseline=baseline)
