"""Files and folders the driver writes: atomic writes of text and JSON, the report folder a
command claims under reports/, and where the driver works (the project of its own kinds the
working directory is in, its checkout, or for an installed driver, the working directory)."""

from __future__ import annotations

import datetime as _dt
import json
import os
import re
import tempfile
from pathlib import Path

PROJECT_FILE = "meshgate.toml"  # at the root of a project of its own kinds (system/project.py)


def is_checkout(path: Path) -> bool:
    """Whether `path` is the root of a meshgate source tree."""
    return (path / "CMakePresets.json").is_file() and (path / "harness" / "meshgate").is_dir()


def checkout_root() -> Path | None:
    """The meshgate source tree this driver runs from (this file is
    harness/meshgate/core/files.py in a checkout), else the one the working directory is in (a
    driver installed with pip, used inside a checkout), else None."""
    here = Path(__file__).resolve().parents[3]
    if is_checkout(here):
        return here
    cwd = Path.cwd().resolve()
    return next((p for p in (cwd, *cwd.parents) if is_checkout(p)), None)


def find_project(start: Path | None = None) -> Path | None:
    """The root of the project of its own kinds that `start` (default: the working directory)
    is in: the nearest folder, `start` or above it, that has meshgate.toml. None outside any
    project."""
    start = Path(start or Path.cwd()).resolve()
    return next((p for p in (start, *start.parents) if (p / PROJECT_FILE).is_file()), None)


def source_root() -> Path:
    """Where cases/ and reports/ are: the project of its own kinds the working directory is in
    (find_project), else the checkout (checkout_root), or for an installed driver used outside
    any checkout, the working directory."""
    return find_project() or checkout_root() or Path.cwd().resolve()


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


def default_report_dir(prefix: str) -> Path:
    """reports/<prefix>-<UTC time>, claimed: two commands in the same second get two folders."""
    stamp = _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%d-%H%M%S")
    return claim_run_dir(source_root() / "reports", f"{prefix}-{stamp}")[1]


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


def _umask() -> int:
    current = os.umask(0)
    os.umask(current)
    return current


def pinned(package: str, default: str) -> str:
    """The pin of `package` ("name==version") in pyproject.toml's dependencies, the one place
    pins are written; `default` for an installed driver without the file."""
    pyproject = Path(__file__).resolve().parents[3] / "pyproject.toml"
    text = pyproject.read_text(encoding="utf-8") if pyproject.is_file() else ""
    match = re.search(rf'"({re.escape(package)}==[^"]+)"', text)
    return match.group(1) if match else default
