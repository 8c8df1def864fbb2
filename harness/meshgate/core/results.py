"""The results contract (docs/results.md) and the documents that follow it: the runner's
results.jsonl stream (one row per finished case) and results.json, the one loader of a results
file and the checks of the contract it applies, the statuses and the contract's exit code, the
suite of a row and the machine class of a run.

Every module that reads a results document reads it through load_results; every module that
needs a status, the failing statuses, the schema id or a row's suite takes it from here."""

from __future__ import annotations

import datetime as _dt
import json
import math
import os
import re
from pathlib import Path
from typing import Any, Optional

from .. import __version__
from . import files, jsonfile, schema
from .markup import visible

STATUSES = ("pass", "fail", "error", "skip")
# The statuses of a case that did not pass: a wrong answer, or one the runner could not finish.
FAILING = ("fail", "error")
SCHEMA = "meshgate.results/1"


class InputError(Exception):
    """Unusable input; the message names the file and what is wrong (exit code 2)."""


def read_rows(path: Path) -> list[dict]:
    """Rows of a results.jsonl file, in file order; [] when it does not exist.

    A runner killed while writing leaves at most a truncated last line: it is dropped, since the
    row it started was never complete; any other line that is not JSON raises JsonFileError
    naming the file and line. JSON that is no row with a string id is skipped, as the runner's
    --resume skips it. Bytes that are not UTF-8 are replaced (U+FFFD), and only a newline ends
    a line: a message may hold U+2028 or U+0085, which str.splitlines would split a row at."""
    if not path.exists():
        return []
    rows = []
    lines = path.read_text(encoding="utf-8", errors="replace").split("\n")
    while lines and not lines[-1].strip():
        lines.pop()
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            row = jsonfile.parse(line, f"{path}:{number}", expect=None)
        except jsonfile.JsonFileError:
            if number == len(lines):
                break
            raise
        if isinstance(row, dict) and isinstance(row.get("id"), str):
            rows.append(row)
    return rows


def append_row(path: Path, row: dict) -> None:
    """Appends one row to results.jsonl. A torn last line left by a crashed writer is cut off
    first (its row never completed), so the file stays valid for the runner's --resume."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+b") as f:
        f.seek(0)
        content = f.read()
        if content and not content.endswith(b"\n"):
            f.truncate(content.rfind(b"\n") + 1)
        f.seek(0, os.SEEK_END)
        f.write(json.dumps(row).encode("utf-8") + b"\n")


def load_results(path: Path) -> dict[str, Any]:
    """The results document in `path`: InputError naming the file when it cannot be read or
    breaks the contract in a way the driver would trip over (check_results)."""
    path = Path(path)
    data = jsonfile.read(path, error=InputError)
    check_results(data, path)
    return data


def write_results(path: Path, document: dict) -> None:
    """Writes a results document (results_text) atomically (files.write_text_atomic), checked
    against the results schema when the environment asks for it."""
    schema.check_if_asked(document, "results-1", path)
    files.write_text_atomic(path, results_text(document))


def results_text(document: dict) -> str:
    """A results document as JSON with one top-level key per line and one case per line: as
    easy to read and diff as indented JSON, and written by the json module's C encoder (which
    indentation turns off), so tens of thousands of cases take a fraction of a second."""
    fields = []
    for key, value in document.items():
        if key == "cases" and isinstance(value, list) and value:
            text = "[\n  " + ",\n  ".join(json.dumps(row) for row in value) + "\n ]"
        else:
            text = json.dumps(value)
        fields.append(f" {json.dumps(key)}: {text}")
    return "{\n" + ",\n".join(fields) + "\n}\n"


def error_row(case_id: str, message: str, *, kind: str = "", params: dict | None = None,
              tags: list | None = None, seconds: float = 0.0, entry: dict | None = None) -> dict:
    """A result row with status `error` for a case the runner could not finish itself; `entry`
    (the case as `meshgate-runner list` described it) gives its kind, tags, file and line."""
    suite, _, name = case_id.partition("/")
    entry = entry or {}
    row = {
        "id": case_id,
        "suite": suite,
        "name": name,
        "kind": kind or str(entry.get("kind", "")),
        "tags": list(tags or entry.get("tags") or []),
    }
    if entry.get("file") and isinstance(entry.get("line"), int):
        row.update(file=str(entry["file"]), line=entry["line"])
    return row | {
        "status": "error",
        "message": message,
        "params": params if params is not None else {},
        "plan": [],
        "metrics": {},
        "samples": {},
        "seconds": seconds,
    }


def where(row: dict) -> str:
    """"cases/mesh/slice.yaml:12", where the row's case is written; "" when unknown."""
    file, line = row.get("file"), row.get("line")
    return f"{file}:{line}" if file and isinstance(line, int) else (file or "")


