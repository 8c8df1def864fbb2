"""The baseline store: what a results document is compared with, kept under baselines/.

- Timing baselines, per machine class (core.results.machine_class):
  `baselines/<machine-class>/<suite>.json`, the accepted results of each suite on that class.
  `meshgate baseline update RESULTS.json` splits the results by suite and writes each suite's
  file atomically (temporary file + rename); the file it replaces is kept under
  `baselines/<machine-class>/history/<suite>.<UTC timestamp>.json`.
- Committed signals: `baselines/signals/<suite>.json` = {"schema": "meshgate.signals/1",
  "suite": S, "cases": {id: signals}}, the deterministic signals of every case (signals.py).
  They hold no timing, so any machine can be checked against them. `--signals-only` writes
  these alone.
- Calibrations: `baselines/<machine-class>/calibration.json`, the noise floors and the rest that
  `meshgate calibrate` measured on that class, which `compare`, `run --baseline` and `ab` use.
`--machine-class` overrides the derived class wherever a command derives it.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import json
import pathlib
import shutil
from typing import Any, Iterable, Optional

from ..core import files, jsonfile
from ..core import results as _results
from ..core.markup import visible
from ..core.results import InputError, suite_of, finite, load_results, results_machine_class, shown
from . import signals as _signals

CALIBRATION_SCHEMA = "meshgate.calibration/1"
CALIBRATION_FILE = "calibration.json"
SIGNALS_SCHEMA = "meshgate.signals/1"
SIGNALS_DIR_NAME = "signals"


def default_baselines() -> pathlib.Path:
    """baselines/ where the driver works: in its checkout, or for an installed driver used
    outside any checkout, in the working directory (files.source_root)."""
    return files.source_root() / "baselines"


def default_signals() -> pathlib.Path:
    return default_baselines() / SIGNALS_DIR_NAME


def split_by_suite(results: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """One results document per suite, each with the original schema and run block."""
    out: dict[str, dict[str, Any]] = {}
    for row in results.get("cases", []):
        suite = suite_of(row)
        doc = out.setdefault(
            suite, {"schema": results.get("schema"), "run": _results.complete_run(results.get("run")),
                    "cases": []}
        )
        doc["cases"].append(row)
    return out


def _timestamp() -> str:
    return _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%dT%H%M%S%fZ")


def update_baseline(
    results_path: pathlib.Path,
    baselines_root: Optional[pathlib.Path] = None,
    machine_class_override: Optional[str] = None,
    force: bool = False,
    suites: Optional[list[str]] = None,
) -> list[pathlib.Path]:
    """Accepts a results file as the baseline of its suites; returns the files written.

    Refuses (InputError) when an existing baseline has another schema or was recorded on
    another machine class, unless forced; the replaced file goes to history/.
    """
    results = load_results(results_path)
    derived = results_machine_class(results)
    mclass = machine_class_override or derived
    if machine_class_override and machine_class_override != derived and not force:
        raise InputError(
            f"{results_path}: results were recorded on machine class {derived!r}, not "
            f"{machine_class_override!r}: pass --force to file them under {machine_class_override!r} anyway"
        )
    target_dir = pathlib.Path(baselines_root or default_baselines()) / mclass
    per_suite = split_by_suite(results)
    if suites:
        unknown = sorted(set(suites) - set(per_suite))
        if unknown:
            raise InputError(
                f"{results_path}: no cases of suite(s) {', '.join(unknown)}; "
                f"the file has {', '.join(sorted(per_suite)) or 'no cases'}"
            )
        per_suite = {s: d for s, d in per_suite.items() if s in suites}
    if not per_suite:
        raise InputError(f"{results_path}: no cases to accept")
    # Check every suite before writing any, so a refusal leaves the baselines untouched.
    for suite in per_suite:
        existing = target_dir / f"{suite}.json"
        if not existing.exists() or force:
            continue
        old = jsonfile.read(existing, error=InputError,
                            hint="the existing baseline is unusable: pass --force to replace it")
        if old.get("schema") != results.get("schema"):
            raise InputError(
                f"{existing}: baseline schema {old.get('schema')!r} differs from the results' "
                f"{results.get('schema')!r}: pass --force to replace it"
            )
        old_class = results_machine_class(old)
        if old_class != derived:
            raise InputError(
                f"{existing}: baseline was recorded on machine class {old_class!r}, the results "
                f"on {derived!r}: pass --force to replace it"
            )
    written = []
    stamp = _timestamp()
    for suite, doc in sorted(per_suite.items()):
        path = target_dir / f"{suite}.json"
        if path.exists():
            history = target_dir / "history"
            history.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, history / f"{suite}.{stamp}.json")
        _results.write_results(path, doc)
        written.append(path)
    return written


def load_baseline_dir(baseline_dir: pathlib.Path, suites: list[str]) -> tuple[dict[str, Any], list[str]]:
    """Merges the baseline files of `suites` found in baseline_dir; returns it and the suites lacking one."""
    baseline_dir = pathlib.Path(baseline_dir)
    merged: dict[str, Any] = {"schema": _results.SCHEMA, "run": {}, "cases": []}
    lacking = []
    for suite in suites:
        path = baseline_dir / f"{suite}.json"
        if not path.exists():
            lacking.append(suite)
            continue
        doc = load_results(path)
        if not merged["run"]:
            merged["run"] = doc.get("run", {})
        merged["cases"].extend(doc["cases"])
    return merged, lacking


_RECALIBRATE = "remove it and run `meshgate calibrate` again"


def read_calibration(path: pathlib.Path) -> dict[str, Any]:
    """The calibration document in `path`: InputError, with the remedy, when it is not one."""
    data = jsonfile.read(path, error=InputError, hint=_RECALIBRATE)
    if data.get("schema") != CALIBRATION_SCHEMA or not isinstance(data.get("cases"), dict):
        raise InputError(f"{path}: not a {CALIBRATION_SCHEMA} file: {_RECALIBRATE}")
    return data


def load_calibration(path: pathlib.Path) -> dict[str, float]:
    """Noise floor per case id from a calibration.json (empty when the file does not exist)."""
    path = pathlib.Path(path)
    if not path.exists():
        return {}
    floors = {}
    for case_id, entry in read_calibration(path)["cases"].items():
        value = entry.get("noise_floor") if isinstance(entry, dict) else None
        if value is None:
            continue
        if finite(value) is None or value < 0:
            raise InputError(f"{path}: cases.{visible(case_id)}.noise_floor is {shown(value)}, not "
                             f"a noise floor (a fraction >= 0): {_RECALIBRATE}")
        floors[case_id] = float(value)
    return floors


def signals_root_for(baseline_dir: pathlib.Path) -> Optional[pathlib.Path]:
    """The committed signals folder next to a baseline folder: DIR/signals when DIR is the
    baselines root, DIR/../signals when DIR is one machine class's folder; None without one."""
    baseline_dir = pathlib.Path(baseline_dir)
    for candidate in (baseline_dir / SIGNALS_DIR_NAME, baseline_dir.parent / SIGNALS_DIR_NAME):
        if candidate.is_dir():
            return candidate
    return None


