"""`meshgate history`: the nightly history of every case in SQLite, and its change points.

    meshgate history add RESULTS.json... [--db F]      one point per (run, commit, case)
    meshgate history changes [--db F] [--json F]        first bad commit per change
    meshgate history show [CASES] [--db F] [--out DIR]  table + one plot per case

A point is (commit, case id, per-run medians, deterministic signals, status, run start time),
stored with the run's machine class (baseline.results_machine_class) so that series of
different machines are never mixed: every series is one case on one machine class, ordered by
the runs' start times. Several runs of one commit make one value of the series: the median of
all their per-run medians (docs/gate.md).

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
is named as such, so that a step it cannot see is not read as no step.

Storage: SQLite in WAL mode (readers do not block the nightly writer), one transaction per
`add` (all files or none), re-adding a run replaces its points (idempotent). The schema
version lives in `schema_version`; MIGRATIONS[i] upgrades version i to i + 1 and a database
newer than SCHEMA_VERSION is refused rather than guessed at.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import datetime as _dt
import fnmatch
import functools
import json
import math
import pathlib
import sqlite3
import statistics
import sys
from typing import Any, Callable, Iterable, Optional, Sequence

from . import baseline as _baseline
from . import build
from . import changepoint, jsonfile, stats
from . import compare as _compare
from . import signals as _signals
from . import svg
from .markup import case_column_width, html_text, md_cell, visible

def default_db() -> pathlib.Path:
    """reports/history.sqlite where the driver works (build.source_root)."""
    return build.source_root() / "reports" / "history.sqlite"
SCHEMA_VERSION = 1
KINDS = ("slower", "faster", "status", "plan")
# Worst first: a commit's status is the worst of its points' (skips only when nothing ran).
_STATUS_RANK = {"error": 0, "fail": 1, "pass": 2, "skip": 3}


class HistoryError(Exception):
    """Unusable input or database; the message names the file (exit code 2)."""


# ---------------------------------------------------------------------------------------------
# Schema and migrations


_SCHEMA_V1 = (
    """CREATE TABLE runs (
        run_id        TEXT NOT NULL,
        commit_sha    TEXT NOT NULL,
        started       TEXT NOT NULL,  -- run.started as recorded
        started_utc   REAL NOT NULL,  -- the same instant in seconds since the epoch, for ordering
        machine_class TEXT NOT NULL,
        machine       TEXT NOT NULL,  -- run.machine (JSON)
        dirty         INTEGER NOT NULL,
        backend       TEXT,
        source        TEXT NOT NULL,  -- the results file it was added from
        added         TEXT NOT NULL,
        PRIMARY KEY (run_id, commit_sha))""",
    """CREATE TABLE points (
        run_id        TEXT NOT NULL,
        commit_sha    TEXT NOT NULL,
        case_id       TEXT NOT NULL,
        machine_class TEXT NOT NULL,
        started_utc   REAL NOT NULL,
        status        TEXT NOT NULL,
        message       TEXT NOT NULL,
        medians       TEXT NOT NULL,  -- per-run medians in seconds (JSON list)
        signals       TEXT NOT NULL,  -- signals.extract(row, run) (JSON)
        PRIMARY KEY (run_id, commit_sha, case_id),
        FOREIGN KEY (run_id, commit_sha) REFERENCES runs (run_id, commit_sha) ON DELETE CASCADE)""",
    "CREATE INDEX points_by_series ON points (machine_class, case_id, started_utc)",
)


def _create_v1(conn: sqlite3.Connection) -> None:
    # One statement at a time: executescript() would commit the migration's transaction.
    for statement in _SCHEMA_V1:
        conn.execute(statement)


# MIGRATIONS[i] takes a database at version i to version i + 1, inside the open transaction.
# Version 0 is an empty database. Append a step (never edit an old one) and bump SCHEMA_VERSION.
MIGRATIONS: list[Callable[[sqlite3.Connection], None]] = [_create_v1]


def _columns(conn: sqlite3.Connection) -> dict[str, set[str]]:
    """The columns of each table of the database."""
    tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
    return {t: {r[0] for r in conn.execute("SELECT name FROM pragma_table_info(?)", (t,))}
            for t in tables}


@functools.lru_cache(maxsize=None)
def _columns_at(version: int) -> dict[str, set[str]]:
    """The columns of each table MIGRATIONS give a database at `version`."""
    with contextlib.closing(sqlite3.connect(":memory:")) as conn:
        for step in MIGRATIONS[:version]:
            step(conn)
        return _columns(conn)


def _schema_version(conn: sqlite3.Connection, path: pathlib.Path) -> int:
    """The history schema version of the database; HistoryError when it is none (another
    program's database, tables of another layout) or newer than this code reads."""
    columns = _columns(conn)
    if "schema_version" not in columns:
        if columns:
            raise HistoryError(f"{path}: not a meshgate history database (no schema_version table)")
        return 0
    version = conn.execute("SELECT max(version) FROM schema_version").fetchone()[0]
    if version is None:
        return 0
    if type(version) is not int:
        raise HistoryError(f"{path}: schema_version holds {version!r}, not a version number: not a "
                           "meshgate history database")
    if version > SCHEMA_VERSION:
        raise HistoryError(
            f"{path}: history schema version {version} is newer than this meshgate "
            f"understands ({SCHEMA_VERSION}); use the meshgate that wrote it, or another --db")
    lacking = sorted(t for t, cs in _columns_at(version).items() if not cs <= columns.get(t, set()))
    if lacking:
        raise HistoryError(f"{path}: not a meshgate history database: table(s) {', '.join(lacking)} "
                           f"lack columns of history schema version {version}")
    return version


def open_db(path: pathlib.Path, create: bool = True) -> sqlite3.Connection:
    """Opens (or creates) a history database in WAL mode at the current schema version,
    migrating an older one. A newer one is refused (it holds data this code cannot read), and so
    is a file that is no history database (_schema_version)."""
    path = pathlib.Path(path)
    if not path.exists():
        if not create:
            raise HistoryError(f"{path}: no history database here (add results first: meshgate history add)")
        path.parent.mkdir(parents=True, exist_ok=True)
    try:
        conn = sqlite3.connect(str(path), isolation_level=None, timeout=60.0)
        try:
            # A file that is no history database is refused before anything in it changes,
            # its journal mode included; inside the transaction the version is read again.
            if _schema_version(conn, path) == 0 and not create:
                # An empty file (or an empty SQLite database): a reader leaves it as it is.
                raise HistoryError(f"{path}: holds no history yet (add results first: "
                                   "meshgate history add)")
            conn.execute("PRAGMA journal_mode = WAL")
            conn.execute("PRAGMA foreign_keys = ON")
            conn.execute("BEGIN IMMEDIATE")
            version = _schema_version(conn, path)
            if version < SCHEMA_VERSION:
                for step in MIGRATIONS[version:SCHEMA_VERSION]:
                    step(conn)
                conn.execute("CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL)")
                conn.execute("DELETE FROM schema_version")
                conn.execute("INSERT INTO schema_version (version) VALUES (?)", (SCHEMA_VERSION,))
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            conn.close()
            raise
    except sqlite3.DatabaseError as e:
        raise HistoryError(f"{path}: not a usable SQLite database: {e}") from e
    return conn


# ---------------------------------------------------------------------------------------------
# add


def _parse_time(text: Any, path: pathlib.Path) -> float:
    if not isinstance(text, str) or not text:
        raise HistoryError(f"{path}: run.started is missing: history orders points by the run's start time")
    try:
        # The runner writes UTC as a trailing Z, which fromisoformat reads only from Python 3.11.
        when = _dt.datetime.fromisoformat(text[:-1] + "+00:00" if text.endswith(("Z", "z")) else text)
    except ValueError as e:
        raise HistoryError(f"{path}: run.started {text!r} is not an ISO 8601 time") from e
    if when.tzinfo is None:
        when = when.replace(tzinfo=_dt.timezone.utc)
    return when.timestamp()


@dataclasses.dataclass
class _Run:
    path: pathlib.Path
    run_id: str
    commit: str
    started: str
    started_utc: float
    machine_class: str
    run: dict
    rows: list


def _load_run(path: pathlib.Path) -> _Run:
    try:
        results = _baseline.load_results(path)
    except _baseline.InputError as e:
        raise HistoryError(str(e)) from e
    run = results.get("run") or {}
    commit = run.get("commit")
    if not isinstance(commit, str) or not commit.strip() or commit.strip() == "unknown":
        raise HistoryError(f"{path}: run.commit is missing: a history point needs the commit it measured")
    started_utc = _parse_time(run.get("started"), path)
    run_id = run.get("id")
    if not isinstance(run_id, str) or not run_id:
        run_id = str(run.get("started"))
    return _Run(path, run_id, commit.strip(), str(run.get("started")), started_utc,
                _baseline.results_machine_class(results), run, results.get("cases", []))


def add(db_path: pathlib.Path, paths: Sequence[pathlib.Path]) -> tuple[int, int, int]:
    """Adds results files in one transaction. Returns (runs, points, runs replaced)."""
    loaded = [_load_run(pathlib.Path(p)) for p in paths]  # every file checked before writing
    conn = open_db(db_path)
    now = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
    points = replaced = 0
    try:
        conn.execute("BEGIN IMMEDIATE")
        for r in loaded:
            key = (r.run_id, r.commit)
            if conn.execute("SELECT 1 FROM runs WHERE run_id = ? AND commit_sha = ?", key).fetchone():
                replaced += 1
                conn.execute("DELETE FROM points WHERE run_id = ? AND commit_sha = ?", key)
            conn.execute(
                "INSERT INTO runs (run_id, commit_sha, started, started_utc, machine_class, machine, dirty,"
                " backend, source, added) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
                " ON CONFLICT (run_id, commit_sha) DO UPDATE SET started = excluded.started,"
                " started_utc = excluded.started_utc, machine_class = excluded.machine_class,"
                " machine = excluded.machine, dirty = excluded.dirty, backend = excluded.backend,"
                " source = excluded.source, added = excluded.added",
                (r.run_id, r.commit, r.started, r.started_utc, r.machine_class,
                 json.dumps(r.run.get("machine") or {}, sort_keys=True), int(bool(r.run.get("dirty"))),
                 r.run.get("backend"), str(r.path), now))
            for row in r.rows:
                status = row.get("status") if row.get("status") in _STATUS_RANK else "error"
                conn.execute(
                    "INSERT OR REPLACE INTO points (run_id, commit_sha, case_id, machine_class, started_utc,"
                    " status, message, medians, signals) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (r.run_id, r.commit, row["id"], r.machine_class, r.started_utc, status,
                     str(row.get("message") or ""), json.dumps(_compare.run_medians(row)),
                     json.dumps(_signals.extract(row, r.run), sort_keys=True)))
                points += 1
        conn.execute("COMMIT")
    except BaseException as e:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        if isinstance(e, sqlite3.DatabaseError):  # tables of another layout, a damaged file
            raise HistoryError(f"{db_path}: not a usable history database: {e}") from None
        raise
    finally:
        conn.close()
    return len(loaded), points, replaced


