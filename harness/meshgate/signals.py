"""Deterministic signals of a result row: what a case did, as opposed to how long it took.

A signal is a fact the code decides, not the machine: the case's status, the plan it issued
(the collectives of a redistribution, the implementations a GEMM ran), bytes per rank, the
cost model's numbers, the GEMM algorithm cuBLASLt picked, collective counts. The same commit
gives the same signals on any machine of the same kind, so they can be compared with a
baseline recorded elsewhere, on another day, with zero noise (docs/gate.md, "Deterministic
signals beside time"). Timings, rates, host names and dates never enter.

GEMM outputs add their bitwise fingerprints (a hash of the output's bits, per implementation and
per workspace/split-K configuration): a kernel whose numerics drift within the tolerance still
changes its fingerprint. A fingerprint depends on the BLAS library and the device, so it is
compared only when both sides record the same `numerics_env` (e.g. the same GPU and cuBLASLt
version, or the same OpenBLAS build and CPU core type).

`extract(row)` is the one definition of a row's signals; the baseline check, the nightly job
and the history store all use it. `diff(old, new)` compares two signal sets: strings, ints and
booleans exactly, floats (the outputs of deterministic models) with a relative tolerance of
1e-9 so that a different float formatting is not a change. The GEMM algorithm choice is bound
to the GPU it was chosen on and is compared only when both sides name the same device.

Committed baselines: `baselines/signals/<suite>.json` = {"schema": "meshgate.signals/1",
"suite": S, "cases": {id: signals}}, written by `meshgate baseline update` and read by
`meshgate baseline check` (see `check`). A case skipped on one side (a machine without the
GPU or the ranks it needs) is never a change.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import math
import pathlib
import re
from typing import Any, Iterable, Optional

from . import jsonfile
from . import results as _results
from .markup import md_cell, md_code, visible

SCHEMA = "meshgate.signals/1"
CHECK_SCHEMA = "meshgate.signals-check/1"
REL_TOL = 1e-9
FAILING = ("fail", "error")

# Metrics that are signals whichever kind records them (counts, bytes, modeled costs).
GENERIC_METRICS = (
    "collectives", "kernel_launches", "kernels", "launches", "bytes_per_rank", "bytes_moved",
    "modeled_time_s", "modeled_cost_s", "warnings",
)
# Per kind: the deterministic metrics beyond the generic ones. Everything else in `metrics`
# (time_s, algbw, busbw, gflops, error magnitudes, perf flags) is measured, not decided.
KIND_METRICS = {
    "layout": ("result",),
    "mesh": ("layout", "shape", "model_disagreements"),
    "collective": ("group_size", "groups", "bytes"),
    "redistribute": ("greedy_cost_s", "distinct_plans", "plans_differ_between_ranks",
                     "merged_equals_unmerged_bitwise"),
    "gemm": ("flops",),
}
COLLECTIVE_SIZE_KEYS = ("bytes", "count", "inplace", "modeled_time_s")
UNMERGED_KEYS = ("plan", "collectives", "bytes_per_rank", "modeled_cost_s")
GEMM_IMPL_KEYS = ("executed", "device", "lt_epilogue", "fallback_reason", "simple_kernel")
GEMM_ALGO_KEYS = ("id", "tile", "splitk_num", "reduction_scheme", "stages", "workspace_bytes")
# Signals that belong to where they were recorded: each is compared only when both sides agree
# on the signal that names its environment (the GPU for algorithms, the GPU or CPU core and the
# BLAS library version for output fingerprints).
BOUND_TO = {"algorithm": "device", "fingerprints": "numerics_env"}
# The algorithm part of a cuBLASLt plan line ("lt_epilogue: epilogue BIAS, algo 21 tile 18
# splitk 1 ... (cached)"): it moves to the device-bound `algorithm` signal.
_ALGO_TAIL = re.compile(r", algo -?\d+\b.*$")
_CACHED = re.compile(r"\s*\(cached\)\s*$")


class SignalsError(Exception):
    """An unusable signals file or directory; the message names it (exit code 2)."""


# ---------------------------------------------------------------------------------------------
# Extraction


def _gpu_name(run: Optional[dict]) -> Optional[str]:
    gpus = ((run or {}).get("machine") or {}).get("gpus") or []
    names = sorted({str(g.get("name") or g.get("model") or "gpu") if isinstance(g, dict) else str(g)
                    for g in gpus})
    return " + ".join(names) if names else None


def _plan_line(line: Any) -> Any:
    if not isinstance(line, str):
        return line
    return _CACHED.sub("", _ALGO_TAIL.sub("", line))


def _gemm_signals(metrics: dict, run: Optional[dict], out: dict) -> None:
    impls = metrics.get("impls")
    if not isinstance(impls, dict):
        return
    chosen: dict[str, Any] = {}
    algorithms: dict[str, Any] = {}
    on_gpu = False
    for name in sorted(impls):
        entry = impls[name]
        if not isinstance(entry, dict):
            continue
        facts = {k: entry[k] for k in GEMM_IMPL_KEYS if k in entry}
        if facts:
            chosen[name] = facts
        if entry.get("device") == "cuda":
            on_gpu = True
        algo = entry.get("algo")
        if isinstance(algo, dict):
            algorithms[name] = {k: algo[k] for k in GEMM_ALGO_KEYS if k in algo}
    if chosen:
        out["impls"] = chosen
    if algorithms:
        out["algorithm"] = algorithms
    fingerprints = {name: impls[name]["fingerprint"] for name in sorted(impls)
                    if isinstance(impls[name], dict) and "fingerprint" in impls[name]}
    for config in metrics.get("configs") or []:
        if not isinstance(config, dict) or not isinstance(config.get("impls"), dict):
            continue
        for name in sorted(config["impls"]):
            entry = config["impls"][name]
            if isinstance(entry, dict) and "fingerprint" in entry:
                fingerprints[f"{name} [{config.get('label', '?')}]"] = entry["fingerprint"]
    if fingerprints:
        out["fingerprints"] = fingerprints
        out["numerics_env"] = metrics.get("numerics_env") or "unknown"
    if on_gpu or algorithms:
        device = _gpu_name(run)
        out["device"] = device if device else "cuda"


def extract(row: dict, run: Optional[dict] = None) -> dict:
    """The deterministic signals of one result row (a dict, JSON-serialisable).

    `run` is the results document's `run` block: it names the GPU a GEMM algorithm was chosen
    on. Without it a GPU row's device is just "cuda". A skipped row has only its status: what a
    case would do on hardware this machine lacks is unknown, not different."""
    status = row.get("status") if isinstance(row.get("status"), str) else "error"
    out: dict[str, Any] = {"status": status}
    if status == "skip":
        return out
    plan = row.get("plan")
    if isinstance(plan, list):
        out["plan"] = [_plan_line(p) for p in plan]
    metrics = row.get("metrics") if isinstance(row.get("metrics"), dict) else {}
    kind = row.get("kind", "")
    for key in GENERIC_METRICS + KIND_METRICS.get(kind, ()):
        if key in metrics and not isinstance(metrics[key], dict):
            out[key] = metrics[key]
    if kind == "collective" and isinstance(metrics.get("sizes"), list):
        out["sizes"] = [{k: s[k] for k in COLLECTIVE_SIZE_KEYS if k in s}
                        for s in metrics["sizes"] if isinstance(s, dict)]
    if isinstance(metrics.get("unmerged"), dict):
        unmerged = {k: metrics["unmerged"][k] for k in UNMERGED_KEYS if k in metrics["unmerged"]}
        if unmerged:
            out["unmerged"] = unmerged
    if kind == "gemm":
        _gemm_signals(metrics, run, out)
    return out


def extract_all(results: dict) -> dict[str, dict]:
    """Signals of every row of a results document, by case id."""
    run = results.get("run") if isinstance(results.get("run"), dict) else {}
    return {row["id"]: extract(row, run) for row in results.get("cases", [])
            if isinstance(row, dict) and isinstance(row.get("id"), str)}


def suite_of(row_or_id: Any) -> str:
    if isinstance(row_or_id, dict):
        suite = row_or_id.get("suite")
        if isinstance(suite, str) and suite:
            return suite
        row_or_id = row_or_id.get("id", "")
    return str(row_or_id).split("/", 1)[0]


# ---------------------------------------------------------------------------------------------
# Comparison


@dataclasses.dataclass
class Change:
    signal: str  # dotted path: "plan", "bytes_per_rank", "sizes[1].modeled_time_s", ...
    old: Any  # None when absent
    new: Any

    def to_json(self) -> dict:
        return {"signal": self.signal, "old": self.old, "new": self.new}


_ABSENT = object()


def _is_number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def values_equal(a: Any, b: Any) -> bool:
    """Equality of signal values: floats within REL_TOL, everything else exact, recursively."""
    if _is_number(a) and _is_number(b):
        if isinstance(a, int) and isinstance(b, int):
            return a == b
        if math.isnan(a) or math.isnan(b):
            return math.isnan(a) and math.isnan(b)
        return math.isclose(a, b, rel_tol=REL_TOL, abs_tol=0.0)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(values_equal(x, y) for x, y in zip(a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(values_equal(a[k], b[k]) for k in a)
    if _is_number(a) or _is_number(b):
        return False
    return type(a) is type(b) and a == b


def _leaves(value: Any, path: str, out: dict[str, Any]) -> None:
    """Flattens dicts by key and lists of dicts by index; lists of scalars stay one leaf."""
    if isinstance(value, dict) and value:
        for k in sorted(value):
            _leaves(value[k], f"{path}.{k}" if path else str(k), out)
    elif isinstance(value, list) and any(isinstance(v, (dict, list)) for v in value):
        if not value:
            out[path] = value
        for i, v in enumerate(value):
            _leaves(v, f"{path}[{i}]", out)
        out.setdefault(f"{path}#len", len(value))
    else:
        out[path] = value


def diff(old: dict, new: dict) -> tuple[list[Change], list[Change], list[str]]:
    """Compares two signal sets (status aside). Returns (changes, added, notes): `changes` are
    signals that differ or vanished (they gate), `added` are signals only the new side records
    (reported, not gating: new instrumentation), `notes` say what was not compared and why."""
    notes: list[str] = []
    skip: set[str] = {"status"} | set(BOUND_TO.values())
    for signal, env in BOUND_TO.items():
        if signal not in old and signal not in new:
            continue
        env_old, env_new = old.get(env), new.get(env)
        if env_old != env_new:
            skip.add(signal)
            notes.append(f"{signal} not compared: recorded on {env_old or 'no GPU'}, "
                         f"this run on {env_new or 'no GPU'}")
    a: dict[str, Any] = {}
    b: dict[str, Any] = {}
    for key in sorted(set(old) | set(new)):
        if key in skip:
            continue
        if key in old:
            _leaves(old[key], key, a)
        if key in new:
            _leaves(new[key], key, b)
    changes, added = [], []
    for path in sorted(set(a) | set(b), key=_path_order):
        x, y = a.get(path, _ABSENT), b.get(path, _ABSENT)
        if x is _ABSENT:
            added.append(Change(path.replace("#len", " (length)"), None, y))
        elif y is _ABSENT:
            changes.append(Change(path.replace("#len", " (length)"), x, None))
        elif not values_equal(x, y):
            changes.append(Change(path.replace("#len", " (length)"), x, y))
    return changes, added, notes


def _path_order(path: str) -> tuple:
    # "plan" first (it is what a reader looks for), then by path with numeric indices.
    parts = [int(p) if p.isdigit() else p for p in re.split(r"\[(\d+)\]", path)]
    return (0 if path == "plan" else 1, [(0, p) if isinstance(p, int) else (1, p) for p in parts])


def plan_diff(old: Any, new: Any, label_old: str = "baseline", label_new: str = "this run") -> str:
    """A unified diff of two plans (lists of comm strings), every line kept as context."""
    old_lines = [str(x) for x in old] if isinstance(old, list) else ([] if old is None else [str(old)])
    new_lines = [str(x) for x in new] if isinstance(new, list) else ([] if new is None else [str(new)])
    n = max(len(old_lines), len(new_lines), 1)
    return "\n".join(difflib.unified_diff(old_lines, new_lines, fromfile=label_old, tofile=label_new,
                                          lineterm="", n=n))


# ---------------------------------------------------------------------------------------------
# Committed signal files


_REWRITE = "rewrite it with `meshgate baseline update --signals-only RESULTS.json`"


def _load_file(path: pathlib.Path) -> dict:
    data = jsonfile.read(path, error=SignalsError)
    if data.get("schema") != SCHEMA:
        raise SignalsError(f"{path}: schema is {data.get('schema')!r}, expected {SCHEMA!r}: "
                           f"{_REWRITE}")
    cases = data.get("cases")
    if not isinstance(cases, dict) or not all(isinstance(v, dict) for v in cases.values()):
        raise SignalsError(f"{path}: 'cases' must map case ids to signal objects")
    # The two signals every check reads first: damage there is unusable input, not a change.
    for case_id, sig in cases.items():
        where = f"{path}: cases.{visible(case_id)}"
        if "status" in sig and sig["status"] not in _results.STATUSES:
            raise SignalsError(f"{where}.status is {visible(json.dumps(sig['status']))[:40]}, "
                               f"not one of {', '.join(_results.STATUSES)}: {_REWRITE}")
        plan = sig.get("plan", [])
        if not isinstance(plan, list) or not all(isinstance(step, str) for step in plan):
            raise SignalsError(f"{where}.plan is not a list of strings: {_REWRITE}")
    return data


def load_dir(signals_dir: pathlib.Path, suites: Optional[Iterable[str]] = None
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
    return [r for r in results.get("cases", []) if isinstance(r, dict) and r.get("status") in FAILING]


def update_dir(results: dict, signals_dir: pathlib.Path, suites: Optional[list[str]] = None,
               prune: bool = False) -> UpdateOutcome:
    """Writes the signals of `results` into signals_dir/<suite>.json, one file per suite.

    Entries of cases the results skip keep what was recorded (on a machine that could run
    them); entries of cases the results lack stay unless `prune`. Files whose content would not
    change are not rewritten. Failing cases are the caller's to refuse."""
    signals_dir = pathlib.Path(signals_dir)
    new = extract_all(results)
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
        text = _dump({"schema": SCHEMA, "suite": suite, "cases": dict(sorted(cases.items()))})
        if path.exists() and path.read_bytes() == text.encode("utf-8"):
            outcome.unchanged.append(path)
            continue
        _results.write_text_atomic(path, text)
        outcome.written.append(path)
    return outcome