def update_signals(
    results_path: pathlib.Path,
    signals_dir: pathlib.Path,
    suites: Optional[list[str]] = None,
    prune: bool = False,
    accept_failures: bool = False,
) -> UpdateOutcome:
    """Writes the signals of a results file into signals_dir/<suite>.json (update_signals_dir).

    Refuses (InputError) results with failing or erroring cases unless accept_failures: a
    committed baseline is the accepted good state, and a failure accepted there would no
    longer be a new failure."""
    results = load_results(results_path)
    refuse_failures(results_path, results, suites, accept_failures)
    try:
        return update_signals_dir(results, signals_dir, suites=suites, prune=prune)
    except SignalsError as e:
        raise InputError(str(e)) from e


def refuse_failures(results_path: pathlib.Path, results: dict[str, Any], suites: Optional[list[str]],
                     accept_failures: bool) -> None:
    failing = [r for r in failing_cases(results) if not suites or suite_of(r) in suites]
    if failing and not accept_failures:
        names = ", ".join(f"{r['id']} ({r.get('status')})" for r in failing[:5])
        more = f" and {len(failing) - 5} more" if len(failing) > 5 else ""
        raise InputError(
            f"{results_path}: {len(failing)} case(s) fail or error: {names}{more}: fix them, or "
            "pass --accept-failures to record their failure in the signals baseline"
        )


