"""`meshgate history add|changes|show`: the history database (timeline/history.py), its series
and change points (timeline/series.py) and their reports (timeline/render.py) from the command
line. Exit 0, or 2 on unusable input or database."""

from __future__ import annotations

import argparse
import json
import pathlib
import sys
from typing import Any, Optional, Sequence

from ..core import files
from ..timeline import history, render, series
from ..timeline.series import HistoryError, Series


def _cmd_add(args: argparse.Namespace) -> int:
    db = pathlib.Path(args.db)
    try:
        runs, points, replaced = history.add(db, [pathlib.Path(p) for p in args.results])
    except HistoryError as e:
        print(f"meshgate history add: {e}", file=sys.stderr)
        return 2
    again = f" ({replaced} already there, replaced)" if replaced else ""
    print(f"history: {points} point(s) of {runs} run(s){again} -> {db}")
    return 0


def _open_series(args: argparse.Namespace, command: str, patterns: Sequence[str] = ()) -> Optional[list[Series]]:
    try:
        return history.read_series(pathlib.Path(args.db), patterns,
                                   repo=pathlib.Path(args.repo) if args.repo else files.source_root())
    except HistoryError as e:
        print(f"meshgate history {command}: {e}", file=sys.stderr)
        return None


def _cmd_changes(args: argparse.Namespace) -> int:
    series_list = _open_series(args, "changes")
    if series_list is None:
        return 2
    changes = series.all_changes(series_list)
    short = series.short_series(series_list, changes)
    print(render.changes_table(changes, len(series_list), short))
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
    changes = series.all_changes(series_list)
    print(render.series_table(series_list, changes))
    for short in series.short_series(series_list, changes):
        print(f"{short.case}: {short.describe()}")
    out_dir = pathlib.Path(args.out) if args.out else files.default_report_dir("history")
    render.write_report(out_dir, pathlib.Path(args.db), series_list, changes)
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
    repo_help = ("git repository whose first-parent line orders each series' commits (default: "
                 "the project or checkout meshgate works in); commits it does not know keep the "
                 "order of their runs' start times")

    p_add = actions.add_parser("add", help="add the points of results files (one transaction)")
    p_add.add_argument("results", nargs="+", metavar="RESULTS.json",
                       help="results.json files of nightly runs (one point per commit per case)")
    p_add.add_argument("--db", default=str(history.default_db()), help=db_help)
    p_add.set_defaults(func=_cmd_add)

    p_changes = actions.add_parser("changes", help="change points: first bad commit per case")
    p_changes.add_argument("--db", default=str(history.default_db()), help=db_help)
    p_changes.add_argument("--json", metavar="F", help="also write {\"changes\": [...]} to F")
    p_changes.add_argument("--repo", metavar="DIR", help=repo_help)
    p_changes.set_defaults(func=_cmd_changes)

    p_show = actions.add_parser("show", help="table and plots of the series of some cases")
    p_show.add_argument("cases", nargs="*", metavar="CASES", help="case ids or patterns (default: all)")
    p_show.add_argument("--db", default=str(history.default_db()), help=db_help)
    p_show.add_argument("--out", metavar="DIR", help="report directory (default: reports/history-<time>)")
    p_show.add_argument("--repo", metavar="DIR", help=repo_help)
    p_show.set_defaults(func=_cmd_show)