# ---------------------------------------------------------------------------------------------
# Series


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
        return min(self.statuses, key=lambda s: _STATUS_RANK.get(s, 0)) if self.statuses else "skip"

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


def load_series(conn: sqlite3.Connection, patterns: Sequence[str] = ()) -> list[Series]:
    """Every (case, machine class) series of the database, its points grouped by commit in the
    order of the runs' start times. HistoryError, naming the database, when its tables or the
    JSON of a point are not what `add` writes."""
    db = conn.execute("PRAGMA database_list").fetchone()[2]
    try:
        rows = conn.execute(
            "SELECT p.machine_class, p.case_id, p.commit_sha, r.started, p.started_utc, p.status,"
            " p.message, p.medians, p.signals FROM points p JOIN runs r USING (run_id, commit_sha)"
            " ORDER BY p.machine_class, p.case_id, p.started_utc, p.run_id").fetchall()
    except sqlite3.DatabaseError as e:
        raise HistoryError(f"{db}: not a usable history database: {e}") from None
    out: list[Series] = []
    current: Optional[Series] = None
    by_commit: dict[str, CommitPoint] = {}
    for machine, case, commit, started, started_utc, status, message, medians, sig in rows:
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
        point = f"{db}: the point of {visible(case)} at {visible(commit)}"
        if status == "pass":
            values = jsonfile.parse(str(medians), f"{point}: medians", list, error=HistoryError)
            cp.medians.extend(v for v in map(stats.finite, values) if v is not None and v > 0)
        if status in ("pass", "fail"):
            cp.signals = jsonfile.parse(str(sig), f"{point}: signals", error=HistoryError)
        if status in ("fail", "error") and message:
            cp.message = message
    return sorted(out, key=lambda s: (s.case, s.machine))


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
            f"median {svg.format_seconds(cp.before)} -> {svg.format_seconds(cp.after)}"))
    timing_changes = [c.position for c in changes]
    ran = [(i, c) for i, c in enumerate(commits) if c.status != "skip"]
    for (_, prev), (i, cur) in zip(ran, ran[1:]):
        if prev.status == "pass" and cur.status in ("fail", "error"):
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
    p-value estimates the share of shufflings of the series that split it as well as the
    series itself; for the clearest step there is, two flat halves of n points, that share is
    2 / C(n, n // 2) (the halves either way round), and a step is reported only when p is at
    most `p_threshold`. Nor does the test look at fewer than two segments of `min_segment`."""
    n = 2 * min_segment
    while 2 / math.comb(n, n // 2) > p_threshold:
        n += 1
    return n


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


# ---------------------------------------------------------------------------------------------
# Text output


def _fmt_ratio(r: Optional[float]) -> str:
    return f"{r:.3f}" if isinstance(r, (int, float)) and math.isfinite(r) else "-"


def _fmt_p(p: Optional[float]) -> str:
    return f"{p:.2g}" if p is not None else "-"


def changes_table(changes: list[Change], series_count: int, short: Sequence[ShortSeries] = ()) -> str:
    """The change points as a table, then the series whose timing was too short to judge."""
    lines = []
    if not changes:
        lines.append(f"no change points in {series_count} series")
    else:
        w = case_column_width(c.case for c in changes)
        lines.append(f"{'case':<{w}} {'kind':<7} {'first bad':<12} {'last good':<12} {'ratio':>7} {'p':>8}  detail")
        for c in changes:
            lines.append(f"{c.case:<{w}} {c.kind:<7} {c.commit[:12]:<12} {(c.last_good or '-')[:12]:<12} "
                         f"{_fmt_ratio(c.ratio):>7} {_fmt_p(c.p):>8}  {c.detail}")
            if len({x.machine for x in changes}) > 1:
                lines.append(f"    machine {c.machine}")
        lines.append(f"{len(changes)} change point(s) in {series_count} series")
    if short:
        lines.append(f"{len(short)} series too short to judge a change in timing:")
        w = case_column_width(s.case for s in short)
        machines = len({s.machine for s in short}) > 1
        for s in short:
            lines.append(f"{s.case:<{w}} {s.describe()}" + (f" (machine {s.machine})" if machines else ""))
    return "\n".join(lines)


def _date(text: str) -> str:
    return text[:10] if text else ""


def _minute(text: str) -> str:
    """'2026-11-26 07:15' of a run's ISO start time."""
    return text[:16].replace("T", " ") if text else ""


def series_table(series_list: list[Series], changes: list[Change]) -> str:
    lines = []
    by_series: dict[tuple[str, str], list[Change]] = {}
    for c in changes:
        by_series.setdefault((c.case, c.machine), []).append(c)
    if len(series_list) == 1:
        s = series_list[0]
        marks = {}
        for c in by_series.get((s.case, s.machine), []):
            marks.setdefault(c.position, []).append(f"<- {c.kind}" + (f" x{c.ratio:.3f}" if c.ratio else ""))
        lines.append(f"{s.case} on {s.machine}")
        lines.append(f"{'date':<10} {'commit':<12} {'status':<6} {'runs':>4} {'median':>10}")
        for i, c in enumerate(s.commits):
            value = svg.format_seconds(c.value) if c.value is not None else "-"
            lines.append(f"{_date(c.started):<10} {c.commit[:12]:<12} {c.status:<6} {len(c.medians):>4} "
                         f"{value:>10}  {' '.join(marks.get(i, []))}".rstrip())
        return "\n".join(lines)
    w = case_column_width(s.case for s in series_list)
    lines.append(f"{'case':<{w}} {'commits':>7} {'last':<10} {'status':<6} {'median':>10}  changes")
    for s in series_list:
        last = s.commits[-1]
        value = next((svg.format_seconds(c.value) for c in reversed(s.commits) if c.value is not None), "-")
        cs = by_series.get((s.case, s.machine), [])
        summary = ", ".join(f"{c.kind}@{c.commit[:8]}" for c in cs[-3:]) + (" ..." if len(cs) > 3 else "")
        lines.append(f"{s.case:<{w}} {len(s.commits):>7} {_date(last.started):<10} {last.status:<6} {value:>10}  {summary}")
    if len({s.machine for s in series_list}) > 1:
        lines.append("(series of different machine classes are listed separately)")
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------
# Reports


_CHANGE_COLOURS = {"slower": "#c62828", "faster": "#1565c0", "status": "#6a1b9a", "plan": "#ef6c00"}
SHORT_SHA = 7  # characters of a commit on the plots' axis, as `git log --oneline` shows it


def series_svg(series: Series, changes: list[Change], width: int = 760, height: int = 260) -> str:
    """The per-commit medians of one series (per-run medians faint behind them), failing commits
    as crosses on the axis, and every change point as a dashed line before its first bad
    commit; hovering a point or a line shows its commit and date (SVG <title>)."""
    commits = series.commits
    left, right, top, bottom = 70, 20, 30, 40
    values = [v for c in commits for v in c.medians]
    if values:
        lo, hi = min(values), max(values)
    else:
        lo, hi = 0.0, 1.0
    pad = (hi - lo) * 0.1 or abs(hi) * 0.05 or 1.0
    lo, hi = max(0.0, lo - pad), hi + pad
    n = max(len(commits), 2)
    plot_w, plot_h = width - left - right, height - top - bottom

    def px(i: float) -> float:
        return left + (i + 0.5) / n * plot_w

    def py(v: float) -> float:
        return top + (1 - (v - lo) / (hi - lo)) * plot_h

    title = f"{series.case} ({series.machine})"
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" role="img" '
        f'aria-label="{html_text(title)}" class="chart series">',
        f'<text x="{left}" y="18" class="title">{html_text(title)}</text>',
        f'<line x1="{left}" y1="{top + plot_h}" x2="{width - right}" y2="{top + plot_h}" class="axis"/>',
        f'<line x1="{left}" y1="{top}" x2="{left}" y2="{top + plot_h}" class="axis"/>',
    ]
    for t in svg._nice_ticks(lo, hi, 4):
        parts.append(f'<line x1="{left}" y1="{py(t):.1f}" x2="{width - right}" y2="{py(t):.1f}" class="grid"/>')
        parts.append(f'<text x="{left - 6}" y="{py(t) + 4:.1f}" class="tick" text-anchor="end">{html_text(svg.format_seconds(t))}</text>')
    # Points are labelled by commit, which tells them apart where a date would not (several
    # runs a day); the date and the full hash are in the label's tooltip.
    for i in svg.label_positions(len(commits), plot_w, SHORT_SHA):
        c = commits[i]
        parts.append(f'<text x="{px(i):.1f}" y="{top + plot_h + 16}" class="tick commit" text-anchor="middle">'
                     f'<title>{html_text(c.commit)} ({html_text(_minute(c.started))})</title>'
                     f'{html_text(c.commit[:SHORT_SHA])}</text>')
    parts.append(f'<text x="{left + plot_w / 2:.1f}" y="{height - 6}" class="label" text-anchor="middle">'
                 f'commits in run order (median time per commit)</text>')
    for c in changes:
        x = px(c.position - 0.5)
        colour = _CHANGE_COLOURS.get(c.kind, "#333")
        how = f" x{c.ratio:.3f}" if c.ratio else ""
        p = f", p={c.p:.2g}" if c.p is not None else ""
        parts.append(
            f'<line x1="{x:.1f}" y1="{top}" x2="{x:.1f}" y2="{top + plot_h}" stroke="{colour}" stroke-width="2" '
            f'stroke-dasharray="5,3" class="change change-{html_text(c.kind)}" data-commit="{html_text(c.commit)}">'
            f'<title>{html_text(c.kind)}{html_text(how)}{html_text(p)}: first bad {html_text(c.commit)} '
            f'({html_text(_date(commits[c.position].started))}), last good {html_text(c.last_good or "-")}'
            f'{" - " + html_text(c.detail) if c.detail else ""}</title></line>')
        parts.append(f'<text x="{x + 3:.1f}" y="{top + 10}" class="tick" fill="{colour}">{html_text(c.kind)}</text>')
    path = [f"{px(i):.1f},{py(c.value):.1f}" for i, c in enumerate(commits) if c.value is not None]
    if len(path) > 1:
        parts.append(f'<polyline points="{" ".join(path)}" fill="none" stroke="#4e79a7" stroke-width="1" '
                     'stroke-opacity="0.6"/>')
    for i, c in enumerate(commits):
        tip = f"{c.commit} ({_date(c.started)}) {c.status}"
        for v in c.medians:
            parts.append(f'<circle cx="{px(i):.1f}" cy="{py(v):.1f}" r="2" fill="#4e79a7" fill-opacity="0.25"/>')
        if c.value is not None:
            parts.append(
                f'<circle cx="{px(i):.1f}" cy="{py(c.value):.1f}" r="3.5" fill="#4e79a7" class="point">'
                f'<title>{html_text(tip)}: median {html_text(svg.format_seconds(c.value))} of {len(c.medians)} run(s)</title></circle>')
        elif c.status in ("fail", "error"):
            y = top + plot_h - 6
            parts.append(
                f'<text x="{px(i):.1f}" y="{y:.1f}" text-anchor="middle" fill="#c62828" class="failed">x'
                f'<title>{html_text(tip)}{": " + html_text(c.message) if c.message else ""}</title></text>')
    parts.append("</svg>")
    return "".join(parts)


