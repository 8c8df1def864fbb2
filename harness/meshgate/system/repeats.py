"""Repeated launches of the runner and their merged results. The unit of replication is one
process launch (docs/gate.md): a case with `perf: {runs: k}` is run in k runner processes, and
the per-run sample lists are merged into one result row.

Merged row: `samples.time_s` holds one list per run (run 1 first); `metrics.time_s` has
`median` = the median of the per-run medians, `min`/`max` over every timed iteration of every
run (the same meaning as in a single-run row), `run_medians` and `runs`. A run that fails or
errors makes the merged row fail/error with a message naming the run (core/merge.py, the one
merge of rows every repetition uses).

Two callers repeat launches:
- `meshgate run` runs 2..k of its performance cases after the first run, each in its own runner
  process under <run>/runs/<n> (repeat_perf_cases, merge_runs);
- `ab`, `bisect` and `calibrate` interleave launches of two sides (collect_runs, merge_side, and
  ab's adaptive batches) through a launch function. The launch function is the seam: the real
  one (`DriverLauncher`) starts meshgate-runner through launch.py with crash recovery; tests
  pass a fake.
Every launch's results document comes from launched_document.
"""

from __future__ import annotations

import copy
import dataclasses
import datetime as _dt
import io
import os
import pathlib
import random
import shutil
from typing import Any, Callable, Optional

from ..core import results as _results
from ..core import schema
from ..core.merge import merge_case
from . import launch, progress
from .launch import RunnerSetup, Selection
from .progress import ProgressView, Tally, make_view

def perf_runs(entry: dict | None, row: dict | None = None) -> int:
    """k of a case: `perf.runs` from the runner's listing, else from the row's params; 1."""
    for perf in ((entry or {}).get("perf"), ((row or {}).get("params") or {}).get("perf")):
        if isinstance(perf, dict) and isinstance(perf.get("runs"), int):
            return max(1, perf["runs"])
    return 1


def repeat_schedule(cases: list[dict], catalogue: dict[str, dict]) -> dict[int, list[str]]:
    """For run n = 2..max k, the ids of the cases that still need a run n. Only cases whose
    first run passed are repeated: a wrong answer or a crash has no timing worth replicating."""
    schedule: dict[int, list[str]] = {}
    for row in cases:
        if row.get("status") != "pass":
            continue
        k = perf_runs(catalogue.get(row["id"]), row)
        for n in range(2, k + 1):
            schedule.setdefault(n, []).append(row["id"])
    return dict(sorted(schedule.items()))


def merge_runs(document: dict, runs: dict[int, dict[str, dict]],
               catalogue: dict[str, dict]) -> dict:
    """The results document with every repeated case merged; `runs[n]` maps case id to the
    row of run n. Cases that were not repeated are left as they are."""
    repeated = {case_id for rows in runs.values() for case_id in rows}
    scheduled = {case_id for ids in repeat_schedule(document.get("cases", []), catalogue).values()
                 for case_id in ids}
    merged = copy.deepcopy(document)
    cases = []
    for row in merged.get("cases", []):
        case_id = row.get("id")
        if case_id in scheduled or case_id in repeated:
            k = perf_runs(catalogue.get(case_id), row)
            later = {n: runs.get(n, {}).get(case_id) for n in range(2, k + 1)}
            row = merge_case(row, later, k)
        cases.append(row)
    merged["cases"] = cases
    return merged


# ---------------------------------------------------------------------------------------------
# One launch's results document


def runner_results(path: pathlib.Path) -> Optional[dict]:
    """The results.json a launch of the runner left, or None when it left none that can be
    read (it died before writing one, or left it damaged): its rows are then in results.jsonl.
    Checked against the results schema when the environment asks for it
    (schema.check_if_asked): the test suite validates every runner's output so."""
    try:
        data = _results.load_results(path)
    except _results.InputError:
        return None
    schema.check_if_asked(data, "results-1", path)
    return data


