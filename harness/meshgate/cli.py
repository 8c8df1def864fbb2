"""The `meshgate` command line: one sub-command per module of COMMANDS (meshgate/commands/).
Each module exposes `register(subparsers)`, which adds its sub-parser and sets `func` (args ->
exit code).

Only the module of the command asked for is imported (all of them for --help), so a command
such as `meshgate plan`, called in loops, does not pay for loading the statistics, history and
report code."""

from __future__ import annotations

import argparse
import contextlib
import importlib
import os
import signal
import sys
import traceback

from .core.markup import visible
from .system import version

# Command name -> the module of meshgate.commands that registers it, in the order --help lists.
COMMANDS = {"run": "run", "list": "listing", "compare": "compare", "ab": "ab",
            "baseline": "baseline", "calibrate": "calibrate", "plan": "plan", "nightly": "nightly",
            "bisect": "bisect", "history": "history", "report": "report", "parity": "parity",
            "compat": "compat", "releases": "releases", "import": "import_results", "clean": "clean"}


class _VersionAction(argparse.Action):
    """Prints version.describe() and exits: computed only when asked for, since it starts the
    runner."""

    def __init__(self, option_strings, dest, **kwargs):
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kwargs)

    def __call__(self, parser, namespace, values, option_string=None):
        print(version.describe())
        parser.exit(0)


class _Parser(argparse.ArgumentParser):
    """A usage error is one line and a hint, not the whole usage: the commands take many
    options, and the one line that says what is wrong would scroll past. Every command's parser
    is of this class (argparse makes subparsers of their parent's class)."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message}\n(see {self.prog} --help)\n")


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The parser of every command, or with `only`, of that one command."""
    parser = _Parser(
        prog="meshgate",
        description="Test-and-regression harness for distributed kernels: runs the YAML cases "
                    "of cases/ through meshgate-runner, compares with baselines and reports.")
    parser.add_argument("--version", action=_VersionAction,
                        help="print the driver's version and commit, and the runner's version, "
                             "commit and compiled-in backends")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name, module in COMMANDS.items():
        if only is None or name == only:
            importlib.import_module(f".commands.{module}", __package__).register(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    # A terminal or log whose encoding cannot show a character of a case name gets an escape
    # for it, not a UnicodeEncodeError halfway through a run.
    for stream in (sys.stdout, sys.stderr):
        if hasattr(stream, "reconfigure"):
            stream.reconfigure(errors="backslashreplace")
    argv = sys.argv[1:] if argv is None else argv
    only = argv[0] if argv and argv[0] in COMMANDS else None
    try:
        args = build_parser(only).parse_args(argv)
        code = args.func(args)
        sys.stdout.flush()  # a reader that went away shows here, not at exit
        return code
    except BrokenPipeError:
        # `meshgate list | head -1`: nobody reads any more. stdout goes to /dev/null, so that
        # Python's flush at exit does not report the pipe again, and the exit code is a
        # shell's for a process ended by SIGPIPE, which the CONTRACT's codes do not use.
        with contextlib.suppress(OSError, ValueError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 128 + signal.SIGPIPE
    except OSError as e:
        # The file system said no (an output path that is a folder, a full disk, a missing
        # permission): the user's to fix, so one line naming the file, not a traceback.
        # A rename names its destination second: that is the path the user gave.
        name = e.filename2 if e.filename2 is not None else e.filename
        where = f"{visible(str(name))}: " if name is not None else ""
        print(f"meshgate{' ' + only if only else ''}: {where}{e.strerror or e}", file=sys.stderr)
        return 2
    except Exception as e:
        # A bug, not a verdict: exit 1 would read as a regression to CI. The traceback stays
        # visible for the bug report.
        traceback.print_exc()
        print(f"meshgate{' ' + only if only else ''}: internal error: {type(e).__name__}: "
              f"{visible(str(e))}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
