"""The `meshgate` command line: one sub-command per module in COMMAND_MODULES. Each module
exposes `register(subparsers)`, which adds its sub-parser and sets `func` (args -> exit code)."""

from __future__ import annotations

import argparse
import sys

from . import ab, baseline, bisect, calibrate, compare, history, listing, nightly, plan, report, run

COMMAND_MODULES = [run, listing, compare, ab, baseline, calibrate, plan, nightly, bisect, history, report]


class _VersionAction(argparse.Action):
    """Prints version.describe() and exits: computed only when asked for, since it starts the
    runner."""

    def __init__(self, option_strings, dest, **kwargs):
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kwargs)

    def __call__(self, parser, namespace, values, option_string=None):
        from . import version

        print(version.describe())
        parser.exit(0)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="meshgate",
        description="Test-and-regression harness for distributed kernels: runs the YAML cases "
                    "of cases/ through meshgate-runner, compares with baselines and reports.")
    parser.add_argument("--version", action=_VersionAction,
                        help="print the driver's version and commit, and the runner's version, "
                             "commit and compiled-in backends")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for module in COMMAND_MODULES:
        module.register(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