def launched_document(folder: pathlib.Path, run_id: str, recovery: launch.RecoveryResult,
                      plan_ids: list[str], header: dict) -> dict:
    """The results document of one (possibly relaunched) run of the runner in `folder`: its
    results.json for the rows it holds, the rows of results.jsonl for the rest (crashed
    launches, the driver's error rows), in `plan_ids` order."""
    written = runner_results(pathlib.Path(folder) / "results.json")
    if written is not None and (written.get("run") or {}).get("id") not in (None, run_id):
        written = None  # left over from an earlier run into the same folder
    return _results.assemble(written, recovery.rows, plan_ids, header)


def repeat_perf_cases(document: dict, catalogue: dict[str, dict], setup: RunnerSetup,
                      selection: Selection, out_dir: pathlib.Path, run_id: str,
                      view: ProgressView) -> tuple[dict, int]:
    """`meshgate run`'s runs 2..k of the performance cases, each in its own runner process
    under out_dir/runs/<n>, merged into `document`. Returns it and the launches made."""
    schedule = repeat_schedule(document["cases"], catalogue)
    runs: dict[int, dict[str, dict]] = {}
    launches = 0
    for n, ids in schedule.items():
        run_dir = pathlib.Path(out_dir) / "runs" / str(n)
        if run_dir.exists():
            shutil.rmtree(run_dir)
        view.heading(f"meshgate: performance run {n} of {max(schedule)}: {len(ids)} case(s)")
        repeat = Selection(paths=selection.paths, cases=ids)
        outcome = launch.run_with_recovery(setup, repeat, run_dir, run_id, view, Tally(), catalogue)
        launches += len(outcome.launches)
        rows = launched_document(run_dir, run_id, outcome, outcome.plan_ids, {"id": run_id})["cases"]
        runs[n] = {row["id"]: row for row in rows}
    if not schedule:
        return document, launches
    return merge_runs(document, runs, catalogue), launches


# ---------------------------------------------------------------------------------------------
# Interleaved launches of two sides (ab, bisect, calibrate)

# (side, run number starting at 1, case ids, launch folder) -> that launch's results document
LaunchFn = Callable[["Side", int, list, pathlib.Path], dict]


@dataclasses.dataclass
class Side:
    """One build taking part: its label in reports, the revision and where its sources are."""

    label: str
    rev: str = ""
    commit: str = ""
    root: Optional[pathlib.Path] = None
    runner: list = dataclasses.field(default_factory=list)
    env: Optional[dict] = None
    case_paths: list = dataclasses.field(default_factory=list)
    impl: Any = None  # implementations.Impl of this side; None: the launcher's (meshgate's library)

    def describe(self) -> str:
        """How reports name the side: 'REV (commit)', or REV alone for a prebuilt runner."""
        return f"{self.rev} ({self.commit[:10]})" if self.commit else self.rev


