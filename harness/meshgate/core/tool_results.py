"""Other tools' results as meshgate results documents, so that a team's existing benchmark runs go
through the same gate, history and bisection as meshgate's own cases.

- Google Benchmark: the JSON of `--benchmark_format=json` or `--benchmark_out=F`. One row per
  benchmark (its `run_name`); each repetition's `real_time` (per iteration, converted to
  seconds) is one timed sample of that launch, or its `cpu_time` with clock="cpu" (CLOCKS):
  the process's CPU time leaves out the time it waited for a CPU, which on a machine shared
  with other work is noise, not the code's cost (for single-threaded benchmarks). Aggregates (mean, median, stddev) are dropped:
  the gate computes its own from the samples. A benchmark that reports `error_occurred` is an
  `error` row, a skipped one a `skip` row; user counters become metrics.
- nccl-tests: the text table its `*_perf` binaries print (size, count, type, redop, root, then
  time, algbw, busbw and #wrong out of place and in place). One row per size and placement, a
  `collective` row as meshgate's own collective kind writes it (metrics.sizes, algbw, busbw,
  wrong elements), so reports show the same per-size table; a wrong element makes it `fail`.

One file is one process launch; several files of the same benchmark become one row per case
with one sample list per launch, the unit of replication the gate needs
(`meshgate import google-benchmark run1.json run2.json ...`, commands/import_results.py). Rows
carry no file or line: they come from another program.
"""

from __future__ import annotations

import json
import pathlib
import re
from typing import Any, Iterable, Optional

from . import results as _results
from .merge import merge_case

FORMATS = ("google-benchmark", "nccl-tests")
CLOCKS = ("real", "cpu")  # Google Benchmark's real_time (wall clock) or cpu_time as the samples
_TIME_UNITS = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0}


class ToolResultsError(Exception):
    """A file that is not the tool's output: names the file and what is wrong."""


def _row(suite: str, name: str, kind: str, status: str = "pass", message: str = "") -> dict[str, Any]:
    return {"id": f"{suite}/{name}", "suite": suite, "name": name, "kind": kind, "impl": "external",
            "tags": [], "status": status, "message": message, "params": {}, "plan": [], "metrics": {},
            "samples": {}}


def case_name(text: str) -> str:
    """A case name from a tool's benchmark name: the characters meshgate ids allow."""
    return re.sub(r"[^A-Za-z0-9_.:+=,-]+", "-", text).strip("-") or "unnamed"


_case_name = case_name


# --- Google Benchmark -------------------------------------------------------------------------


def google_benchmark(doc: Any, suite: str, source: str = "", clock: str = "real") -> tuple[list[dict], dict]:
    """(rows, run header facts) from one Google Benchmark JSON document; `clock` (CLOCKS) says
    which time is the sample."""
    if clock not in CLOCKS:
        raise ValueError(f"clock {clock!r}: one of {', '.join(CLOCKS)}")
    field = f"{clock}_time"
    if not isinstance(doc, dict) or not isinstance(doc.get("benchmarks"), list):
        raise ToolResultsError(f"{source}: not Google Benchmark JSON: no \"benchmarks\" list "
                               f"(write it with --benchmark_format=json or --benchmark_out=FILE)")
    rows: dict[str, dict] = {}
    for i, bench in enumerate(doc["benchmarks"]):
        if not isinstance(bench, dict) or not isinstance(bench.get("name"), str):
            raise ToolResultsError(f"{source}: benchmarks[{i}] has no name")
        if bench.get("run_type") == "aggregate":
            continue
        name = _case_name(bench.get("run_name") or bench["name"])
        row = rows.setdefault(name, _row(suite, name, "benchmark"))
        row["samples"].setdefault("time_s", [[]])
        if bench.get("error_occurred"):
            row["status"], row["message"] = "error", str(bench.get("error_message") or "error_occurred")
            continue
        if bench.get("skipped") or bench.get("skip_message"):
            row["status"], row["message"] = "skip", str(bench.get("skip_message") or "skipped")
            continue
        unit = bench.get("time_unit", "ns")
        if unit not in _TIME_UNITS or not isinstance(bench.get(field), (int, float)):
            raise ToolResultsError(f"{source}: benchmarks[{i}] ({bench['name']}): no {field} in a known "
                                   f"time_unit (got {unit!r})")
        row["samples"]["time_s"][0].append(bench[field] * _TIME_UNITS[unit])
        metrics = row["metrics"]
        metrics["iterations"] = bench.get("iterations")
        if isinstance(bench.get("cpu_time"), (int, float)):
            metrics.setdefault("cpu_time_s", []).append(bench["cpu_time"] * _TIME_UNITS[unit])
        for key, value in bench.items():
            if key not in _GBENCH_FIELDS and isinstance(value, (int, float)) and not isinstance(value, bool):
                metrics[key] = value  # a user counter (items_per_second, bytes_per_second, ...)
    context = doc.get("context") if isinstance(doc.get("context"), dict) else {}
    facts = {"host": context.get("host_name"), "date": context.get("date"),
             "load_avg": context.get("load_avg"), "executable": context.get("executable")}
    return list(rows.values()), facts


_GBENCH_FIELDS = {"family_index", "per_family_instance_index", "repetitions", "repetition_index", "threads",
                  "iterations", "real_time", "cpu_time", "error_occurred", "skipped"}


# --- nccl-tests -------------------------------------------------------------------------------

