"""Launching meshgate-runner: its command line (with mpirun/srun for process backends), one
launch with its progress events, and the relaunch loop that survives runner crashes as
harness/README.md prescribes (error row for the case that was running, then --resume)."""

from __future__ import annotations

import math
import os
import queue
import re
import shutil
import signal
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from ..core import jsonfile, results
from .implementations import Impl
from .progress import ProgressView, Tally, parse_event

# The runner enforces --case-timeout itself; the driver only steps in when the runner goes
# silent for longer than that plus this margin (a hang the runner cannot see from inside).
RUNNER_DEFAULT_CASE_TIMEOUT_S = 300.0
KILL_GRACE_S = 3.0


class LaunchError(Exception):
    """The runner cannot be launched as asked (missing launcher, bad option combination)."""


class RunnerInputError(Exception):
    """The runner rejected its input (exit code 2 before running anything); `stderr` holds its
    own messages, to be shown as they are."""

    def __init__(self, stderr: str, returncode: int):
        super().__init__(stderr)
        self.stderr = stderr
        self.returncode = returncode


@dataclass
class Selection:
    """Which cases: case files/folders plus the runner's filters."""

    paths: list[str]
    suites: list[str] = field(default_factory=list)
    tags: list[str] = field(default_factory=list)
    cases: list[str] = field(default_factory=list)

    def args(self) -> list[str]:
        out = [str(p) for p in self.paths]
        for flag, values in (("--suite", self.suites), ("--tag", self.tags),
                             ("--case", self.cases)):
            for value in values:
                out += [flag, value]
        return out


@dataclass
class RunnerSetup:
    """How to start the runner: its command, backend, world size, case timeout and the memory
    limit its validation checks each case's estimate against."""

    runner: list[str]
    backend: str = "threads"
    ranks: int | None = None
    case_timeout: float | None = None
    env: dict | None = None
    memory_limit: str | None = None  # e.g. "64GiB"; None: the runner's default
    impl: "Impl | None" = None  # the implementation under test; None: meshgate's library
    cpus: str | None = None  # --cpus LIST: the CPUs the runner is pinned to; None: not pinned

    def process_env(self) -> dict | None:
        """The runner's environment: `env` (or ours), with what the implementation needs."""
        return self.impl.env(self.env) if self.impl is not None else self.env

    def launcher(self) -> list[str]:
        """mpirun/srun in front of the runner for the process backends, nothing for threads."""
        if self.backend == "threads":
            return []
        if self.ranks is None:
            raise LaunchError(f"--backend {self.backend} runs one process per rank: "
                              f"give the number of processes with --ranks N")
        env = self.env if self.env is not None else os.environ
        if env.get("SLURM_JOB_ID") and shutil.which("srun"):
            return ["srun", "-n", str(self.ranks)]
        if shutil.which("mpirun") is None:
            if self.ranks == 1:
                # One process needs no launcher: the runner starts MPI alone (a singleton), or,
                # built without MPI, runs its one nccl rank itself.
                return []
            raise LaunchError(f"--backend {self.backend} needs mpirun on PATH: run ci/bootstrap "
                              f"(installs openmpi-bin)")
        # More ranks than cores is normal on a workstation or a CI container; Open MPI refuses
        # both oversubscription and root unless told.
        command = ["mpirun", "-np", str(self.ranks), "--oversubscribe"]
        if self._is_root():
            command.append("--allow-run-as-root")
        return command

    def _is_root(self) -> bool:
        geteuid = getattr(os, "geteuid", None)
        return geteuid is not None and geteuid() == 0

    def run_command(self, selection: Selection, out_dir: Path, run_id: str,
                    resume: bool) -> list[str]:
        command = self.launcher() + self.runner + ["run"] + selection.args()
        command += ["--backend", self.backend, "--out", str(out_dir), "--run-id", run_id,
                    "--progress"]
        if self.backend == "threads" and self.ranks is not None:
            command += ["--ranks", str(self.ranks)]
        if self.case_timeout is not None:
            command += ["--case-timeout", f"{self.case_timeout:g}"]
        command += self._memory_limit_args()
        if self.cpus is not None:
            command += ["--cpus", self.cpus]
        if self.impl is not None:
            command += self.impl.runner_args()
        if resume:
            command.append("--resume")
        return command

    def list_command(self, selection: Selection) -> list[str]:
        return self.runner + ["list"] + selection.args() + self._memory_limit_args() + ["--json"]

    def _memory_limit_args(self) -> list[str]:
        return ["--memory-limit", self.memory_limit] if self.memory_limit else []

    def silence_limit(self) -> float:
        """Seconds without any runner output after which the runner counts as hung; infinite
        with --case-timeout 0, which turns the runner's own watchdog off too."""
        timeout = self.case_timeout if self.case_timeout is not None else \
            RUNNER_DEFAULT_CASE_TIMEOUT_S
        if timeout <= 0:
            return math.inf
        return timeout + min(30.0, max(0.5, timeout))