# ---------------------------------------------------------------------------------------------
# The check: results against committed signals

OUTCOMES = ("new_failure", "changed", "same", "still_failing", "fixed", "new", "absent",
            "skipped_here", "skipped_in_baseline")
GATING = ("new_failure", "changed")


@dataclasses.dataclass
class CaseCheck:
    id: str
    outcome: str
    base_status: Optional[str] = None
    new_status: Optional[str] = None
    message: str = ""
    changes: list[Change] = dataclasses.field(default_factory=list)
    added: list[Change] = dataclasses.field(default_factory=list)
    notes: list[str] = dataclasses.field(default_factory=list)
    plan_old: Any = None
    plan_new: Any = None

    @property
    def plan_changed(self) -> bool:
        return any(c.signal == "plan" for c in self.changes)

    def to_json(self) -> dict:
        return {"id": self.id, "outcome": self.outcome, "base_status": self.base_status,
                "new_status": self.new_status, "message": self.message,
                "plan_changed": self.plan_changed, "plan_old": self.plan_old,
                "plan_new": self.plan_new, "changes": [c.to_json() for c in self.changes],
                "added": [c.to_json() for c in self.added], "notes": self.notes}


@dataclasses.dataclass
class Check:
    cases: list[CaseCheck]
    signals_dir: str = ""
    results_label: str = ""
    lacking_suites: list[str] = dataclasses.field(default_factory=list)

    def by_outcome(self, outcome: str) -> list[CaseCheck]:
        return [c for c in self.cases if c.outcome == outcome]

    def count(self, outcome: str) -> int:
        return len(self.by_outcome(outcome))

    def plan_changes(self) -> list[CaseCheck]:
        return [c for c in self.cases if c.plan_changed]

    def exit_code(self) -> int:
        return 1 if any(c.outcome in GATING for c in self.cases) else 0

    def headline(self) -> str:
        failures = self.count("new_failure")
        changed = self.by_outcome("changed")
        plans = sum(1 for c in changed if c.plan_changed)
        others = len(changed) - plans
        parts = []
        if failures:
            parts.append(f"{failures} new failure{'s' if failures != 1 else ''}")
        if plans:
            parts.append(f"{plans} plan change{'s' if plans != 1 else ''}")
        if others:
            parts.append(f"{others} case{'s' if others != 1 else ''} with changed signals")
        return ("FAIL: " + ", ".join(parts)) if parts else "PASS"

    def counts_line(self) -> str:
        labels = {"same": "unchanged", "changed": "changed", "new_failure": "new failure",
                  "still_failing": "still failing", "fixed": "fixed", "new": "new",
                  "absent": "not in this run", "skipped_here": "skipped here",
                  "skipped_in_baseline": "skipped when recorded"}
        return ", ".join(f"{self.count(o)} {labels[o]}" for o in OUTCOMES if self.count(o))

    def to_json(self) -> dict:
        return {"schema": CHECK_SCHEMA, "signals": self.signals_dir, "results": self.results_label,
                "exit_code": self.exit_code(), "headline": self.headline(),
                "counts": {o: self.count(o) for o in OUTCOMES},
                "lacking_suites": self.lacking_suites,
                "cases": [c.to_json() for c in self.cases]}


