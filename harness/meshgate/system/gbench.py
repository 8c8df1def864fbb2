"""Google Benchmark binaries as the cases of `meshgate ab` and `meshgate bisect`
(`--google-benchmark TARGET`): each revision builds its own CMake TARGET (revisions.py, that
target only), and `BenchmarkLauncher` stands where repeats.DriverLauncher stands for the
runner, with the same two calls:

- `list_cases(side, selection)`: the binary's `--benchmark_list_tests`, one case per benchmark,
  id `<TARGET>/<name>` (the name as core/tool_results.py spells it), selected by the CASES
  patterns and `--case` (fnmatch, against the benchmark's name or its id) and `--suite`
  (TARGET). Benchmarks carry no tags: `--tag` selects none of them. Every case is timed.
- `__call__(side, n, case_ids, folder)`: one launch of the binary (the unit of replication,
  docs/gate.md) with `--benchmark_filter` matching exactly those benchmarks,
  `--benchmark_repetitions=R` and `--benchmark_out=<folder>/benchmark.json` in JSON; the R
  repetitions are that launch's samples (tool_results.google_benchmark, real or CPU time).
  A binary that crashes, times out or leaves no JSON gives `error` rows naming why.
"""

from __future__ import annotations

import fnmatch
import json
import os
import pathlib
import shutil
import subprocess
from typing import Any, Optional

from ..core import results as _results
from ..core import tool_results
from .launch import Selection

DEFAULT_REPETITIONS = 5  # samples per launch
OUTPUT = "benchmark.json"  # a launch's JSON, in its folder
_ERE_SPECIAL = set(".^$*+?()[]{}|\\")


def ere_escape(text: str) -> str:
    """`text` as a literal in the regular expression of --benchmark_filter (POSIX extended or
    std::regex, depending on how Google Benchmark was built: both read backslash escapes of
    these characters alike)."""
    return "".join("\\" + c if c in _ERE_SPECIAL else c for c in text)


def filter_for(names: list[str]) -> str:
    """A --benchmark_filter that matches exactly `names`."""
    return "^(" + "|".join(ere_escape(n) for n in names) + ")$"


def _cpu_model() -> str:
    try:
        for line in pathlib.Path("/proc/cpuinfo").read_text(errors="replace").splitlines():
            key, _, value = line.partition(":")
            if key.strip() in ("model name", "Model") and value.strip():
                return value.strip()
    except OSError:
        pass
    return "unknown"


def cpu_numbers(text: Optional[str]) -> Optional[list[int]]:
    """The CPUs of a taskset-style list (0-3,6), for the run header; None when not pinned."""
    if not text:
        return None
    numbers: list[int] = []
    for item in text.split(","):
        low, _, high = item.partition("-")
        numbers += list(range(int(low), int(high or low) + 1))
    return sorted(set(numbers))


def _tail(text: str, lines: int = 5) -> str:
    return " | ".join(line.strip() for line in text.strip().splitlines()[-lines:] if line.strip())


