"""`meshgate import FORMAT FILE...`: another tool's output (Google Benchmark JSON, nccl-tests
tables; read by core/tool_results.py) written as a meshgate results document, one sample list
per launch, for compare, baseline and history to judge."""

from __future__ import annotations

import argparse
import pathlib
import sys
from typing import Any

from ..core import results as _results
from ..core import tool_results


def _cmd_import(args: argparse.Namespace) -> int:
    try:
        doc = tool_results.read(args.format, [pathlib.Path(p) for p in args.files], args.suite, args.op)
    except tool_results.ToolResultsError as e:
        print(f"meshgate import: {e}", file=sys.stderr)
        return 2
    out = pathlib.Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    _results.write_results(out, doc)
    counts = _results.status_counts(doc["cases"])
    print(f"meshgate import: {len(doc['cases'])} case(s) from {len(args.files)} launch(es) "
          f"({', '.join(f'{n} {s}' for s, n in counts.items() if n)}) -> {out}")
    return _results.exit_code(doc["cases"])


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "import", help="turn Google Benchmark JSON or nccl-tests output into a results.json",
        description="Reads one output file per launch of a Google Benchmark binary (its JSON) or of an "
                    "nccl-tests binary (its printed table) and writes a meshgate results document with one "
                    "sample list per launch, which compare, history and baseline then judge like any run.")
    parser.add_argument("format", choices=tool_results.FORMATS, help="the tool that wrote the files")
    parser.add_argument("files", nargs="+", metavar="FILE", help="its output, one file per launch")
    parser.add_argument("--suite", required=True, help="the suite of the rows (ids are SUITE/NAME)")
    parser.add_argument("--op", help="nccl-tests: the collective, where the text does not name it")
    parser.add_argument("--out", required=True, metavar="RESULTS.json", help="where to write the results")
    parser.set_defaults(func=_cmd_import)