def normalize_listing(data) -> list[dict]:
    """Case entries of `meshgate-runner list --json` (a list, or an object with "cases")."""
    entries = data.get("cases") if isinstance(data, dict) else data
    if not isinstance(entries, list):
        raise ValueError("meshgate-runner list --json did not print a list of cases")
    out = []
    for entry in entries:
        if not isinstance(entry, dict) or not isinstance(entry.get("id"), str):
            raise ValueError(f"meshgate-runner list --json: entry without an id: {entry!r}")
        perf = entry.get("perf")
        out.append(dict(entry, suite=entry.get("suite", results.suite_of(entry["id"])),
                        kind=entry.get("kind", ""), tags=list(entry.get("tags") or []),
                        perf=perf if isinstance(perf, dict) else None))
    return out


def list_cases(setup: RunnerSetup, selection: Selection) -> list[dict]:
    """The selected cases as the runner expands them. RunnerInputError when it rejects them."""
    # Case names and messages are user text: a byte that is not UTF-8 must not end the driver.
    proc = subprocess.run(setup.list_command(selection), capture_output=True, text=True,
                          encoding="utf-8", errors="replace", env=setup.process_env())
    if proc.returncode != 0:
        said = proc.stderr or proc.stdout
        if proc.returncode < 0 or not said.strip():
            # A runner that dies while loading leaves no message of its own: say what happened.
            death = LaunchOutcome(returncode=proc.returncode).death()
            said += (f"meshgate: the runner {death} while loading "
                     f"{', '.join(selection.paths) or 'the cases'}, before reporting anything\n")
        raise RunnerInputError(said, 2 if proc.returncode < 0 else proc.returncode)
    try:
        return normalize_listing(jsonfile.parse(proc.stdout, "meshgate-runner list --json", expect=None))
    except ValueError as e:  # jsonfile.JsonFileError is one too
        raise RunnerInputError(f"meshgate: cannot read the case list: {e}\n", 2) from None


def runner_machine(runner: list[str], env: dict | None = None) -> dict:
    """The machine as the runner's results will describe it (`meshgate-runner version --json`),
    for what the driver must know of it before running anything. LaunchError when the runner
    cannot say."""
    proc = subprocess.run(runner + ["version", "--json"], capture_output=True, text=True,
                          encoding="utf-8", errors="replace", env=env)
    if proc.returncode != 0:
        said = (proc.stderr or proc.stdout).strip() or LaunchOutcome(returncode=proc.returncode).death()
        raise LaunchError(f"{' '.join(runner)} version --json failed: {said}")
    try:
        info = jsonfile.parse(proc.stdout, "meshgate-runner version --json")
    except ValueError as e:
        raise LaunchError(str(e)) from None
    if not isinstance(info.get("machine"), dict):
        raise LaunchError(f"{' '.join(runner)} version --json does not describe the machine: "
                          f"a runner older than this driver (rebuild it)")
    return info["machine"]