class BenchmarkLauncher:
    """Launches a side's Google Benchmark binary (Side.runner, built by revisions.build_commit
    with target=TARGET): one results document per launch, `repetitions` samples per case, from
    `clock` ("real" or "cpu", tool_results.CLOCKS). `min_time` (seconds) is passed as
    --benchmark_min_time when given; `cpus` pins each launch with taskset; `timeout` (seconds,
    None or 0: none) ends a launch that runs longer, its cases then `error` rows."""

    def __init__(self, target: str, clock: str = "real", repetitions: int = DEFAULT_REPETITIONS,
                 min_time: Optional[float] = None, cpus: Optional[str] = None,
                 timeout: Optional[float] = None, run_prefix: str = "ab", stamp: str = ""):
        if clock not in tool_results.CLOCKS:
            raise ValueError(f"clock {clock!r}: one of {', '.join(tool_results.CLOCKS)}")
        self.target, self.clock, self.repetitions, self.min_time = target, clock, repetitions, min_time
        self.cpus, self.timeout = cpus, timeout or None
        self.run_prefix = f"{run_prefix}-{stamp}" if stamp else run_prefix
        self.names: dict[str, str] = {}  # case id -> the benchmark's own name

    def command(self, side: Any, *args: str) -> list[str]:
        pin = ["taskset", "-c", self.cpus] if self.cpus else []
        if pin and shutil.which("taskset") is None:
            raise tool_results.ToolResultsError("--cpus needs taskset (util-linux), which is not on PATH")
        return [*pin, *side.runner, *args]

    def case_id(self, name: str) -> str:
        return f"{self.target}/{tool_results.case_name(name)}"

    def list_cases(self, side: Any, selection: Selection) -> list[dict]:
        """The selected benchmarks of `side`'s binary as listing entries (id, suite, name, perf)."""
        try:
            proc = subprocess.run(self.command(side, "--benchmark_list_tests=true"), capture_output=True,
                                  text=True, errors="replace", env=side.env, timeout=self.timeout or 300)
        except (OSError, subprocess.TimeoutExpired) as e:
            raise tool_results.ToolResultsError(f"{side.runner[0]} --benchmark_list_tests: {e}") from None
        if proc.returncode != 0:
            raise tool_results.ToolResultsError(f"{side.runner[0]} --benchmark_list_tests exited with code "
                                                f"{proc.returncode}: {_tail(proc.stderr or proc.stdout)}")
        patterns = list(selection.cases)
        entries = []
        for name in (line.strip() for line in proc.stdout.splitlines()):
            if not name:
                continue
            case_id = self.case_id(name)
            if selection.suites and self.target not in selection.suites:
                continue
            if selection.tags:
                continue  # a benchmark has no tags
            if patterns and not any(fnmatch.fnmatchcase(name, p) or fnmatch.fnmatchcase(case_id, p)
                                    for p in patterns):
                continue
            self.names[case_id] = name
            entries.append({"id": case_id, "suite": self.target, "name": case_id.partition("/")[2],
                            "kind": "benchmark", "tags": [], "perf": {"runs": 1}})
        return entries

    def arguments(self, names: list[str], folder: pathlib.Path) -> list[str]:
        args = [f"--benchmark_filter={filter_for(names)}", "--benchmark_format=json",
                f"--benchmark_out={folder / OUTPUT}", "--benchmark_out_format=json",
                f"--benchmark_repetitions={self.repetitions}"]
        if self.min_time:
            args.append(f"--benchmark_min_time={self.min_time:g}")
        return args

    def __call__(self, side: Any, n: int, case_ids: list, folder: pathlib.Path) -> dict:
        folder = pathlib.Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        (folder / OUTPUT).unlink(missing_ok=True)
        run_id = f"{self.run_prefix}-{side.label}-{n}"
        names = [self.names.get(i, i.partition("/")[2]) for i in case_ids]
        command = self.command(side, *self.arguments(names, folder))
        failure = ""
        try:
            with open(folder / "stdout.txt", "w") as out, open(folder / "stderr.txt", "w") as err:
                proc = subprocess.run(command, stdout=out, stderr=err, env=side.env, timeout=self.timeout)
            if proc.returncode != 0:
                failure = f"{self.target} exited with code {proc.returncode}"
        except subprocess.TimeoutExpired:
            failure = f"{self.target} ran past the {self.timeout:g} s limit and was stopped"
        except OSError as e:
            failure = f"{self.target} could not start: {e}"
        if failure:
            stderr = (folder / "stderr.txt").read_text(errors="replace") if (folder / "stderr.txt").exists() else ""
            failure += f" ({_tail(stderr)})" if stderr.strip() else ""
        rows: dict[str, dict] = {}
        facts: dict = {}
        try:
            doc = json.loads((folder / OUTPUT).read_text(errors="replace"))
            found, facts = tool_results.google_benchmark(doc, self.target, str(folder / OUTPUT), self.clock)
            rows = {row["id"]: row for row in found}
        except (OSError, ValueError, tool_results.ToolResultsError) as e:
            failure = failure or f"{self.target} left no readable {OUTPUT}: {e}"
        cases = []
        for case_id in case_ids:
            row = rows.get(case_id)
            if row is None:
                row = _results.error_row(case_id, failure or f"{self.target} reported no result for this benchmark",
                                         kind="benchmark")
            cases.append(row)
        cpus = [int(c) for c in os.sched_getaffinity(0)] if hasattr(os, "sched_getaffinity") else []
        machine = {"host": facts.get("host") or os.uname().nodename, "cpu": _cpu_model(), "gpus": [],
                   "fingerprint": "unknown"}
        if cpus:
            machine["cores"] = len(cpus)
        run = _results.complete_run({"id": run_id, "commit": side.commit or "unknown", "machine": machine,
                                     "cpus": cpu_numbers(self.cpus),
                                     "load_average": list(facts["load_avg"]) if isinstance(facts.get("load_avg"), list)
                                     and len(facts["load_avg"]) == 3 else None,
                                     "benchmark": {"target": self.target, "clock": self.clock,
                                                   "repetitions": self.repetitions, "min_time": self.min_time,
                                                   "command": command}})
        return {"schema": _results.SCHEMA, "run": run, "cases": cases}
