"""Repeated runs of performance cases in fresh runner processes, for `ab` and `calibrate`.

One run = one runner launch (docs/gate.md).
`collect_runs` drives a schedule of launches through a launch function and merges each side's
launches into one results document whose rows hold one sample list per run, exactly as
`meshgate run` merges its own repeated runs. The launch function is the seam: the real one
(`DriverLauncher`) starts meshgate-runner through the driver's launch module with crash
recovery; tests pass a fake.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import io
import os
import pathlib
import random
from typing import Any, Callable, Optional

from . import perfruns
from . import results as _results

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
    impl: Any = None  # impls.Impl of this side; None: the launcher's (meshgate's library)


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

    Rows get one sample list per run (perfruns.merge_case); a case absent from a launch makes
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
        cases.append(perfruns.merge_case(first, later, k))
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
                 impl: Any = None):
        self.backend = backend
        self.impl = impl  # impls.Impl: the implementation under test; None: meshgate's library
        self.ranks = ranks
        self.case_timeout = case_timeout
        self.run_prefix = f"{run_prefix}-{stamp or timestamp()}"
        self.sink = io.StringIO() if quiet else None

    def setup(self, side: Side) -> Any:
        from .launch import RunnerSetup

        return RunnerSetup(runner=list(side.runner), backend=self.backend, ranks=self.ranks,
                           case_timeout=self.case_timeout, env=side.env,
                           impl=side.impl if side.impl is not None else self.impl)

    def list_cases(self, side: Side, selection: Any) -> list[dict]:
        from . import launch

        return launch.list_cases(self.setup(side), selection)

    def __call__(self, side: Side, n: int, case_ids: list, folder: pathlib.Path) -> dict:
        from . import launch
        from .launch import Selection
        from .progress import Tally, make_view

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
        written = _results.load_results(folder / "results.json")
        rows = _results.read_rows(folder / "results.jsonl")
        return _results.assemble(written, rows, outcome.plan_ids, {"id": run_id, "backend": self.backend})


def env_for_commit(commit: str, base: Optional[dict] = None) -> dict:
    """Environment for a runner built from another revision: provenance comes from
    MESHGATE_COMMIT/MESHGATE_DIRTY, and MESHGATE_RUNNER must not redirect the build."""
    env = dict(os.environ if base is None else base)
    env.pop("MESHGATE_RUNNER", None)
    env["MESHGATE_COMMIT"] = commit
    env["MESHGATE_DIRTY"] = "0"
    return env