@dataclass
class LaunchOutcome:
    """What one runner process did."""

    returncode: int = 0
    plan_ids: list[str] | None = None
    running: dict | None = None          # start event of a case that started and never ended
    running_since: float | None = None
    done: dict | None = None
    hung_after: float | None = None      # silence (s) after which the driver killed the runner
    ended: int = 0
    stderr: list[str] = field(default_factory=list)

    def death(self) -> str:
        """How the runner ended, for an error row: 'crashed with SIGSEGV', ..."""
        if self.hung_after is not None:
            return (f"stopped responding (no progress for {self.hung_after:.1f} s) and was "
                    f"killed by meshgate")
        if self.returncode < 0:
            return f"crashed with {signal_name(-self.returncode) or f'signal {-self.returncode}'}"
        if self.returncode > 128 and signal_name(self.returncode - 128):
            # mpirun/srun and shells report a child's death by signal N as 128 + N.
            return (f"exited with code {self.returncode} "
                    f"({signal_name(self.returncode - 128)})")
        return f"exited with code {self.returncode}"

    def cause(self) -> str:
        """Who ended the launch and how, for an error row: the rank and its signal or exit code
        when the launcher (mpirun, srun) names them, else the runner's death()."""
        if self.hung_after is None:
            rank = rank_failure(self.stderr)
            if rank:
                return rank
        return f"runner {self.death()}"


def signal_name(number: int) -> str | None:
    """'SIGSEGV' for 11; None when `number` is no signal of this platform."""
    try:
        return signal.Signals(number).name
    except ValueError:
        return None


# How launchers report the first rank that died. Open MPI (mpirun):
#   mpirun noticed that process rank 2 with PID 0 on node vm exited on signal 9 (Killed).
#   ... The first process to do so was:\n  Process name: [[4711,1],2]\n  Exit code: 3
# MPICH (hydra):  =   RANK 2 PID 123 RUNNING AT vm\n=   KILLED BY SIGNAL: 9 (Killed)
#                 (or "=   EXIT STATUS: 3")
# Slurm (srun):   srun: error: vm: task 2: Killed   (or "Exited with exit code 3")
_RANK_SIGNALED = [
    re.compile(r"process rank (\d+) with PID \S+ on node \S+ exited on signal (\d+)"),
    re.compile(r"RANK (\d+) PID \d+ RUNNING AT \S+\s*=\s*KILLED BY SIGNAL: (\d+)"),
]
_RANK_EXITED = [
    re.compile(r"Process name: \[\[\d+,\d+\],(\d+)\]\s*Exit code:\s*(-?\d+)"),
    re.compile(r"RANK (\d+) PID \d+ RUNNING AT \S+\s*=\s*EXIT STATUS: (-?\d+)"),
    re.compile(r"srun: error: \S+: task (\d+): Exited with exit code (-?\d+)"),
]
_SRUN_TASK = re.compile(r"srun: error: \S+: task (\d+): (.+?)(?: \(core dumped\))?$", re.M)


def _signal_description(number: int) -> str:
    return f"signal {number} ({signal_name(number)})" if signal_name(number) else f"signal {number}"


def rank_failure(stderr: list[str]) -> str | None:
    """'rank 2 killed by signal 9 (SIGKILL)' or 'rank 1 exited with code 3' from the launcher's
    report in the runner's stderr lines; None when no launcher named a rank."""
    text = "\n".join(stderr)
    for pattern in _RANK_SIGNALED:
        match = pattern.search(text)
        if match:
            return f"rank {match.group(1)} killed by {_signal_description(int(match.group(2)))}"
    for pattern in _RANK_EXITED:
        match = pattern.search(text)
        if match:
            return f"rank {match.group(1)} exited with code {match.group(2)}"
    by_description = {signal.strsignal(s): int(s) for s in signal.valid_signals()
                      if signal.strsignal(s)}
    for match in _SRUN_TASK.finditer(text):
        number = by_description.get(match.group(2).strip())
        if number is not None:
            return f"rank {match.group(1)} killed by {_signal_description(number)}"
    return None