def check(results: dict, baseline: dict[str, dict], baseline_suites: Optional[dict[str, str]] = None,
          lacking_suites: Iterable[str] = (), signals_dir: str = "", results_label: str = "") -> Check:
    """Compares every row's signals with the committed ones (a pure function).

    Gating: a case that did not fail before and fails or errors now (`new_failure`), and a case
    passing on both sides whose signals differ (`changed`). Not gating: new cases, cases of the
    checked suites that the results lack (`absent`: removed, renamed or not selected), skips
    on either side, still failing, fixed."""
    run = results.get("run") if isinstance(results.get("run"), dict) else {}
    rows = [r for r in results.get("cases", []) if isinstance(r, dict) and isinstance(r.get("id"), str)]
    seen = set()
    out: list[CaseCheck] = []
    for row in rows:
        case_id = row["id"]
        seen.add(case_id)
        sig = extract(row, run)
        base = baseline.get(case_id)
        c = CaseCheck(id=case_id, outcome="same", new_status=sig["status"],
                      message=str(row.get("message") or ""), plan_new=sig.get("plan"))
        out.append(c)
        if base is None:
            c.outcome = "new"
            continue
        c.base_status = base.get("status")
        c.plan_old = base.get("plan")
        if c.new_status in FAILING:
            c.outcome = "still_failing" if c.base_status in FAILING else "new_failure"
            if c.new_status == "fail" and c.base_status == "pass":
                # What the failing run recorded differently (a wrong plan, a wrong result);
                # what it no longer records is not news. An error ran nothing to compare.
                changes, _, c.notes = diff(base, sig)
                c.changes = [ch for ch in changes if ch.new is not None]
            continue
        if c.new_status == "skip":
            c.outcome = "skipped_here"
            continue
        if c.base_status == "skip":
            c.outcome = "skipped_in_baseline"
            continue
        if c.base_status in FAILING:
            c.outcome = "fixed"
            continue
        c.changes, c.added, c.notes = diff(base, sig)
        c.outcome = "changed" if c.changes else "same"
    checked_suites = {suite_of(r) for r in rows}
    for case_id in sorted(baseline):
        suite = (baseline_suites or {}).get(case_id, suite_of(case_id))
        if case_id not in seen and suite in checked_suites:
            base = baseline[case_id]
            out.append(CaseCheck(id=case_id, outcome="absent", base_status=base.get("status"),
                                 plan_old=base.get("plan")))
    return Check(cases=out, signals_dir=str(signals_dir), results_label=str(results_label),
                 lacking_suites=sorted(set(lacking_suites)))