_CSS = """
body{font:14px/1.45 system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:24px auto;max-width:1100px;color:#1d1d1f;padding:0 16px}
h1{font-size:22px;margin:0 0 4px} h2{font-size:16px;margin:26px 0 8px;border-bottom:1px solid #ddd;padding-bottom:4px}
table{border-collapse:collapse;margin:6px 0;font-size:13px} th,td{border:1px solid #ddd;padding:4px 8px;text-align:left;vertical-align:top}
th{background:#f4f4f6} td.num{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
code{font:12px ui-monospace,Menlo,Consolas,monospace;background:#f4f4f6;padding:1px 4px;border-radius:3px}
.facts{color:#555;margin-bottom:10px}
svg.chart{background:#fff;border:1px solid #e3e3e6;border-radius:4px}
svg .title{font-size:12px;font-weight:600} svg .tick{font-size:10px;fill:#555} svg .label{font-size:11px;fill:#333}
svg .axis{stroke:#888} svg .grid{stroke:#eee} svg .failed{font:bold 12px sans-serif}
"""


def report_markdown(db_path: pathlib.Path, series_list: list[Series], changes: list[Change]) -> str:
    lines = [f"# meshgate history", "", f"Database `{db_path}`: {len(series_list)} series "
             f"(case x machine class), {len(changes)} change point(s).", ""]
    if changes:
        lines += ["## Change points", "", "| case | kind | first bad | last good | ratio | p | detail |",
                  "|---|---|---|---|---:|---:|---|"]
        for c in changes:
            lines.append(f"| {md_cell(c.case)} | {c.kind} | `{c.commit[:12]}` | `{(c.last_good or '-')[:12]}` | "
                         f"{_fmt_ratio(c.ratio)} | {_fmt_p(c.p)} | {md_cell(c.detail)} |")
        lines.append("")
    by_series: dict[tuple[str, str], list[Change]] = {}
    for c in changes:
        by_series.setdefault((c.case, c.machine), []).append(c)
    lines += ["## Series", "", "| case | machine | commits | first | last | last status | last median | changes |",
              "|---|---|---:|---|---|---|---:|---:|"]
    for s in series_list:
        value = next((svg.format_seconds(c.value) for c in reversed(s.commits) if c.value is not None), "-")
        lines.append(f"| {md_cell(s.case)} | {md_cell(s.machine)} | {len(s.commits)} | {_date(s.commits[0].started)} | "
                     f"{_date(s.commits[-1].started)} | {s.commits[-1].status} | {value} | "
                     f"{len(by_series.get((s.case, s.machine), []))} |")
    short = short_series(series_list, changes)
    if short:
        lines += ["", f"Too short to judge a change in timing ({len(short)} series):", ""]
        lines += [f"- {md_cell(s.case)} ({md_cell(s.machine)}): {s.describe()}" for s in short]
    lines += ["", "Plots: report.html (one per series; hover a point for its commit and date)."]
    return "\n".join(lines) + "\n"


