"""The `meshgate` command line: one sub-command per module in COMMAND_MODULES. Each module
exposes `register(subparsers)`, which adds its sub-parser and sets `func` (args -> exit code)."""

from __future__ import annotations

import argparse
import sys

from . import ab, baseline, bisect, calibrate, compare, history, listing, nightly, plan, report, run

COMMAND_MODULES = [run, listing, compare, ab, baseline, calibrate, plan, nightly, bisect, history, report]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="meshgate",
        description="Test-and-regression harness for distributed kernels: runs the YAML cases "
                    "of cases/ through meshgate-runner, compares with baselines and reports.")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for module in COMMAND_MODULES:
        module.register(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    # A terminal or log whose encoding cannot show a character of a case name gets an escape
    # for it, not a UnicodeEncodeError halfway through a run.
    for stream in (sys.stdout, sys.stderr):
        if hasattr(stream, "reconfigure"):
            stream.reconfigure(errors="backslashreplace")
    args = build_parser().parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