def check_against_dir(results: dict, signals_dir: pathlib.Path, results_label: str = "") -> Check:
    """Loads the committed signals of the results' suites and checks the results against them."""
    suites = {suite_of(r) for r in results.get("cases", []) if isinstance(r, dict)}
    baseline, suite_by_id, lacking = load_dir(signals_dir, suites)
    return check(results, baseline, suite_by_id, lacking, str(signals_dir), results_label)


# ---------------------------------------------------------------------------------------------
# Reports


def _short(value: Any, limit: int = 160) -> str:
    text = json.dumps(value, sort_keys=True) if not isinstance(value, str) else value
    if value is None:
        text = "(absent)"
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _md_cell(value: Any) -> str:
    return md_code(_short(value))


def _list_block(title: str, items: list[str], limit: int = 40) -> list[str]:
    lines = [f"<details><summary>{title} ({len(items)})</summary>", ""]
    lines += [f"- {item}" for item in items[:limit]]
    if len(items) > limit:
        lines.append(f"- ... and {len(items) - limit} more")
    return lines + ["", "</details>", ""]


def _side_by_side(old: Any, new: Any) -> list[str]:
    old = old if isinstance(old, list) else []
    new = new if isinstance(new, list) else []
    lines = ["| # | baseline | this run |", "|---:|---|---|"]
    for i in range(max(len(old), len(new))):
        a = old[i] if i < len(old) else ""
        b = new[i] if i < len(new) else ""
        mark = "" if a == b else " **≠**"
        cell_a = md_code(a) if a != "" else ""
        cell_b = md_code(b) if b != "" else ""
        lines.append(f"| {i + 1}{mark} | {cell_a} | {cell_b} |")
    if not old and not new:
        lines.append("| | (no collectives) | (no collectives) |")
    return lines