def _pump(stream, name: str, sink: queue.Queue) -> None:
    for line in stream:
        sink.put((name, line.rstrip("\n")))
    sink.put((name, None))


def _stop(proc: subprocess.Popen) -> None:
    """Terminates the runner's process group (mpirun and its ranks included)."""
    for sig, wait in ((signal.SIGTERM, KILL_GRACE_S), (signal.SIGKILL, None)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


def launch_once(command: list[str], view: ProgressView, tally: Tally, silence_limit: float,
                env: dict | None = None) -> LaunchOutcome:
    """Runs the runner once with --progress, feeding its events to `tally` and `view` and
    passing its human lines through. Kills it when a case has started and nothing has come
    for `silence_limit` seconds."""
    outcome = LaunchOutcome()
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            bufsize=1, env=env, start_new_session=True, encoding="utf-8",
                            errors="replace")
    lines: queue.Queue = queue.Queue()
    readers = [threading.Thread(target=_pump, args=(proc.stdout, "stdout", lines), daemon=True),
               threading.Thread(target=_pump, args=(proc.stderr, "stderr", lines), daemon=True)]
    for reader in readers:
        reader.start()
    open_streams = 2
    last_activity = time.monotonic()
    try:
        while open_streams:
            try:
                stream, line = lines.get(timeout=0.05)
            except queue.Empty:
                view.tick()
                # Only a started case can hang the runner past its own --case-timeout; loading
                # many case files before the plan may legitimately take long.
                silent = time.monotonic() - last_activity
                if outcome.running is not None and outcome.hung_after is None \
                        and silent > silence_limit:
                    outcome.hung_after = silent
                    _stop(proc)
                continue
            if line is None:
                open_streams -= 1
                continue
            last_activity = time.monotonic()
            event = parse_event(line) if stream == "stdout" else None
            if event is None:
                if stream == "stderr":
                    outcome.stderr.append(line)
                view.text(line, stream)
            else:
                _handle(event, outcome, view, tally)
        proc.wait()
    except BaseException:
        _stop(proc)
        raise
    finally:
        for reader in readers:
            reader.join(timeout=1.0)
        proc.stdout.close()
        proc.stderr.close()
    outcome.returncode = proc.returncode
    return outcome


def _handle(event: dict, outcome: LaunchOutcome, view: ProgressView, tally: Tally) -> None:
    kind = event["event"]
    if kind == "plan":
        outcome.plan_ids = [str(i) for i in event.get("ids") or []]
        if tally.total == 0:
            tally.total = int(event.get("total", len(outcome.plan_ids)))
        view.plan(tally)
    elif kind == "start":
        outcome.running = event
        outcome.running_since = time.monotonic()
        tally.current = str(event.get("id", ""))
        view.started(tally, tally.current)
    elif kind == "end":
        case_id = str(event.get("id", ""))
        seconds = event.get("seconds")
        if seconds is None and outcome.running_since is not None:
            seconds = time.monotonic() - outcome.running_since
        if outcome.running is not None and outcome.running.get("id") == case_id:
            outcome.running = None
            outcome.running_since = None
        outcome.ended += 1
        status = str(event.get("status", "error"))
        tally.record(status, seconds)
        message = str(event.get("message", ""))
        if status in results.FAILING and event.get("file") and event.get("line"):
            # Where the case is written, so that a failure on the console leads to its file.
            message = f"{event['file']}:{event['line']}: {message}"
        view.finished(tally, case_id, status, seconds, message)
    elif kind == "done":
        outcome.done = event


@dataclass
class RecoveryResult:
    """All launches of one run (the first plus the --resume relaunches)."""

    launches: list[LaunchOutcome]
    plan_ids: list[str]
    started: bool               # the runner got as far as a plan at least once
    gave_up: str = ""           # why relaunching stopped with cases left, if it did
    rows: list[dict] = field(default_factory=list)  # results.jsonl as the last launch left it

    @property
    def last(self) -> LaunchOutcome:
        return self.launches[-1]