# ---------------------------------------------------------------------------------------------
# Committed signals


class SignalsError(Exception):
    """An unusable signals file or directory; the message names it (exit code 2)."""


_REWRITE = "rewrite it with `meshgate baseline update --signals-only RESULTS.json`"


def _load_file(path: pathlib.Path) -> dict:
    data = jsonfile.read(path, error=SignalsError)
    if data.get("schema") != SIGNALS_SCHEMA:
        raise SignalsError(f"{path}: schema is {data.get('schema')!r}, expected {SIGNALS_SCHEMA!r}: "
                           f"{_REWRITE}")
    cases = data.get("cases")
    if not isinstance(cases, dict) or not all(isinstance(v, dict) for v in cases.values()):
        raise SignalsError(f"{path}: 'cases' must map case ids to signal objects")
    # The two signals every check reads first: damage there is unusable input, not a change.
    for case_id, sig in cases.items():
        at = f"{path}: cases.{visible(case_id)}"
        if "status" in sig and sig["status"] not in _results.STATUSES:
            raise SignalsError(f"{at}.status is {visible(json.dumps(sig['status']))[:40]}, "
                               f"not one of {', '.join(_results.STATUSES)}: {_REWRITE}")
        plan = sig.get("plan", [])
        if not isinstance(plan, list) or not all(isinstance(step, str) for step in plan):
            raise SignalsError(f"{at}.plan is not a list of strings: {_REWRITE}")
    return data


def load_signals_dir(signals_dir: pathlib.Path, suites: Optional[Iterable[str]] = None
             ) -> tuple[dict[str, dict], dict[str, str], list[str]]:
    """Committed signals: (signals by case id, suite by case id, suites asked for without a
    file). `suites` = None loads every file in the folder."""
    signals_dir = pathlib.Path(signals_dir)
    if not signals_dir.is_dir():
        raise SignalsError(f"{signals_dir}: no signals baseline folder: create it with "
                           f"`meshgate baseline update --signals-only RESULTS.json`")
    if suites is None:
        suites = sorted(p.stem for p in signals_dir.glob("*.json"))
    by_id: dict[str, dict] = {}
    suite_by_id: dict[str, str] = {}
    lacking = []
    for suite in sorted(set(suites)):
        path = signals_dir / f"{suite}.json"
        if not path.exists():
            lacking.append(suite)
            continue
        for case_id, sig in _load_file(path)["cases"].items():
            by_id[case_id] = sig
            suite_by_id[case_id] = suite
    return by_id, suite_by_id, lacking


def _dump(doc: dict) -> str:
    return json.dumps(doc, indent=1, sort_keys=True) + "\n"


@dataclasses.dataclass
class UpdateOutcome:
    written: list[pathlib.Path]
    unchanged: list[pathlib.Path]
    kept_skipped: list[str]  # skipped here, recorded signals kept
    kept_absent: list[str]  # in the file, not in the results, kept (no --prune)
    pruned: list[str]


def failing_cases(results: dict) -> list[dict]:
    return [r for r in results.get("cases", []) if isinstance(r, dict) and r.get("status") in _results.FAILING]


