"""`meshgate parity`: the cases run once on another implementation (PyTorch by default), every
disagreement checked against the committed list (the list and the check are gate/parity.py's)."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from ..core import files
from ..core import results
from ..gate import parity
from ..gate.parity import ListError, check, default_list, known_class, load_list, render
from ..run import report
from ..system import build, implementations, launch
from ..system.launch import RunnerSetup
from ..system.progress import Tally, make_view
from ..system.selection import SelectionError
from .options import add_selection_arguments, selection_from_args


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "parity", help="run the cases on another implementation (torch) and check every "
                       "disagreement against the committed list",
        description="Runs every case that --impl (default: torch) can express and checks each "
                    "disagreement with a case's expectation against the committed list "
                    "(default: baselines/<impl>-parity.json). Exit 0 when they match, 1 on an "
                    "unlisted disagreement, a listed one that no longer happens or an error "
                    "row, 2 on unusable input.")
    add_selection_arguments(parser, default="every case under cases/")
    parser.add_argument("--impl", default="torch", metavar="NAME",
                        help="the implementation to compare (default: torch; see run --impl)")
    parser.add_argument("--list", metavar="FILE",
                        help="the committed disagreements (default: baselines/<impl>-parity.json)")
    parser.add_argument("--out", metavar="DIR", help="where the run lands (default: reports/parity-<time>)")
    parser.add_argument("--preset", metavar="P", help="CMake preset of the runner (default: ci/preset)")
    parser.add_argument("--json", metavar="F", help="also write the tally and the findings as JSON")
    parser.set_defaults(func=parity_command)


class _KnownDisagreements:
    """The progress view, with a listed disagreement shown as `known (<class>)` instead of
    `fail`: the list says it is expected, and a screen of `fail` lines above a PASS misleads."""

    def __init__(self, view, listed: dict):
        self.view = view
        self.listed = listed

    def finished(self, tally, case_id, status, seconds, message) -> None:
        cls = known_class(self.listed, case_id) if status in parity.DISAGREEING else None
        if cls is not None:
            status, message = f"known ({cls})", ""
        self.view.finished(tally, case_id, status, seconds, message)

    def __getattr__(self, name):
        return getattr(self.view, name)


def parity_command(args: argparse.Namespace) -> int:
    started = time.monotonic()
    root = files.source_root()
    try:
        impl = implementations.resolve(args.impl)
        if impl is None:
            raise implementations.ImplError("--impl meshgate compares meshgate with itself: name another "
                                  "implementation")
        selection = selection_from_args(args, root, default_tags=[])
        runner = build.runner_command(root, args.preset)
        listed = load_list(Path(args.list) if args.list else default_list(root, impl.name))
    except (implementations.ImplError, SelectionError, build.BuildError, ListError) as e:
        print(f"meshgate parity: {e}", file=sys.stderr)
        return 2
    if args.out:
        out_dir = Path(args.out).resolve()
        run_id = out_dir.name
    else:
        run_id, out_dir = files.claim_run_dir(root / "reports", f"parity-{impl.name}-"
                                                + time.strftime("%Y%m%d-%H%M%S", time.gmtime()))
    out_dir.mkdir(parents=True, exist_ok=True)
    setup = RunnerSetup(runner=runner, impl=impl)
    view = _KnownDisagreements(make_view(), listed)
    view.heading(f"meshgate parity: {impl.name} on {' '.join(selection.args())} -> {out_dir}")
    try:
        outcome = launch.run_with_recovery(setup, selection, out_dir, run_id, view, Tally())
    except launch.LaunchError as e:
        view.close()
        print(f"meshgate parity: {e}", file=sys.stderr)
        return 2
    view.close()
    if not outcome.started:
        print(f"meshgate parity: the runner ran no case ({outcome.last.death()})", file=sys.stderr)
        return 2
    rows = results.read_rows(out_dir / "results.jsonl")
    try:
        header = results.load_results(out_dir / "results.json")["run"]
        version = str(header.get("impls", {}).get(impl.name, {}).get("version"))
    except Exception:  # a killed runner leaves no header; the rows still say everything else
        version = "?"
    whole = not (args.cases or args.suite or args.tag or args.case)
    unlisted, stale, errors = check(rows, listed, whole=whole)
    try:
        report.render_run_dir(out_dir)
    except Exception as e:  # the verdict below stands without the reports
        print(f"meshgate parity: no report.md/html for {out_dir}: {e}", file=sys.stderr)
    seconds = time.monotonic() - started
    text = render(rows, listed, seconds, impl.name, version)
    problems = parity.problems(unlisted, stale, errors, listed, impl.name, version)
    print(text)
    if problems:
        print("\n" + "\n".join(f"- {p}" for p in problems))
    if args.json:
        Path(args.json).write_text(json.dumps(parity.findings_json(
            rows, unlisted, stale, errors, impl.name, version, seconds), indent=1) + "\n")
    print(f"\nmeshgate parity: {'FAIL' if problems else 'PASS'}: {len(unlisted)} unlisted, "
          f"{len(stale)} stale, {len(errors)} error(s); report: {out_dir}")
    return 1 if problems else 0