def assemble(results: dict | None, rows: list[dict], plan_ids: list[str],
             run_header: dict) -> dict:
    """The complete results document of a run that may have been relaunched.

    The runner's results.json (from its last launch) is the authority for the rows it holds;
    rows only in results.jsonl (cases of crashed launches, error rows the driver appended) are
    added from there. Cases come in plan order, then any the plan did not name."""
    by_id = {row["id"]: row for row in rows}
    if results is not None:
        for row in results.get("cases", []):
            if isinstance(row, dict) and "id" in row:
                by_id[row["id"]] = row
    ordered = [by_id.pop(case_id) for case_id in plan_ids if case_id in by_id]
    ordered.extend(by_id.values())
    document = {"schema": SCHEMA, "run": dict(run_header)}
    if results is not None:
        document.update({k: v for k, v in results.items() if k != "cases"})
    document["run"] = complete_run(document.get("run"))
    document["cases"] = ordered
    return document


def complete_run(run: dict | None) -> dict:
    """`run` with every key the results CONTRACT requires. The runner writes them all; a run
    whose runner died before writing results.json (or a document merged from such runs) gets
    what the driver knows itself (its start time, its version), and "unknown" or null where
    only the runner could tell."""
    run = dict(run or {})
    run.setdefault("id", "unknown")
    run.setdefault("started", _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"))
    run.setdefault("commit", "unknown")
    run.setdefault("dirty", False)
    run.setdefault("backend", "threads")
    run.setdefault("world_size", 1)
    machine = dict(run.get("machine") or {})
    machine.setdefault("host", "unknown")
    machine.setdefault("cpu", "unknown")
    machine.setdefault("gpus", [])
    machine.setdefault("fingerprint", "unknown")
    run["machine"] = machine
    versions = dict(run.get("versions") or {})
    versions.setdefault("meshgate", __version__)
    for library in ("cuda", "nccl", "mpi"):
        versions.setdefault(library, None)
    run["versions"] = versions
    return run


def status_counts(cases: list[dict]) -> dict[str, int]:
    """Cases per status; a row without a status, or with one the contract does not know,
    counts as an error."""
    counts = dict.fromkeys(STATUSES, 0)
    for row in cases:
        status = row.get("status", "error")
        counts[status if status in counts else "error"] += 1
    return counts


def exit_code(cases: list[dict]) -> int:
    """The results CONTRACT exit code: 0 all pass/skip, 1 any fail, 2 any error."""
    counts = status_counts(cases)
    if counts["error"]:
        return 2
    if counts["fail"]:
        return 1
    return 0


def suite_of(row_or_id: Any) -> str:
    """The suite of a result row (its `suite`, else the part of its id before the first '/'),
    or of a case id."""
    if isinstance(row_or_id, dict):
        suite = row_or_id.get("suite")
        if isinstance(suite, str) and suite:
            return suite
        row_or_id = row_or_id.get("id", "")
    return str(row_or_id).split("/", 1)[0]


# ---------------------------------------------------------------------------------------------
# The contract's checks


# The types of the keys the gate, the history and the reports read, wherever a document has
# them (the results CONTRACT's types; float stands for any number).
_RUN_TYPES = {"id": str, "started": str, "commit": str, "backend": str, "machine": dict,
              "versions": dict}
_MACHINE_TYPES = {"gpus": list}
_ROW_TYPES = {"suite": str, "name": str, "kind": str, "tags": list, "message": str,
              "params": dict, "plan": list, "metrics": dict, "samples": dict, "seconds": float,
              "file": str, "line": int}


def check_results(data: dict[str, Any], source: Any) -> None:
    """Raises InputError, naming `source` and the case or key, where a results document breaks
    the CONTRACT in a way the driver would otherwise trip over: another schema, 'cases' not a
    list of rows with distinct string ids, a key of the wrong type (a string for 'metrics', a
    number for 'message', ...), a status that is not pass, fail, error or skip, or a sample
    that is not a finite number (samples are measured times: a string, null, NaN or infinity
    there is damage, not a measurement)."""
    found = data.get("schema")
    if found != SCHEMA:
        raise InputError(
            f"{source}: schema is {found!r}, expected {SCHEMA!r}: "
            "pass a results.json written by meshgate-runner or meshgate run"
        )
    run = data.get("run", {})
    if not isinstance(run, dict):
        raise InputError(f"{source}: 'run' must be an object")
    _check_types(run, _RUN_TYPES, source, "run.")
    _check_types(run.get("machine", {}), _MACHINE_TYPES, source, "run.machine.")
    cases = data.get("cases")
    if not isinstance(cases, list):
        raise InputError(f"{source}: 'cases' must be a list of result rows")
    index_of: dict[str, int] = {}
    for i, row in enumerate(cases):
        if not isinstance(row, dict) or not isinstance(row.get("id"), str):
            raise InputError(f"{source}: cases[{i}] has no string 'id'")
        at = f"cases[{i}] ({visible(row['id'])})"
        if row["id"] in index_of:
            raise InputError(f"{source}: {at}: the same id as cases[{index_of[row['id']]}]")
        index_of[row["id"]] = i
        _check_types(row, _ROW_TYPES, source, f"{at}: ")
        if "status" in row and row["status"] not in STATUSES:
            raise InputError(f"{source}: {at}: status {shown(row['status'])} is not one of "
                             f"{', '.join(STATUSES)}")
        for metric, runs in row.get("samples", {}).items():
            _check_samples(runs, source, f"{at}: samples.{visible(metric)}")


def _has_type(value: Any, kind: type) -> bool:
    if isinstance(value, bool):  # JSON's true and false are no numbers
        return False
    return isinstance(value, (int, float)) if kind is float else isinstance(value, kind)


def _check_types(obj: dict[str, Any], types: dict[str, type], source: Any, prefix: str) -> None:
    for key, kind in types.items():
        if key in obj and not _has_type(obj[key], kind):
            raise InputError(f"{source}: {prefix}{key} is {jsonfile.json_name(obj[key])}, "
                             f"expected {jsonfile.type_name(kind)}")


def finite(value: object) -> Optional[float]:
    """`value` as a float when it is a finite number, else None. A JSON file can hold what is
    no measurement: true and false (ints to Python), NaN, the infinities and integers too large
    for a float."""
    if type(value) not in (int, float):
        return None
    try:
        number = float(value)
    except OverflowError:
        return None
    return number if math.isfinite(number) else None


def _check_samples(runs: Any, source: Any, at: str) -> None:
    """One list per run (or one flat list: a single run) of finite numbers."""
    if not isinstance(runs, list):
        raise InputError(f"{source}: {at} is {jsonfile.json_name(runs)}, expected a list of "
                         "runs' samples")
    for r, values in enumerate(runs):
        for j, value in enumerate(values if isinstance(values, list) else [values]):
            if finite(value) is None:
                index = f"[{r}][{j}]" if isinstance(values, list) else f"[{r}]"
                raise InputError(f"{source}: {at}{index} is {shown(value)}, not a finite number")


def shown(value: Any) -> str:
    """A JSON value as a message shows it: visible, at most 40 characters."""
    text = visible(json.dumps(value))
    return text if len(text) <= 40 else text[:37] + "..."


# ---------------------------------------------------------------------------------------------
# Machine classes


def machine_class(machine: Optional[dict[str, Any]]) -> str:
    """Stable slug for a `run.machine` object: cpu model, cores, gpu count x model.

    It names the hardware that sets performance, e.g.
    `amd-epyc-7763-64-core-16c-8x-nvidia-h100-80gb-hbm3`. Host names and fingerprints are left
    out on purpose so that identical runners share one class."""
    machine = machine if isinstance(machine, dict) else {}
    parts = []
    cpu = machine.get("cpu")
    if isinstance(cpu, dict):
        cpu = cpu.get("model") or cpu.get("name")
    if cpu:
        parts.append(_slug(str(cpu)))
    cores = machine.get("cores") or machine.get("cpus") or machine.get("logical_cpus")
    if isinstance(cores, int) and cores > 0:
        parts.append(f"{cores}c")
    gpus = machine.get("gpus") if isinstance(machine.get("gpus"), list) else []
    if gpus:
        names = []
        for g in gpus:
            names.append(str(g.get("name") or g.get("model") or "gpu") if isinstance(g, dict) else str(g))
        models = sorted(set(names))
        parts.append(f"{len(gpus)}x-" + "-".join(_slug(m) for m in models))
    slug = "-".join(p for p in parts if p)[:120].strip("-")
    return slug or "unknown"


def results_machine_class(results: dict[str, Any]) -> str:
    run = results.get("run")
    return machine_class(run.get("machine") if isinstance(run, dict) else None)


def _slug(text: str) -> str:
    text = text.lower()
    text = re.sub(r"\((r|tm|c)\)", " ", text)
    text = re.sub(r"\b(cpu|processor)\b", " ", text)
    text = re.sub(r"@.*$", " ", text)
    return re.sub(r"[^a-z0-9]+", "-", text).strip("-")
