"""The nightly series of the history and their change points, pure: a series is one case on one
machine class, its points grouped per commit (several runs of one commit make one value: the
median of all their per-run medians, docs/gate.md), its commits in git's first-parent order
where the repository knows them (`order_by_ancestry`: a backfilled older commit lands where it
belongs, not where its run's start time puts it), else in the order of the runs' start times.

Changes per series (see changepoint.py for the statistics):
- `slower` / `faster`: E-divisive means with a permutation test on the per-commit medians of
  the passing points, filtered by a minimum effect robust to slow drift;
- `status`: exact, the first commit that fails or errors after one that passed (skips are
  neither);
- `plan`: exact, any change of a deterministic signal (signals.extract, compared with
  signals.diff: plan, bytes, modeled costs, GEMM algorithm ...) between consecutive commits.
`commit` is the first bad commit, `last_good` the one before it in the series (the range to
bisect), `ratio` median after / median before around the change (null when a side has no
timing), `p` the permutation p-value (null for the exact kinds).

A timing series of fewer commits than the change-point test can judge (fewest_points_to_judge)
is named as such, so that a step it cannot see is not read as no step. The database the points
come from is history.py's; the reports render.py's.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import json
import math
import statistics
from typing import Any, Iterable, Optional, Sequence

from ..core import jsonfile
from ..core.markup import visible
from ..core.results import FAILING, finite
from ..core.svg import format_seconds
from ..gate import signals as _signals
from . import changepoint

KINDS = ("slower", "faster", "status", "plan")
# Worst first: a commit's status is the worst of its points' (skips only when nothing ran).
STATUS_RANK = {"error": 0, "fail": 1, "pass": 2, "skip": 3}


class HistoryError(Exception):
    """Unusable input or database; the message names the file (exit code 2)."""


@dataclasses.dataclass
class CommitPoint:
    """All points of one commit in one series (usually one nightly run)."""
    commit: str
    started: str  # the first run's start time (ISO)
    started_utc: float
    statuses: list[str]
    medians: list[float]  # per-run medians of the passing points
    signals: Optional[dict]  # of the last point that ran (pass or fail)
    message: str = ""
    runs: int = 0

    @property
    def status(self) -> str:
        return min(self.statuses, key=lambda s: STATUS_RANK.get(s, 0)) if self.statuses else "skip"

    @property
    def value(self) -> Optional[float]:
        return statistics.median(self.medians) if self.medians else None


@dataclasses.dataclass
class Series:
    case: str
    machine: str
    commits: list[CommitPoint]


@dataclasses.dataclass
class Change:
    case: str
    machine: str
    kind: str
    commit: str  # first bad
    last_good: Optional[str]
    ratio: Optional[float]
    p: Optional[float]
    position: int  # index of the first bad commit in the series' commits
    detail: str = ""

    def to_json(self) -> dict[str, Any]:
        return {"case": self.case, "commit": self.commit, "last_good": self.last_good,
                "ratio": self.ratio, "p": self.p, "kind": self.kind,
                "machine": self.machine, "detail": self.detail}


def _matches(case_id: str, patterns: Sequence[str]) -> bool:
    return not patterns or any(case_id == p or fnmatch.fnmatchcase(case_id, p) for p in patterns)


def series_from_points(points: Iterable[tuple], where: str, patterns: Sequence[str] = ()) -> list[Series]:
    """Series from the history's points (machine class, case, commit, run start, its UTC
    seconds, status, message, per-run medians as JSON, signals as JSON), ordered by machine
    class, case and start time. HistoryError, naming `where` (the database), when the JSON of
    a point is not what `add` writes."""
    out: list[Series] = []
    current: Optional[Series] = None
    by_commit: dict[str, CommitPoint] = {}
    for machine, case, commit, started, started_utc, status, message, medians, sig in points:
        if not _matches(case, patterns):
            continue
        if current is None or (current.machine, current.case) != (machine, case):
            current = Series(case, machine, [])
            out.append(current)
            by_commit = {}
        cp = by_commit.get(commit)
        if cp is None:
            cp = by_commit[commit] = CommitPoint(commit, started, started_utc, [], [], None)
            current.commits.append(cp)
        cp.runs += 1
        cp.statuses.append(status)
        point = f"{where}: the point of {visible(case)} at {visible(commit)}"
        if status == "pass":
            values = jsonfile.parse(str(medians), f"{point}: medians", list, error=HistoryError)
            cp.medians.extend(v for v in map(finite, values) if v is not None and v > 0)
        if status in ("pass", "fail"):
            cp.signals = jsonfile.parse(str(sig), f"{point}: signals", error=HistoryError)
        if status in FAILING and message:
            cp.message = message
    return sorted(out, key=lambda s: (s.case, s.machine))


def order_by_ancestry(series_list: Iterable[Series], lineage: Sequence[str]) -> None:
    """Puts each series' commits in the order of `lineage` (full hashes, oldest first: the
    first-parent line of the branch measured), in place. A commit is matched by its hash or a
    prefix of it (runs record short hashes). Commits off the lineage (a side branch, a commit
    the repository does not have) keep their place after the lineage commit that preceded them
    in start-time order."""
    if not lineage:
        return
    full = {sha: i for i, sha in enumerate(lineage)}
    by_prefix: dict[str, int] = {}

    def position(commit: str) -> Optional[int]:
        if commit in full:
            return full[commit]
        if commit not in by_prefix:
            hits = [i for sha, i in full.items() if len(commit) >= 4 and sha.startswith(commit.lower())]
            by_prefix[commit] = hits[0] if len(hits) == 1 else -1
        return None if by_prefix[commit] < 0 else by_prefix[commit]

    for s in series_list:
        keyed, anchor = [], (-1, 0)
        for order, cp in enumerate(s.commits):
            at = position(cp.commit)
            if at is not None:
                anchor = (at, 0)
                keyed.append(((at, 0, order), cp))
            else:
                keyed.append(((anchor[0], 1, order), cp))
        s.commits = [cp for _, cp in sorted(keyed, key=lambda item: item[0])]


def _ratio_around(timed: list[tuple[int, float]], position: int, timing_changes: list[int],
                  width: int = changepoint.NEIGHBOURHOOD) -> Optional[float]:
    """median after / median before of up to `width` timed commits each side of `position`,
    not reaching past the timing change points on either side (commit positions), so that a
    status or plan change is not credited with a step in time that came before or after it."""
    lo = max((b for b in timing_changes if b < position), default=0)
    hi = min((b for b in timing_changes if b > position), default=math.inf)
    before = [v for i, v in timed if lo <= i < position][-width:]
    after = [v for i, v in timed if position <= i < hi][:width]
    if not before or not after:
        return None
    b = statistics.median(before)
    return statistics.median(after) / b if b > 0 else None


def _describe_signal_changes(changes: list) -> str:
    parts = []
    for c in changes[:3]:
        parts.append(f"{c.signal}: {_short(c.old)} -> {_short(c.new)}")
    if len(changes) > 3:
        parts.append(f"and {len(changes) - 3} more")
    return "; ".join(parts)


def _short(value: Any, limit: int = 120) -> str:
    text = json.dumps(value) if not isinstance(value, str) else value
    return text if len(text) <= limit else text[: limit - 3] + "..."


def series_changes(series: Series, seed: int = changepoint.SEED) -> list[Change]:
    commits = series.commits
    changes: list[Change] = []
    timed = [(i, c.value) for i, c in enumerate(commits) if c.value is not None]
    found = changepoint.detect([v for _, v in timed], seed=seed)
    for cp in found:
        position = timed[cp.index][0]
        changes.append(Change(
            series.case, series.machine, "slower" if cp.ratio > 1 else "faster",
            commits[position].commit, commits[timed[cp.index - 1][0]].commit, cp.ratio, cp.p, position,
            f"median {format_seconds(cp.before)} -> {format_seconds(cp.after)}"))
    timing_changes = [c.position for c in changes]
    ran = [(i, c) for i, c in enumerate(commits) if c.status != "skip"]
    for (_, prev), (i, cur) in zip(ran, ran[1:]):
        if prev.status == "pass" and cur.status in FAILING:
            ratio = _ratio_around(timed, i, timing_changes) if cur.value is not None else None
            changes.append(Change(series.case, series.machine, "status", cur.commit, prev.commit, ratio, None, i,
                                  f"pass -> {cur.status}" + (f": {cur.message}" if cur.message else "")))
    with_signals = [(i, c) for i, c in enumerate(commits) if c.signals is not None]
    for (_, prev), (i, cur) in zip(with_signals, with_signals[1:]):
        differ = _signals.diff(prev.signals, cur.signals)[0]
        if differ:
            ratio = _ratio_around(timed, i, timing_changes) if cur.value is not None else None
            changes.append(Change(series.case, series.machine, "plan", cur.commit, prev.commit, ratio, None, i,
                                  _describe_signal_changes(differ)))
    changes.sort(key=lambda c: (c.position, KINDS.index(c.kind)))
    return changes


@dataclasses.dataclass
class ShortSeries:
    """A series with timing too short for the change-point test: `points` timed commits where
    it needs `needed`."""
    case: str
    machine: str
    points: int
    needed: int

    def describe(self) -> str:
        return (f"timing: {self.points} point{'s' if self.points != 1 else ''}, at least "
                f"{self.needed} needed to judge a change")

    def to_json(self) -> dict[str, Any]:
        return {"case": self.case, "machine": self.machine, "points": self.points, "needed": self.needed}


def fewest_points_to_judge(p_threshold: float = changepoint.P_THRESHOLD,
                           min_segment: int = changepoint.MIN_SEGMENT) -> int:
    """The fewest points in which the change-point test can report any step. Its permutation
    test alone needs the clearest split there is, two flat halves of n points, to be rare
    enough among the shufflings (2 / C(n, n // 2) <= `p_threshold`: 14 points at 0.001); the
    short-side test (changepoint.py) judges a large enough step from SHORT_MIN_POINTS on.
    Neither looks at fewer than two segments of `min_segment`."""
    n = 2 * min_segment
    while 2 / math.comb(n, n // 2) > p_threshold:
        n += 1
    return max(2 * min_segment, min(n, changepoint.SHORT_MIN_POINTS))


def short_series(series_list: Iterable[Series], changes: Iterable[Change]) -> list[ShortSeries]:
    """The series with timing whose timed commits are too few to judge a change in it and in
    which none was found (a lucky permutation test can still find one)."""
    needed = fewest_points_to_judge()
    judged = {(c.case, c.machine) for c in changes if c.kind in ("slower", "faster")}
    out = []
    for s in series_list:
        points = sum(1 for c in s.commits if c.value is not None)
        if 0 < points < needed and (s.case, s.machine) not in judged:
            out.append(ShortSeries(s.case, s.machine, points, needed))
    return out


def all_changes(series_list: Iterable[Series]) -> list[Change]:
    out: list[Change] = []
    for s in series_list:
        out.extend(series_changes(s))
    return out