def markdown(chk: Check, update_hint: bool = True) -> str:
    """signals-report.md: the verdict, then new failures, plan changes (old and new side by
    side with a unified diff), other changed signals, and what was not compared."""
    lines = [f"# Deterministic signals: {chk.headline()}", ""]
    lines.append(f"{chk.results_label or 'results'} against `{chk.signals_dir or 'signals'}`: "
                 f"{chk.counts_line() or 'no cases'}. No timing is involved: these signals are "
                 "decided by the code, not the machine.")
    lines.append("")
    failures = chk.by_outcome("new_failure")
    if failures:
        lines += [f"## New failures ({len(failures)})", "", "| case | baseline | this run | message |",
                  "|---|---|---|---|"]
        for c in failures:
            lines.append(f"| {md_code(c.id)} | {md_cell(c.base_status)} | "
                         f"**{md_cell(c.new_status)}** | {md_cell(c.message)} |")
        lines.append("")
    plan_changed = [c for c in chk.cases if c.plan_changed]
    if plan_changed:
        lines += [f"## Plan changes ({len(plan_changed)})", ""]
        for c in plan_changed:
            status = "" if c.outcome == "changed" else f" ({c.base_status} -> {c.new_status})"
            lines += [f"### {md_code(c.id)}{status}", ""]
            lines += _side_by_side(c.plan_old, c.plan_new)
            lines += ["", "```diff", plan_diff(c.plan_old, c.plan_new), "```", ""]
    changed = [(c, ch) for c in chk.cases if c.outcome in ("changed", "new_failure")
               for ch in c.changes if ch.signal != "plan"]
    if changed:
        lines += [f"## Changed signals ({len(changed)})", "", "| case | signal | baseline -> this run |",
                  "|---|---|---|"]
        for c, ch in changed:
            lines.append(f"| {md_code(c.id)} | {md_code(ch.signal)} | "
                         f"{_md_cell(ch.old)} -> {_md_cell(ch.new)} |")
        lines.append("")
        for c in chk.cases:
            for ch in c.changes:
                if ch.signal != "plan" and ch.signal.endswith("plan"):
                    lines += [f"{md_code(c.id)} {md_code(ch.signal)}:", "", "```diff",
                              plan_diff(ch.old, ch.new), "```", ""]
    if chk.exit_code() and update_hint:
        lines += ["If these changes are intended, accept them in the same change: "
                  "`./meshgate run cases --out reports/signals && ./meshgate baseline update "
                  "--signals-only reports/signals/results.json`, then commit `baselines/signals/`.", ""]
    if chk.lacking_suites:
        lines += [f"No committed signals for suite(s) {', '.join(chk.lacking_suites)}: their cases "
                  "are new.", ""]
    info = [
        ("New cases (not gating)",
         [f"{md_code(c.id)} ({md_cell(c.new_status)})" for c in chk.by_outcome("new")]),
        ("Skipped here, not compared (missing hardware or ranks)",
         [f"{md_code(c.id)}: {md_cell(c.message)}" for c in chk.by_outcome("skipped_here")]),
        ("Skipped when the baseline was recorded, not compared",
         [f"{md_code(c.id)}" for c in chk.by_outcome("skipped_in_baseline")]),
        ("Failing in the baseline and now (not gating)",
         [f"{md_code(c.id)}: {md_cell(c.new_status)}: {md_cell(c.message)}"
          for c in chk.by_outcome("still_failing")]),
        ("Fixed: failing in the baseline, passing now (update the baseline)",
         [f"{md_code(c.id)}" for c in chk.by_outcome("fixed")]),
        ("In the baseline, not in this run (removed, renamed or not selected)",
         [f"{md_code(c.id)}" for c in chk.by_outcome("absent")]),
        ("Signals recorded for the first time (not gating)",
         [f"{md_code(c.id)} {md_code(a.signal)} = {_md_cell(a.new)}"
          for c in chk.cases for a in c.added]),
        ("Not compared", [f"{md_code(c.id)}: {md_cell(n)}" for c in chk.cases for n in c.notes]),
    ]
    for title, items in info:
        if items:
            lines += _list_block(title, items)
    return "\n".join(lines).rstrip() + "\n"