def run_with_recovery(setup: RunnerSetup, selection: Selection, out_dir: Path, run_id: str,
                      view: ProgressView, tally: Tally, catalogue: dict[str, dict] | None = None,
                      max_launches: int | None = None, resume: bool = False) -> RecoveryResult:
    """Runs the selection until every planned case has a row in out_dir/results.jsonl.
    With `resume` the first launch already keeps the rows there (continuing a killed run).

    When a launch dies with a case started and not ended (signal, abort, hang, exit), that case
    gets an error row naming the cause and the runner is relaunched with --resume. Relaunching
    stops when the plan is exhausted, when two launches in a row add no row, or after
    `max_launches` (default: one per planned case plus two)."""
    catalogue = catalogue or {}
    jsonl = out_dir / "results.jsonl"
    launches: list[LaunchOutcome] = []
    plan_ids: list[str] = []
    rows_before = 0
    idle_launches = 0
    while True:
        command = setup.run_command(selection, out_dir, run_id, resume=resume or bool(launches))
        outcome = launch_once(command, view, tally, setup.silence_limit(), setup.process_env())
        launches.append(outcome)
        if not plan_ids and outcome.plan_ids:
            plan_ids = outcome.plan_ids
        if outcome.plan_ids is None and not plan_ids:
            return RecoveryResult(launches, plan_ids, started=False)
        rows = results.read_rows(jsonl)
        if outcome.running is not None:
            _record_unfinished(outcome, rows, jsonl, view, tally, catalogue)
            rows = results.read_rows(jsonl)
        finished = {row["id"] for row in rows}
        remaining = [case_id for case_id in plan_ids if case_id not in finished]
        if not remaining:
            return RecoveryResult(launches, plan_ids, started=True, rows=rows)
        idle_launches = idle_launches + 1 if len(rows) == rows_before else 0
        rows_before = len(rows)
        limit = max_launches if max_launches is not None else len(plan_ids) + 2
        if idle_launches >= 2 or len(launches) >= limit:
            reason = (f"not run: meshgate-runner was launched {len(launches)} time(s) without "
                      f"reaching this case (last launch: {outcome.cause()}); gave up relaunching")
            for case_id in remaining:
                entry = catalogue.get(case_id, {})
                row = results.error_row(case_id, reason, entry=entry)
                results.append_row(jsonl, row)
                rows.append(row)
                tally.record("error", None)
                view.finished(tally, case_id, "error", None, reason)
            return RecoveryResult(launches, plan_ids, started=True, gave_up=reason, rows=rows)
        view.text(f"meshgate: {outcome.cause()}; resuming with "
                  f"{len(remaining)} case(s) left", "stderr")


def _record_unfinished(outcome: LaunchOutcome, rows: list[dict], jsonl: Path,
                       view: ProgressView, tally: Tally, catalogue: dict[str, dict]) -> None:
    """Accounts for the case that started and never ended: the runner's own row when it wrote
    one before exiting (its case-timeout watchdog does), else an error row naming the cause."""
    start = outcome.running
    case_id = str(start.get("id", ""))
    written = [row for row in rows if row.get("id") == case_id]
    if written:
        row = written[-1]
        tally.record(str(row.get("status", "error")), row.get("seconds"))
        view.finished(tally, case_id, str(row.get("status", "error")), row.get("seconds"),
                      str(row.get("message", "")))
        return
    seconds = time.monotonic() - outcome.running_since if outcome.running_since else 0.0
    message = f"{outcome.cause()} while running this case"
    # The launcher frames its reports in lines of dashes, which say nothing.
    tail = [line for line in outcome.stderr if line.strip(" -")][-3:]
    if tail:
        message += "\nlast runner stderr:\n" + "\n".join(tail)
    entry = catalogue.get(case_id, {})
    results.append_row(jsonl, results.error_row(
        case_id, message, kind=str(start.get("kind", "")), params=start.get("params"),
        seconds=seconds, entry=entry))
    tally.record("error", seconds)
    view.finished(tally, case_id, "error", seconds, message)
