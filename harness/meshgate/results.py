"""Run results on disk: the runner's results.jsonl stream (one row per finished case) and
results.json (the results contract of docs/results.md), plus the contract's exit code."""

from __future__ import annotations

import datetime as _dt
import json
import os
import tempfile
from pathlib import Path

from . import __version__, jsonfile, schema

STATUSES = ("pass", "fail", "error", "skip")
SCHEMA = "meshgate.results/1"


def claim_run_dir(parent: Path, run_id: str) -> tuple[str, Path]:
    """A folder of its own for a run or report: parent/<run-id>, or <run-id>-2, -3, ... when
    another one started in the same second. mkdir without exist_ok is the atomic claim, so two
    never share (and overwrite) one folder."""
    parent.mkdir(parents=True, exist_ok=True)
    for n in range(1, 10000):
        candidate = run_id if n == 1 else f"{run_id}-{n}"
        try:
            (parent / candidate).mkdir()
        except FileExistsError:
            continue
        return candidate, parent / candidate
    raise RuntimeError(f"no free run folder for {run_id} under {parent}")


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


def load_json(path: Path) -> dict | None:
    """The JSON object in `path`, or None when there is none to read: the file is missing, or
    was left incomplete or damaged (jsonfile.read says how, which callers with a fallback do
    not need)."""
    try:
        return jsonfile.read(path)
    except jsonfile.JsonFileError:
        return None


def load_results(path: Path) -> dict | None:
    """A results.json (load_json), checked against the results schema when the environment asks
    for it (schema.check_if_asked)."""
    data = load_json(path)
    if data is not None:
        schema.check_if_asked(data, "results-1", path)
    return data


def write_results(path: Path, document: dict) -> None:
    """Writes a results document (results_text) atomically (write_text_atomic), checked
    against the results schema when the environment asks for it."""
    schema.check_if_asked(document, "results-1", path)
    write_text_atomic(path, results_text(document))


def write_text_atomic(path: Path, text: str) -> None:
    """Writes `text` to `path` through a temporary file in the same folder, fsync and a rename,
    so a reader sees the old file or the new one, never half of one. The file gets the mode a
    plain open() would give it (0666 less the umask: 0644 usually), not mkstemp's 0600, so
    results and baselines stay readable by the CI user that collects them."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_json_atomic(path: Path, data) -> None:
    """`data` as indented JSON, written atomically (write_text_atomic)."""
    write_text_atomic(path, json.dumps(data, indent=1) + "\n")


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


def _umask() -> int:
    current = os.umask(0)
    os.umask(current)
    return current


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
