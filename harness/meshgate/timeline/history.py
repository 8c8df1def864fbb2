"""The history database: the nightly history of every case in SQLite, which `meshgate history`
(commands/history.py) and `meshgate nightly` add to and read.

    meshgate history add RESULTS.json... [--db F]      one point per (run, commit, case)
    meshgate history changes [--db F] [--json F]        first bad commit per change
    meshgate history show [CASES] [--db F] [--out DIR]  table + one plot per case

A point is (commit, case id, per-run medians, deterministic signals, status, run start time),
stored with the run's machine class (core.results.results_machine_class) so that series of
different machines are never mixed: every series is one case on one machine class, ordered by
the runs' start times. Several runs of one commit make one value of the series: the median of
all their per-run medians (docs/gate.md). The series and their change points are series.py's.

Storage: SQLite in WAL mode (readers do not block the nightly writer), one transaction per
`add` (all files or none), re-adding a run replaces its points (idempotent). The schema
version lives in `schema_version`; MIGRATIONS[i] upgrades version i to i + 1 and a database
newer than SCHEMA_VERSION is refused rather than guessed at.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as _dt
import functools
import json
import pathlib
import sqlite3
from typing import Any, Callable, Optional, Sequence

from ..core import files
from ..core import results as _results
from ..gate import signals as _signals
from ..gate.compare import run_medians
from ..system import git
from .series import STATUS_RANK, HistoryError, Series, order_by_ancestry, series_from_points


def default_db() -> pathlib.Path:
    """reports/history.sqlite where the driver works (files.source_root)."""
    return files.source_root() / "reports" / "history.sqlite"


SCHEMA_VERSION = 1

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


def _load_run(path: pathlib.Path, results: Optional[dict] = None) -> _Run:
    """The run of a results file (`results`, its document, when it is at hand already)."""
    try:
        if results is None:
            results = _results.load_results(path)
        else:
            _results.check_results(results, path)
    except _results.InputError as e:
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
                _results.results_machine_class(results), run, results.get("cases", []))


def add(db_path: pathlib.Path, paths: Sequence[pathlib.Path],
        documents: Optional[Sequence[dict]] = None) -> tuple[int, int, int]:
    """Adds results files in one transaction (with `documents`, their documents already read,
    one per path). Returns (runs, points, runs replaced)."""
    documents = documents if documents is not None else [None] * len(paths)
    loaded = [_load_run(pathlib.Path(p), d) for p, d in zip(paths, documents)]  # every file checked before writing
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
                status = row.get("status") if row.get("status") in STATUS_RANK else "error"
                conn.execute(
                    "INSERT OR REPLACE INTO points (run_id, commit_sha, case_id, machine_class, started_utc,"
                    " status, message, medians, signals) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (r.run_id, r.commit, row["id"], r.machine_class, r.started_utc, status,
                     str(row.get("message") or ""), json.dumps(run_medians(row)),
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


def load_series(conn: sqlite3.Connection, patterns: Sequence[str] = ()) -> list[Series]:
    """Every (case, machine class) series of the database, its points grouped by commit in the
    order of the runs' start times (series.series_from_points). HistoryError, naming the
    database, when its tables or the JSON of a point are not what `add` writes."""
    db = conn.execute("PRAGMA database_list").fetchone()[2]
    try:
        rows = conn.execute(
            "SELECT p.machine_class, p.case_id, p.commit_sha, r.started, p.started_utc, p.status,"
            " p.message, p.medians, p.signals FROM points p JOIN runs r USING (run_id, commit_sha)"
            " ORDER BY p.machine_class, p.case_id, p.started_utc, p.run_id").fetchall()
    except sqlite3.DatabaseError as e:
        raise HistoryError(f"{db}: not a usable history database: {e}") from None
    return series_from_points(rows, db, patterns)


def read_series(db_path: pathlib.Path, patterns: Sequence[str] = (),
                repo: Optional[pathlib.Path] = None) -> list[Series]:
    """The series of the database at `db_path` (which must exist and hold history); with
    `repo`, each series' commits in the first-parent order of its HEAD (order_by_ancestry)."""
    with contextlib.closing(open_db(pathlib.Path(db_path), create=False)) as conn:
        series_list = load_series(conn, patterns)
    if repo is not None:
        order_by_ancestry(series_list, git.first_parent_lineage(pathlib.Path(repo)))
    return series_list
