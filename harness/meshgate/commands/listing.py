"""`meshgate list`: the expanded case ids, kinds and tags the runner would run."""

from __future__ import annotations

import argparse
import json
import sys

from ..core import files
from ..core.markup import visible
from ..system import build, implementations, launch
from ..system.launch import RunnerSetup
from ..system.selection import SelectionError
from .options import add_impl_argument, add_memory_limit_argument, add_selection_arguments, selection_from_args


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "list", help="list the expanded cases (id, kind, tags)",
        description="Lists the cases the runner expands from the case files (default: all of "
                    "cases/), after the filters.")
    add_selection_arguments(parser)
    add_memory_limit_argument(parser)
    parser.add_argument("--json", action="store_true", help="print the list as JSON")
    add_impl_argument(parser)
    parser.add_argument("--preset", metavar="P",
                        help="CMake preset to build the runner with (default: ci/preset)")
    parser.set_defaults(func=list_command)


def render_table(entries: list[dict]) -> str:
    """One row per case: id, kind, tags, and the number of runs for performance cases."""
    rows = [["id", "kind", "tags", "perf runs"]]
    for entry in entries:
        perf = entry.get("perf")
        runs = str(perf.get("runs", 1)) if isinstance(perf, dict) else "-"
        rows.append([visible(entry["id"]), visible(entry.get("kind", "")),
                     visible(",".join(entry.get("tags", []))), runs])
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(cell.ljust(widths[i]) for i, cell in enumerate(row)).rstrip()
             for row in rows]
    lines.append(f"{len(entries)} case(s)")
    return "\n".join(lines)


def list_command(args: argparse.Namespace) -> int:
    root = files.source_root()
    try:
        selection = selection_from_args(args, root, default_tags=[])
        impl = implementations.resolve(args.impl)
        setup = RunnerSetup(runner=build.runner_command(root, args.preset),
                            memory_limit=args.memory_limit)
        entries = launch.list_cases(setup, selection)
        # The cases run would hand to that implementation (which may still skip some).
        if impl is not None:
            for entry in entries:
                entry["impl"] = impl.name
    except (SelectionError, build.BuildError, implementations.ImplError) as e:
        print(f"meshgate: {e}", file=sys.stderr)
        return 2
    except launch.RunnerInputError as e:
        sys.stderr.write(visible(e.stderr, multiline=True))
        return 2
    if args.json:
        print(json.dumps(entries, indent=1))
    else:
        print(render_table(entries))
    return 0
