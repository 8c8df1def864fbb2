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

`check(results, committed)` compares every row of a results document with the committed
signals (the files of `baselines/signals/`, kept by store.py); a case skipped on one side (a
machine without the GPU or the ranks it needs) is never a change. This module is pure: the
files are store.py's, the reports signal_report.py's.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import re
from typing import Any, Iterable, Optional

from ..core.results import FAILING, suite_of

CHECK_SCHEMA = "meshgate.signals-check/1"
REL_TOL = 1e-9

# Metrics that are signals whichever kind records them (counts, bytes, modeled costs).
GENERIC_METRICS = (
    "collectives", "kernel_launches", "kernels", "launches", "bytes_per_rank", "bytes_moved",
    "modeled_time_s", "modeled_cost_s", "warnings",
)
# Per kind, the signals beyond the generic ones. The runner's registry describes each kind with
# the same names (`meshgate-runner list --kinds --json`, each kind's `signals`: KIND_METRICS
# then KIND_STRUCTURED), and tests/test_kind_registry.py holds the two equal.
# The deterministic metrics, read as they are. Everything else in `metrics` (time_s, algbw,
# busbw, gflops, error magnitudes, perf flags) is measured, not decided.
KIND_METRICS = {
    "layout": ("result",),
    "mesh": ("layout", "shape", "model_disagreements"),
    "collective": ("group_size", "groups", "bytes"),
    "redistribute": ("greedy_cost_s", "distinct_plans", "plans_differ_between_ranks",
                     "merged_equals_unmerged_bitwise"),
    "gemm": ("flops",),
    "fsdp": ("comms_per_step", "bytes_per_step"),
    # What a sweep found: the shapes it tried, the failures per class and the sorted failing
    # shapes; its speed (shapes_per_s) is measured.
    "gemm_sweep": ("shapes", "failure_counts", "failing_shapes"),
}
# The signals made from a structure of the metrics: a collective's per-size table, a GEMM's
# implementations (_gemm_signals).
KIND_STRUCTURED = {
    "collective": ("sizes",),
    "gemm": ("impls", "algorithm", "fingerprints", "numerics_env", "device"),
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


# ---------------------------------------------------------------------------------------------
# Extraction


def kind_signals(kind: str) -> tuple[str, ...]:
    """The signals of `kind` beyond the generic ones, in the registry's order."""
    return KIND_METRICS.get(kind, ()) + KIND_STRUCTURED.get(kind, ())


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
    if "sizes" in KIND_STRUCTURED.get(kind, ()) and isinstance(metrics.get("sizes"), list):
        out["sizes"] = [{k: s[k] for k in COLLECTIVE_SIZE_KEYS if k in s}
                        for s in metrics["sizes"] if isinstance(s, dict)]
    if isinstance(metrics.get("unmerged"), dict):
        unmerged = {k: metrics["unmerged"][k] for k in UNMERGED_KEYS if k in metrics["unmerged"]}
        if unmerged:
            out["unmerged"] = unmerged
    if "impls" in KIND_STRUCTURED.get(kind, ()):
        _gemm_signals(metrics, run, out)
    return out


def extract_all(results: dict) -> dict[str, dict]:
    """Signals of every row of a results document, by case id."""
    run = results.get("run") if isinstance(results.get("run"), dict) else {}
    return {row["id"]: extract(row, run) for row in results.get("cases", [])
            if isinstance(row, dict) and isinstance(row.get("id"), str)}


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