def text(chk: Check, limit: int = 20) -> str:
    """The terminal view: new failures, plan diffs and changed signals, then the headline."""
    lines = []
    gating = [c for c in chk.cases if c.outcome in GATING]
    for c in gating[:limit]:
        if c.outcome == "new_failure":
            lines.append(f"new failure  {visible(c.id)}: {c.base_status} -> {c.new_status}: "
                         f"{visible(c.message)}")
        else:
            lines.append(f"changed      {visible(c.id)}")
        for ch in c.changes:
            if ch.signal.endswith("plan"):
                lines.append(f"    {visible(ch.signal)}:")
                lines += ["      " + visible(line) for line in plan_diff(ch.old, ch.new).splitlines()]
            else:
                lines.append(f"    {visible(ch.signal)}: {visible(_short(ch.old, 80))} -> "
                             f"{visible(_short(ch.new, 80))}")
    if len(gating) > limit:
        lines.append(f"... and {len(gating) - limit} more case(s) in the report")
    lines.append(f"signals: {chk.headline()} ({chk.counts_line() or 'no cases'})")
    return "\n".join(lines)


def write_report(out_dir: pathlib.Path, chk: Check) -> list[pathlib.Path]:
    """signals-report.md and signals-check.json in out_dir."""
    out_dir = pathlib.Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    md = out_dir / "signals-report.md"
    md.write_text(markdown(chk), encoding="utf-8")
    js = out_dir / "signals-check.json"
    js.write_text(json.dumps(chk.to_json(), indent=1) + "\n", encoding="utf-8")
    return [md, js]


def attach_to_report(report_md: pathlib.Path, chk: Check, details: str = "signals-report.md") -> None:
    """Adds the check to a run's report.md: its verdict under the title, the section at the end."""
    from . import report  # report imports compare, which imports this module

    report.attach_section(report_md, "Deterministic signals", chk.headline(), markdown(chk), details)