def update_signals_dir(results: dict, signals_dir: pathlib.Path, suites: Optional[list[str]] = None,
               prune: bool = False) -> UpdateOutcome:
    """Writes the signals of `results` into signals_dir/<suite>.json, one file per suite.

    Entries of cases the results skip keep what was recorded (on a machine that could run
    them); entries of cases the results lack stay unless `prune`. Files whose content would not
    change are not rewritten. Failing cases are the caller's to refuse."""
    signals_dir = pathlib.Path(signals_dir)
    new = _signals.extract_all(results)
    by_suite: dict[str, dict[str, dict]] = {}
    for row in results.get("cases", []):
        if isinstance(row, dict) and row.get("id") in new:
            by_suite.setdefault(suite_of(row), {})[row["id"]] = new[row["id"]]
    if suites:
        by_suite = {s: c for s, c in by_suite.items() if s in suites}
    outcome = UpdateOutcome([], [], [], [], [])
    for suite in sorted(by_suite):
        path = signals_dir / f"{suite}.json"
        old_cases = _load_file(path)["cases"] if path.exists() else {}
        cases = dict(by_suite[suite])
        for case_id, sig in by_suite[suite].items():
            old = old_cases.get(case_id)
            if sig.get("status") == "skip" and old and old.get("status") != "skip":
                cases[case_id] = old
                outcome.kept_skipped.append(case_id)
        for case_id, old in old_cases.items():
            if case_id not in cases:
                if prune:
                    outcome.pruned.append(case_id)
                else:
                    cases[case_id] = old
                    outcome.kept_absent.append(case_id)
        text = _dump({"schema": SIGNALS_SCHEMA, "suite": suite, "cases": dict(sorted(cases.items()))})
        if path.exists() and path.read_bytes() == text.encode("utf-8"):
            outcome.unchanged.append(path)
            continue
        files.write_text_atomic(path, text)
        outcome.written.append(path)
    return outcome


# ---------------------------------------------------------------------------------------------
# Calibrations


def calibration_for(
    new: dict[str, Any],
    base_path: Optional[pathlib.Path] = None,
    explicit: Optional[pathlib.Path] = None,
    baselines_root: Optional[pathlib.Path] = None,
    machine_class: Optional[str] = None,
) -> dict[str, float]:
    """Noise floors for this machine class: --calibration, else next to the base, else baselines/<class>/."""
    if explicit is not None:
        if not pathlib.Path(explicit).exists():
            raise InputError(f"{explicit}: calibration file does not exist")
        return load_calibration(explicit)
    if base_path is not None:
        beside = pathlib.Path(base_path).parent / CALIBRATION_FILE
        if beside.exists():
            return load_calibration(beside)
    mclass = machine_class or results_machine_class(new)
    return load_calibration(pathlib.Path(baselines_root or default_baselines()) / mclass / CALIBRATION_FILE)


def stored_calibration(baselines_root: pathlib.Path, machine_class: str) -> pathlib.Path:
    """Where the calibration of `machine_class` is stored; InputError when a file there is not
    one that new cases can be merged into (it stays as it is)."""
    path = pathlib.Path(baselines_root) / machine_class / CALIBRATION_FILE
    load_calibration(path)  # the noise floors `compare` would read, checked
    return path


def store_calibration(path: pathlib.Path, cases: dict[str, dict[str, Any]], results: dict[str, Any],
                      machine_class: str) -> pathlib.Path:
    """Merges `cases` into the calibration file at `path` (atomic write); returns the path."""
    path = pathlib.Path(path)
    doc: dict[str, Any] = {"schema": CALIBRATION_SCHEMA, "machine_class": machine_class, "cases": {}}
    if path.exists():
        doc = read_calibration(path)
    run = results.get("run", {})
    stamp = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
    for case_id, entry in cases.items():
        doc["cases"][case_id] = dict(entry, commit=run.get("commit"), calibrated=stamp)
    doc["machine_class"] = machine_class
    doc["machine"] = run.get("machine", {})
    doc["updated"] = stamp
    files.write_json_atomic(path, doc)
    return path