def report_html(db_path: pathlib.Path, series_list: list[Series], changes: list[Change]) -> str:
    by_series: dict[tuple[str, str], list[Change]] = {}
    for c in changes:
        by_series.setdefault((c.case, c.machine), []).append(c)
    body = [f"<h1>meshgate history</h1>",
            f'<div class="facts">database <code>{html_text(db_path)}</code>: {len(series_list)} series, '
            f"{len(changes)} change point(s). Points are per-commit medians of the per-run medians; "
            f"faint dots the per-run medians; dashed lines the change points (before the first bad "
            f"commit); crosses failing commits.</div>"]
    for s in series_list:
        cs = by_series.get((s.case, s.machine), [])
        body.append(f"<h2>{html_text(s.case)}</h2>")
        body.append(f'<div class="facts">{html_text(s.machine)}, {len(s.commits)} commit(s), '
                    f"{html_text(_date(s.commits[0].started))} to {html_text(_date(s.commits[-1].started))}</div>")
        body.append(series_svg(s, cs))
        if cs:
            body.append("<table><tr><th>kind</th><th>first bad</th><th>last good</th><th>ratio</th>"
                        "<th>p</th><th>detail</th></tr>")
            for c in cs:
                body.append(f"<tr><td>{html_text(c.kind)}</td><td><code>{html_text(c.commit)}</code></td>"
                            f"<td><code>{html_text(c.last_good or '-')}</code></td><td class=\"num\">{_fmt_ratio(c.ratio)}</td>"
                            f"<td class=\"num\">{_fmt_p(c.p)}</td><td>{html_text(c.detail)}</td></tr>")
            body.append("</table>")
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>meshgate history</title>"
            f"<style>{_CSS}</style></head><body>\n" + "\n".join(body) + "\n</body></html>\n")


