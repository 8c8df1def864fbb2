"""`meshgate report DIR`: a run folder's reports (run/report.py) written again. Exit 0 when
written, 2 on unusable input."""

from __future__ import annotations

import pathlib
import sys
from typing import Any

from ..core.results import InputError
from ..run import report


def _cmd_report(args: Any) -> int:
    try:
        run_dir, written = report.render_run_dir(pathlib.Path(args.dir))
    except InputError as e:
        print(f"meshgate report: {e}", file=sys.stderr)
        return 2
    for path in written:
        print(f"report: {path}")
    return 0


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "report", help="re-render the reports (report.md, junit.xml, report.html) of a run's results",
        description="Writes report.md, junit.xml and report.html again from DIR/results.json (or "
                    "from DIR/results.jsonl when the run was killed before it wrote results.json). "
                    "Exit 0 when written, 2 on unusable input.")
    parser.add_argument("dir", metavar="DIR", help="a run folder (reports/<run-id>) or a results.json")
    parser.set_defaults(func=_cmd_report)
