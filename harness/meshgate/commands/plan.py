"""`meshgate plan`: explain a redistribution without running it.

The planning itself is C++ (`meshgate-plan`, lib/plan): this command turns its options into
the planner's arguments and runs the binary through system/meshgate_plan.py, passing its output
and exit code through. The binary links the planner alone and starts in milliseconds; most of a
call's time is this driver's Python start-up and the build check."""

from __future__ import annotations

import argparse
import sys

from ..system import build, meshgate_plan


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "plan", help="explain a redistribution (steps, merges, warnings, cost) without running it",
        description="Plans a DTensor redistribution like PyTorch's redistribute_local_tensor: "
                    "the greedy transforms, the flattened-mesh merge pass and why each run was "
                    "or was not merged, warnings, bytes and modeled cost per step. Nothing runs, "
                    "so meshes up to 2^22 ranks plan in well under a second (e.g. 8x16x8x16).",
        epilog='example: meshgate plan --mesh 2x2x2:A,B,C --flatten A,C '
               '--from "P(sum),R,P(sum)" --to "R,R,R"')
    parser.add_argument("--mesh", required=True, metavar="SHAPE[:NAMES]",
                        help="mesh sizes and dim names, e.g. 2x2x2:A,B,C")
    parser.add_argument("--flatten", action="append", default=[], metavar="DIMS[=NAME]",
                        help="register a flattened dim on the root first, e.g. A,C (repeatable)")
    parser.add_argument("--from", dest="src", required=True, metavar="PLACEMENTS",
                        help='source placements, e.g. "P(sum),R,S(0)"')
    parser.add_argument("--to", dest="dst", required=True, metavar="PLACEMENTS",
                        help='target placements, e.g. "R,R,R"')
    parser.add_argument("--shape", metavar="N,M,...", help="global tensor shape (default 1024,1024)")
    parser.add_argument("--dtype", help="element type (default float32)")
    parser.add_argument("--coord", metavar="I,J,...",
                        help="the rank's mesh coordinate; it sets the logical shapes of uneven "
                             "shards (default all zeros)")
    parser.add_argument("--no-optimize", action="store_true",
                        help="skip the merge pass (the kill switch)")
    parser.add_argument("--planner", choices=["greedy", "min_cost"],
                        help="greedy (PyTorch's default) or min_cost (cheapest under the model)")
    parser.add_argument("--api", choices=["internal", "public"],
                        help="internal (redistribute_local_tensor) or public "
                             "(DTensor.redistribute, which rejects R -> P)")
    parser.add_argument("--ranks-per-node", type=int, metavar="N",
                        help="topology of the cost model (default 8)")
    parser.add_argument("--json", action="store_true", help="print the plan as JSON")
    parser.add_argument("--preset", metavar="P",
                        help="CMake preset to build the runner with (default: ci/preset)")
    parser.set_defaults(func=plan_command)


def planner_arguments(args: argparse.Namespace) -> list[str]:
    """The `meshgate-plan` arguments for these options, in a fixed order."""
    out = ["--mesh", args.mesh]
    for dims in args.flatten:
        out += ["--flatten", dims]
    out += ["--from", args.src, "--to", args.dst]
    for option, value in (("--shape", args.shape), ("--dtype", args.dtype),
                          ("--coord", args.coord), ("--planner", args.planner),
                          ("--api", args.api)):
        if value is not None:
            out += [option, value]
    if args.ranks_per_node is not None:
        out += ["--ranks-per-node", str(args.ranks_per_node)]
    if args.no_optimize:
        out.append("--no-optimize")
    if args.json:
        out.append("--json")
    return out


def plan_command(args: argparse.Namespace) -> int:
    try:
        return meshgate_plan.run_planner(planner_arguments(args), args.preset)
    except build.BuildError as e:
        print(f"meshgate: {e}", file=sys.stderr)
        return 2