_TEST_NAME = re.compile(r"Collective test starting:\s*(\S+?)(?:_perf)?\s*$")
_FAILED = re.compile(r"#\s*Out of bounds values\s*:\s*(\d+)\s*(\S*)")


def _number(text: str) -> Optional[float]:
    try:
        return float(text)
    except ValueError:
        return None  # N/A: the tool did not check (-c 0) or did not measure


def nccl_tests(text: str, suite: str, source: str = "", op: Optional[str] = None) -> tuple[list[dict], dict]:
    """(rows, run header facts) from the text an nccl-tests binary printed. `op` names the
    collective when the text does not ("Collective test starting: all_reduce_perf")."""
    rows: list[dict] = []
    header = {}
    for line_no, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        if not stripped:
            continue
        if stripped.startswith("#"):
            found = _TEST_NAME.search(stripped)
            if found and op is None:
                op = found.group(1)
            if stripped.startswith("# nThread"):
                header["config"] = stripped.lstrip("# ").strip()
            failed = _FAILED.search(stripped)
            if failed and int(failed.group(1)) > 0:
                header["out_of_bounds"] = int(failed.group(1))
            continue
        cells = stripped.split()
        if not cells[0].isdigit():
            continue  # a warning or a line of NCCL's own logging between the rows
        # With a root column (nccl-tests 2.10 and later): size count type redop root, then 4 per placement.
        if len(cells) in (13, 9):
            size, count, dtype, redop, root, measured = cells[0], cells[1], cells[2], cells[3], cells[4], cells[5:]
        elif len(cells) in (12, 8):
            size, count, dtype, redop, root, measured = cells[0], cells[1], cells[2], cells[3], None, cells[4:]
        else:
            raise ToolResultsError(f"{source}:{line_no}: a table row of {len(cells)} columns; nccl-tests "
                                   f"prints 12 or 13 (8 or 9 without in-place): {stripped}")
        for placement, offset in (("out", 0), ("in", 4)):
            if offset + 4 > len(measured):
                continue
            time_us, algbw, busbw, wrong = (_number(c) for c in measured[offset:offset + 4])
            if time_us is None:
                continue
            name = _case_name(f"{op or 'collective'}-{dtype}-{redop}-{size}B-{placement}-of-place")
            row = _row(suite, name, "collective")
            row["params"] = {"op": op, "dtype": dtype, "reduce": None if redop == "none" else redop,
                             "bytes": int(size), "inplace": placement == "in", "source": "nccl-tests"}
            if root is not None and root != "-1":
                row["params"]["root"] = int(root)
            entry = {"bytes": int(size), "count": int(count), "inplace": placement == "in", "time_s": time_us * 1e-6,
                     "algbw_GBps": algbw, "busbw_GBps": busbw, "wrong": None if wrong is None else int(wrong)}
            row["metrics"] = {"bytes": int(size), "algbw_GBps": algbw, "busbw_GBps": busbw,
                              "wrong": entry["wrong"], "sizes": [entry]}
            row["samples"] = {"time_s": [[time_us * 1e-6]]}
            if wrong:
                row["status"], row["message"] = "fail", f"{int(wrong)} wrong element(s) (nccl-tests #wrong)"
            rows.append(row)
    if not rows:
        raise ToolResultsError(f"{source}: no nccl-tests table row (size count type redop ...) found")
    if header.get("out_of_bounds"):
        for row in rows:
            if row["status"] == "pass":
                row["status"] = "fail"
                row["message"] = f"nccl-tests reports {header['out_of_bounds']} out-of-bounds value(s)"
    return rows, header


# --- Launches into one document ---------------------------------------------------------------


def read(fmt: str, paths: Iterable[pathlib.Path], suite: str, op: Optional[str] = None) -> dict[str, Any]:
    """One results document from the tool's output files, one file per launch."""
    launches: list[list[dict]] = []
    facts: list[dict] = []
    for path in paths:
        path = pathlib.Path(path)
        try:
            text = path.read_text()
        except OSError as e:
            raise ToolResultsError(f"{path}: {e.strerror}") from None
        if fmt == "google-benchmark":
            try:
                doc = json.loads(text)
            except json.JSONDecodeError as e:
                raise ToolResultsError(f"{path}:{e.lineno}:{e.colno}: not JSON: {e.msg}") from None
            rows, fact = google_benchmark(doc, suite, str(path))
        else:
            rows, fact = nccl_tests(text, suite, str(path), op)
        launches.append(rows)
        facts.append(fact)
    ids: list[str] = []
    by_launch = []
    for rows in launches:
        by_id = {row["id"]: row for row in rows}
        ids += [i for i in by_id if i not in ids]
        by_launch.append(by_id)
    k = len(launches)
    cases = []
    for case_id in ids:
        rows = [launch.get(case_id) for launch in by_launch]
        first = rows[0] or _results.error_row(case_id, f"launch 1 of {k}: no result for this benchmark")
        cases.append(merge_case(first, {n: row for n, row in enumerate(rows[1:], 2)}, k))
    host = next((f.get("host") for f in facts if f.get("host")), None)
    run = _results.complete_run({"id": f"import-{fmt}", "machine": {"host": host or "unknown"}, "runs": k,
                                 "imported": {"format": fmt, "files": [str(p) for p in paths]}})
    return {"schema": _results.SCHEMA, "run": run, "cases": cases}
