"""`meshgate compat`: what changed between two implementations on the same cases (the
classification is gate/compat.py's)."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

from ..core import files
from ..gate.compat import DEFAULT_CASES, compare, label, markdown, run_side, sweep_differential
from ..system import build, implementations, launch
from ..system.selection import SelectionError
from .options import add_selection_arguments, selection_from_args


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "compat", help="classify what changed between two implementations (e.g. two PyTorch "
                       "versions) or two environments (e.g. two cuBLASLt builds) on the same cases",
        description="Runs the cases (default: " + " ".join(DEFAULT_CASES) + ") once on --base and "
                    "once on --candidate (each an --impl, e.g. torch@/path/to/venv and torch; "
                    "meshgate's own library when not given), each side with its own --base-env / "
                    "--candidate-env, and classifies every case that behaves differently: "
                    "new_rejection, semantic_change, representation_change, relaxation, "
                    "expressibility; GEMM sweeps also get the shapes failing on one side only. "
                    "Writes compat.md and compat.json. Exit 0, or 2 on unusable input.")
    add_selection_arguments(parser)
    parser.add_argument("--base", metavar="IMPL", help="the earlier implementation (default: meshgate)")
    parser.add_argument("--candidate", metavar="IMPL", help="the later one (default: meshgate)")
    parser.add_argument("--base-env", action="append", default=[], metavar="NAME=VALUE",
                        help="set NAME for the base side's runner and what it starts (repeatable), "
                             "e.g. LD_LIBRARY_PATH=/usr/local/cuda/lib64 for that cuBLASLt")
    parser.add_argument("--candidate-env", action="append", default=[], metavar="NAME=VALUE",
                        help="the same for the candidate side")
    parser.add_argument("--out", metavar="DIR", help="report folder (default: reports/compat-<time>)")
    parser.add_argument("--preset", metavar="P", help="CMake preset of the runner (default: ci/preset)")
    parser.set_defaults(func=compat_command)


class UsageError(Exception):
    pass


def side_env(assignments: list[str], flag: str) -> dict[str, str]:
    """NAME=VALUE assignments as a dict; UsageError naming the flag for a malformed one."""
    env = {}
    for text in assignments:
        name, sep, value = text.partition("=")
        if not sep or not (name.isascii() and name.isidentifier()):
            raise UsageError(f"{flag} {text!r}: expected NAME=VALUE with NAME a variable name")
        env[name] = value
    return env


def side_spec(impl: str | None, env: dict[str, str]) -> str:
    text = impl or implementations.DEFAULT
    return text + "".join(f" {name}={value}" for name, value in env.items())


def compat_command(args: argparse.Namespace) -> int:
    root = files.source_root()
    if not (args.cases or args.suite or args.tag or args.case):
        args.cases = [str(root / c) for c in DEFAULT_CASES]
    try:
        envs = {"base": side_env(args.base_env, "--base-env"),
                "candidate": side_env(args.candidate_env, "--candidate-env")}
        specs = {"base": side_spec(args.base, envs["base"]),
                 "candidate": side_spec(args.candidate, envs["candidate"])}
        if specs["base"] == specs["candidate"]:
            raise UsageError(f"both sides are {specs['base']}: give --base/--candidate "
                             f"implementations or --base-env/--candidate-env that differ")
        sides = [("base", implementations.resolve(args.base)),
                 ("candidate", implementations.resolve(args.candidate))]
        selection = selection_from_args(args, root, default_tags=[])
        runner = build.runner_command(root, args.preset)
    except (UsageError, implementations.ImplError, SelectionError, build.BuildError) as e:
        print(f"meshgate compat: {e}", file=sys.stderr)
        return 2
    out_dir = Path(args.out).resolve() if args.out else \
        files.claim_run_dir(root / "reports", "compat-" + time.strftime("%Y%m%d-%H%M%S", time.gmtime()))[1]
    out_dir.mkdir(parents=True, exist_ok=True)
    ran = {}
    try:
        for side, impl in sides:
            env = dict(os.environ, **envs[side]) if envs[side] else None
            ran[side] = run_side(side, impl, runner, selection, out_dir, env)
    except launch.LaunchError as e:
        print(f"meshgate compat: {e}", file=sys.stderr)
        return 2
    (base_rows, base_run), (candidate_rows, candidate_run) = ran["base"], ran["candidate"]
    changes = compare(base_rows, candidate_rows)
    sweeps = sweep_differential(base_rows, candidate_rows)
    base_label = label(specs["base"], base_run, candidate_run)
    candidate_label = label(specs["candidate"], candidate_run, base_run)
    if base_label == candidate_label:  # the runs tell the sides apart by nothing they record
        base_label += f" ({specs['base']})"
        candidate_label += f" ({specs['candidate']})"
    text = markdown(changes, base_label, candidate_label, len(base_rows), sweeps)
    (out_dir / "compat.md").write_text(text + "\n", encoding="utf-8")
    (out_dir / "compat.json").write_text(json.dumps(
        {"base": base_label, "candidate": candidate_label, "compared": len(base_rows),
         "changes": changes, "sweeps": sweeps}, indent=1) + "\n", encoding="utf-8")
    print(text)
    print(f"report: {out_dir / 'compat.md'}")
    return 0