def write_report(out_dir: pathlib.Path, db_path: pathlib.Path, series_list: list[Series],
                 changes: list[Change]) -> list[pathlib.Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for name, text in (("report.md", report_markdown(db_path, series_list, changes)),
                       ("report.html", report_html(db_path, series_list, changes))):
        path = out_dir / name
        path.write_text(text)
        written.append(path)
    return written


# ---------------------------------------------------------------------------------------------
# Command line


def _cmd_add(args: argparse.Namespace) -> int:
    db = pathlib.Path(args.db)
    try:
        runs, points, replaced = add(db, [pathlib.Path(p) for p in args.results])
    except HistoryError as e:
        print(f"meshgate history add: {e}", file=sys.stderr)
        return 2
    again = f" ({replaced} already there, replaced)" if replaced else ""
    print(f"history: {points} point(s) of {runs} run(s){again} -> {db}")
    return 0


def _open_series(args: argparse.Namespace, command: str, patterns: Sequence[str] = ()) -> Optional[list[Series]]:
    try:
        with contextlib.closing(open_db(pathlib.Path(args.db), create=False)) as conn:
            return load_series(conn, patterns)
    except HistoryError as e:
        print(f"meshgate history {command}: {e}", file=sys.stderr)
        return None


def _cmd_changes(args: argparse.Namespace) -> int:
    series_list = _open_series(args, "changes")
    if series_list is None:
        return 2
    changes = all_changes(series_list)
    short = short_series(series_list, changes)
    print(changes_table(changes, len(series_list), short))
    if args.json:
        path = pathlib.Path(args.json)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"changes": [c.to_json() for c in changes],
                                    "too_short": [s.to_json() for s in short]}, indent=1) + "\n")
    return 0


