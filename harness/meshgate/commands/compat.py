"""`meshgate compat`: what changed between two implementations on the same cases (the
classification is gate/compat.py's)."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from ..core import files
from ..gate.compat import DEFAULT_CASES, compare, label, markdown, run_side
from ..system import build, implementations, launch
from ..system.selection import SelectionError
from .options import add_selection_arguments, selection_from_args


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "compat", help="classify what changed between two implementations (e.g. two PyTorch "
                       "versions) on the same cases",
        description="Runs the cases (default: " + " ".join(DEFAULT_CASES) + ") once on --base and "
                    "once on --candidate (each an --impl, e.g. torch@/path/to/venv and torch) "
                    "and classifies every case that behaves differently: new_rejection, "
                    "semantic_change, representation_change, relaxation, expressibility. "
                    "Writes compat.md and compat.json. Exit 0, or 2 on unusable input.")
    add_selection_arguments(parser)
    parser.add_argument("--base", required=True, metavar="IMPL", help="the earlier implementation")
    parser.add_argument("--candidate", required=True, metavar="IMPL", help="the later one")
    parser.add_argument("--out", metavar="DIR", help="report folder (default: reports/compat-<time>)")
    parser.add_argument("--preset", metavar="P", help="CMake preset of the runner (default: ci/preset)")
    parser.set_defaults(func=compat_command)


def compat_command(args: argparse.Namespace) -> int:
    root = files.source_root()
    if not (args.cases or args.suite or args.tag or args.case):
        args.cases = [str(root / c) for c in DEFAULT_CASES]
    try:
        sides = [("base", implementations.resolve(args.base)), ("candidate", implementations.resolve(args.candidate))]
        selection = selection_from_args(args, root, default_tags=[])
        runner = build.runner_command(root, args.preset)
    except (implementations.ImplError, SelectionError, build.BuildError) as e:
        print(f"meshgate compat: {e}", file=sys.stderr)
        return 2
    out_dir = Path(args.out).resolve() if args.out else \
        files.claim_run_dir(root / "reports", "compat-" + time.strftime("%Y%m%d-%H%M%S", time.gmtime()))[1]
    out_dir.mkdir(parents=True, exist_ok=True)
    ran = {}
    try:
        for side, impl in sides:
            ran[side] = run_side(side, impl, runner, selection, out_dir)
    except launch.LaunchError as e:
        print(f"meshgate compat: {e}", file=sys.stderr)
        return 2
    (base_rows, base_run), (candidate_rows, candidate_run) = ran["base"], ran["candidate"]
    changes = compare(base_rows, candidate_rows)
    base_label, candidate_label = label(args.base, base_run), label(args.candidate, candidate_run)
    text = markdown(changes, base_label, candidate_label, len(base_rows))
    (out_dir / "compat.md").write_text(text + "\n", encoding="utf-8")
    (out_dir / "compat.json").write_text(json.dumps(
        {"base": base_label, "candidate": candidate_label, "compared": len(base_rows),
         "changes": changes}, indent=1) + "\n", encoding="utf-8")
    print(text)
    print(f"report: {out_dir / 'compat.md'}")
    return 0