def abba_order(k: int, rng: random.Random) -> list[int]:
    """Side indices (0 = A, 1 = B) for k runs per side in randomised ABBA / BAAB blocks.

    Each block of four gives both sides the same mean position in time, so a slow drift of the
    machine cancels; the random choice per block keeps periodic effects from lining up with
    one side. An odd k ends with one AB or BA pair.
    """
    order: list[int] = []
    for _ in range(k // 2):
        order += [0, 1, 1, 0] if rng.random() < 0.5 else [1, 0, 0, 1]
    if k % 2:
        order += [0, 1] if rng.random() < 0.5 else [1, 0]
    return order


def perf_case_ids(listing: list[dict]) -> list[str]:
    """Ids of the listed cases that are performance cases (they carry a `perf` block)."""
    return [entry["id"] for entry in listing if isinstance(entry.get("perf"), dict)]


def merge_side(launches: dict[int, dict], case_ids: list[str], commit: str = "") -> dict:
    """One results document from the launches of one side (run number -> results document).

    Rows get one sample list per run (merge_case); a case absent from a launch makes
    its row an error naming the run. The run block comes from the first launch.
    """
    numbers = sorted(launches)
    if not numbers:
        return {"schema": _results.SCHEMA, "run": _results.complete_run({"commit": commit}), "cases": []}
    by_run = {n: {row["id"]: row for row in launches[n].get("cases", [])} for n in numbers}
    k = len(numbers)
    cases = []
    for case_id in case_ids:
        rows = [by_run[n].get(case_id) for n in numbers]
        first = rows[0]
        if first is None:
            first = _results.error_row(case_id, f"run 1 of {k}: the runner produced no result")
        later = {i + 2: row for i, row in enumerate(rows[1:])}
        cases.append(merge_case(first, later, k))
    run = dict(launches[numbers[0]].get("run") or {})
    if commit:
        run["commit"] = commit
    run["runs"] = k
    run = _results.complete_run(run)
    return {"schema": _results.SCHEMA, "run": run, "cases": cases}


def collect_runs(
    sides: list[Side],
    order: list[int],
    case_ids: dict[str, list[str]],
    launch: LaunchFn,
    out_dir: pathlib.Path,
) -> dict[str, dict]:
    """Launches `order` (indices into sides) one after the other; returns label -> merged results.

    `case_ids[label]` are the cases that side runs. Launch n of a side lands in
    out_dir/<label>/run-<n>.
    """
    launches: dict[str, dict[int, dict]] = {s.label: {} for s in sides}
    for index in order:
        side = sides[index]
        n = len(launches[side.label]) + 1
        folder = pathlib.Path(out_dir) / side.label / f"run-{n}"
        launches[side.label][n] = launch(side, n, case_ids[side.label], folder)
    return {s.label: merge_side(launches[s.label], case_ids[s.label], s.commit) for s in sides}


def timestamp() -> str:
    return _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%d-%H%M%S")


class DriverLauncher:
    """Launches meshgate-runner through the driver (launch.run_with_recovery): crash recovery,
    progress on the terminal (skipped cases as one line per suite and launch), one results
    document per launch."""

    def __init__(self, backend: str = "threads", ranks: Optional[int] = None, case_timeout: Optional[float] = None,
                 run_prefix: str = "ab", quiet: bool = False, stamp: Optional[str] = None,
                 impl: Any = None, cpus: Optional[str] = None):
        self.backend = backend
        self.cpus = cpus  # --cpus LIST of every launch; None: not pinned
        self.impl = impl  # implementations.Impl: the implementation under test; None: meshgate's library
        self.ranks = ranks
        self.case_timeout = case_timeout
        self.run_prefix = f"{run_prefix}-{stamp or timestamp()}"
        self.sink = io.StringIO() if quiet or progress.is_quiet() else None

    def setup(self, side: Side) -> RunnerSetup:
        return RunnerSetup(runner=list(side.runner), backend=self.backend, ranks=self.ranks,
                           case_timeout=self.case_timeout, env=side.env,
                           impl=side.impl if side.impl is not None else self.impl, cpus=self.cpus)

    def list_cases(self, side: Side, selection: Selection) -> list[dict]:
        return launch.list_cases(self.setup(side), selection)

    def __call__(self, side: Side, n: int, case_ids: list, folder: pathlib.Path) -> dict:
        folder = pathlib.Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        run_id = f"{self.run_prefix}-{side.label}-{n}"
        # Each launch runs the same cases: a skip line per case and launch would bury the
        # measured ones, so skips are counted per suite and reason.
        view = make_view(self.sink, fold_skips=True)
        what = side.commit[:10] or side.rev
        if side.impl is not None:
            what += f", --impl {side.impl.name} in {side.impl.python or side.impl.command[0]}"
        view.heading(f"meshgate: {side.label} ({what}) run {n}: {len(case_ids)} case(s)")
        selection = Selection(paths=list(side.case_paths), cases=list(case_ids))
        outcome = launch.run_with_recovery(self.setup(side), selection, folder, run_id, view, Tally())
        view.close()
        return launched_document(folder, run_id, outcome, outcome.plan_ids,
                                 {"id": run_id, "backend": self.backend})


def env_for_commit(commit: str, base: Optional[dict] = None) -> dict:
    """Environment for a runner built from another revision: provenance comes from
    MESHGATE_COMMIT/MESHGATE_DIRTY, and MESHGATE_RUNNER must not redirect the build."""
    env = dict(os.environ if base is None else base)
    env.pop("MESHGATE_RUNNER", None)
    env["MESHGATE_COMMIT"] = commit
    env["MESHGATE_DIRTY"] = "0"
    return env