def _cmd_show(args: argparse.Namespace) -> int:
    series_list = _open_series(args, "show", args.cases)
    if series_list is None:
        return 2
    if not series_list:
        what = " ".join(args.cases) if args.cases else "anything"
        print(f"meshgate history show: no case in {args.db} matches {what}", file=sys.stderr)
        return 2
    changes = all_changes(series_list)
    print(series_table(series_list, changes))
    for short in short_series(series_list, changes):
        print(f"{short.case}: {short.describe()}")
    out_dir = pathlib.Path(args.out) if args.out else _compare.default_report_dir("history")
    write_report(out_dir, pathlib.Path(args.db), series_list, changes)
    print(f"report: {out_dir / 'report.md'}")
    print(f"report: {out_dir / 'report.html'}")
    return 0


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "history", help="nightly history per case (SQLite) and its change points",
        description="One point per commit per case and machine class; change points by E-divisive "
                    "means (timing) and exact comparison (status, deterministic signals).")
    actions = parser.add_subparsers(dest="history_command", metavar="ACTION", required=True)
    db_help = "history database (default: reports/history.sqlite)"

    p_add = actions.add_parser("add", help="add the points of results files (one transaction)")
    p_add.add_argument("results", nargs="+", metavar="RESULTS.json",
                       help="results.json files of nightly runs (one point per commit per case)")
    p_add.add_argument("--db", default=str(default_db()), help=db_help)
    p_add.set_defaults(func=_cmd_add)

    p_changes = actions.add_parser("changes", help="change points: first bad commit per case")
    p_changes.add_argument("--db", default=str(default_db()), help=db_help)
    p_changes.add_argument("--json", metavar="F", help="also write {\"changes\": [...]} to F")
    p_changes.set_defaults(func=_cmd_changes)

    p_show = actions.add_parser("show", help="table and plots of the series of some cases")
    p_show.add_argument("cases", nargs="*", metavar="CASES", help="case ids or patterns (default: all)")
    p_show.add_argument("--db", default=str(default_db()), help=db_help)
    p_show.add_argument("--out", metavar="DIR", help="report directory (default: reports/history-<time>)")
    p_show.set_defaults(func=_cmd_show)
