"""Compare two results files case by case and give a verdict per case.

Verdicts: pass | regression | improvement | inconclusive | new | missing | correctness | skip.
Timed cases are judged by the gate's decision rule (verdict.py, one look at alpha), from
per-run medians only, with Benjamini-Hochberg across the timed cases of the comparison.
Correctness (a failing or erroring case) and plan changes are decided without statistics and
are never hidden by them.

The headline is FAIL when any case is a regression or a correctness failure, INCONCLUSIVE when
otherwise a case is inconclusive or missing from the new run, and PASS only when neither.
Exit codes of `meshgate compare`: 1 when any case is a regression or a correctness failure,
0 otherwise (inconclusive never blocks), 2 on unusable input.

Two separate runs (not the sides of one interleaved A/B, see `interleaved`) cannot tell a change
of the code from a drift of the machine between them, so with `separate_runs` a timed case that
the rule calls a regression or an improvement is `inconclusive (separate runs)` instead, its
numbers kept: timing alone never fails such a comparison. `--trust-separate-runs` judges them
as if interleaved.

This module applies the decision rule to two documents (pure); the reports of a comparison are
render.py's, the calibration it uses store.py's, the command commands/compare.py.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any, Optional

from ..core.results import FAILING, finite
from . import signals as _signals
from . import stats
from . import verdict as _verdict
from .verdict import CaseVerdict

VERDICTS = ("pass", "regression", "improvement", "inconclusive", "new", "missing", "correctness", "skip")
# Verdicts in the order a reader wants them: what needs action first.
VERDICT_ORDER = ("regression", "correctness", "inconclusive", "improvement", "missing", "new", "skip", "pass")
# Verdicts that keep a comparison without regressions from being a PASS: a case that could not
# be judged, or that the new run no longer measures, has not passed.
UNJUDGED_VERDICTS = ("inconclusive", "missing")


@dataclasses.dataclass
class Comparison:
    cases: list[CaseVerdict]
    base_label: str = ""
    new_label: str = ""
    base_run: dict = dataclasses.field(default_factory=dict)
    new_run: dict = dataclasses.field(default_factory=dict)
    alpha: float = stats.ALPHA
    fdr_q: float = stats.FDR_Q
    max_gate: float = stats.MAX_GATE
    calibrated: bool = False
    # The command whose report this is ("compare", "ab", "bisect", "run --baseline"): reports
    # are titled by it.
    command: str = "compare"
    # The sides were separate runs, judged without --trust-separate-runs (see hold_back_separate).
    separate_runs: bool = False
    # The compared rows by case id, for reports that plot their metrics (not part of the JSON).
    base_rows: dict = dataclasses.field(default_factory=dict)
    new_rows: dict = dataclasses.field(default_factory=dict)

    def count(self, verdict: str) -> int:
        return sum(1 for c in self.cases if c.verdict == verdict)

    def by_verdict(self, verdict: str) -> list[CaseVerdict]:
        return [c for c in self.cases if c.verdict == verdict]

    def plan_changes(self) -> list[CaseVerdict]:
        return [c for c in self.cases if c.plan_changed]

    def exit_code(self) -> int:
        return 1 if self.count("regression") or self.count("correctness") else 0

    def headline(self) -> str:
        reg, cor = self.count("regression"), self.count("correctness")
        if reg or cor:
            parts = []
            if reg:
                graded = [c.grade for c in self.by_verdict("regression") if c.grade]
                levels = ", ".join(f"{graded.count(g)} {g}" if len(graded) > 1 or reg > 1 else g
                                   for g in ("revert-grade", "not revert-grade") if g in graded)
                parts.append(f"{reg} regression{'s' if reg != 1 else ''}" + (f" ({levels})" if levels else ""))
            if cor:
                parts.append(f"{cor} correctness failure{'s' if cor != 1 else ''}")
            return "FAIL: " + ", ".join(parts)
        unjudged = [f"{self.count(v)} {v}" for v in UNJUDGED_VERDICTS if self.count(v)]
        if unjudged:
            return "INCONCLUSIVE: " + ", ".join(unjudged) + ", no regression found"
        return "PASS"

    def headline_class(self) -> str:
        """FAIL, INCONCLUSIVE or PASS: the headline's first word."""
        return self.headline().split(":")[0]

    def to_json(self) -> dict[str, Any]:
        return {
            "schema": "meshgate.comparison/1",
            "base": self.base_label,
            "new": self.new_label,
            "alpha": self.alpha,
            "fdr_q": self.fdr_q,
            "max_gate": self.max_gate,
            "calibrated": self.calibrated,
            "separate_runs": self.separate_runs,
            "exit_code": self.exit_code(),
            "counts": {v: self.count(v) for v in VERDICTS},
            "cases": [c.to_json() for c in self.cases],
        }


def run_medians(row: Optional[dict[str, Any]]) -> list[float]:
    """Per-run medians of a row's time samples (finite numbers only); one value from metrics when
    only that exists."""
    if not row:
        return []
    samples = (row.get("samples") or {}).get("time_s")
    if isinstance(samples, list) and samples:
        if all(isinstance(r, list) for r in samples):
            return stats.per_run_medians([_finite(r) for r in samples])
        values = _finite(samples)
        if len(values) == len(samples):
            return [stats.median(values)]
    metric = (row.get("metrics") or {}).get("time_s")
    median = finite(metric.get("median")) if isinstance(metric, dict) else None
    return [] if median is None else [median]


def _finite(values: list) -> list[float]:
    return [x for x in map(finite, values) if x is not None]


def compare_results(
    base: dict[str, Any],
    new: dict[str, Any],
    noise_floors: Optional[dict[str, float]] = None,
    alpha: float = stats.ALPHA,
    fdr_q: float = stats.FDR_Q,
    base_label: str = "base",
    new_label: str = "new",
    max_gate: float = stats.MAX_GATE,
    separate_runs: bool = False,
) -> Comparison:
    """Pure comparison of two results documents; the order of cases follows `new`, then missing.

    `noise_floors` maps case ids to calibrated noise floors. `separate_runs`: the documents are
    two separate runs, whose timing differences are never more than inconclusive."""
    noise_floors = noise_floors or {}
    base_rows = {r["id"]: r for r in base.get("cases", [])}
    new_rows = {r["id"]: r for r in new.get("cases", [])}
    ids = [r["id"] for r in new.get("cases", [])] + [i for i in base_rows if i not in new_rows]
    verdicts: list[CaseVerdict] = []
    timed: list[CaseVerdict] = []
    for case_id in ids:
        b, n = base_rows.get(case_id), new_rows.get(case_id)
        v = CaseVerdict(id=case_id, verdict="pass")
        verdicts.append(v)
        v.base_status = b.get("status") if b else None
        v.new_status = n.get("status") if n else None
        v.message = (n or {}).get("message", "") or ""
        # Plans as signals.extract normalises them (no cache markers, no GPU-specific
        # algorithm suffixes), so only what the code decided can count as a plan change.
        v.plan_base = _signals.extract(b, base.get("run")).get("plan") if b else None
        v.plan_new = _signals.extract(n, new.get("run")).get("plan") if n else None
        if isinstance(v.plan_base, list) and isinstance(v.plan_new, list):
            v.plan_changed = v.plan_base != v.plan_new
        v.base_medians, v.new_medians = run_medians(b), run_medians(n)
        v.runs_base, v.runs_new = len(v.base_medians), len(v.new_medians)
        v.noise_floor = noise_floors.get(case_id)
        v.min_effect = stats.minimum_effect(v.noise_floor)
        if n is None:
            v.verdict, v.note = "missing", "in the base results, absent from the new ones"
            continue
        if v.new_status in FAILING:
            v.verdict = "correctness"
            if b is None or v.base_status in FAILING:
                v.note = f"{v.new_status} (already {v.base_status} in base)" if b else f"{v.new_status} (new case)"
            else:
                v.note = f"{v.base_status} -> {v.new_status}"
            continue
        if b is None:
            v.verdict, v.note = "new", "no baseline row for this case"
            continue
        if v.new_status == "skip":
            if v.base_status == "skip":
                v.verdict, v.note = "skip", "skipped on both sides"
            else:
                v.verdict, v.note = "missing", f"skipped in the new run: {v.message}"
            continue
        if v.base_status in FAILING:
            v.note = f"fixed: {v.base_status} -> {v.new_status}"
        if not v.base_medians and not v.new_medians:
            v.note = v.note or "correctness only (no timing)"
            continue
        if not v.base_medians:
            v.verdict, v.note = "new", "timed for the first time (no base timing)"
            continue
        if not v.new_medians:
            v.verdict, v.note = "missing", "timed in base, no timing in the new run"
            continue
        if min(v.base_medians + v.new_medians) <= 0:
            v.verdict, v.note = "inconclusive", "a run reported a zero or negative time; ratios are undefined"
            continue
        _verdict.measure(v, v.base_medians, v.new_medians)
        timed.append(v)

    for v, q in zip(timed, stats.benjamini_hochberg([v.p for v in timed])):
        _verdict.decide(v, q, alpha, fdr_q, max_gate)
        if separate_runs:
            hold_back_separate(v)
    return Comparison(
        cases=verdicts,
        base_label=base_label,
        new_label=new_label,
        base_run=base.get("run", {}),
        new_run=new.get("run", {}),
        alpha=alpha,
        fdr_q=fdr_q,
        max_gate=max_gate,
        calibrated=bool(noise_floors),
        base_rows=base_rows,
        new_rows=new_rows,
        separate_runs=separate_runs,
    )


def hold_back_separate(v: CaseVerdict) -> None:
    """A timed verdict between separate runs: a regression or improvement becomes
    `inconclusive (separate runs)`, the rule's own verdict and evidence kept in the note."""
    v.separate_runs = True
    if v.verdict not in ("regression", "improvement"):
        return
    v.separate_verdict = v.verdict
    v.verdict = "inconclusive"
    v.note = (f"{v.separate_verdict} by the numbers ({v.note}), but the sides are separate runs: "
              "a drift of the machine between them reads the same; `meshgate ab` interleaves "
              "the two builds (--trust-separate-runs judges them as one A/B)")


def verdicts_json(comparison: Comparison) -> dict[str, Any]:
    """The `--json` document: {"cases": [{"id", "verdict", "ratio", "ci", "p", ...}]}."""
    rows = []
    for c in comparison.cases:
        rows.append(
            {
                "id": c.id,
                "verdict": c.verdict,
                "ratio": c.ratio,
                "ci": list(c.ci) if c.ci else None,
                "p": c.p,
                "q": c.q,
                "min_effect": c.min_effect,
                "runs_base": c.runs_base,
                "runs_new": c.runs_new,
                "runs_needed": c.runs_needed,
                "rules_out": c.rules_out,
                "wide_ci": c.wide_ci,
                "confirmed": c.confirmed,
                "level": c.level(),
                "grade": c.grade,
                "grade_note": c.grade_note,
                "looks": c.looks,
                "confirm_ratio": c.confirm_ratio,
                "confirm_ci": list(c.confirm_ci) if c.confirm_ci else None,
                "confirm_p": c.confirm_p,
                "plan_changed": c.plan_changed,
                "note": c.note,
                "separate_runs": c.separate_runs,
                "separate_verdict": c.separate_verdict,
            }
        )
    return {"exit_code": comparison.exit_code(), "headline": comparison.headline(),
            "separate_runs": comparison.separate_runs, "cases": rows}


_AB_SIDE = re.compile(r"^(?P<session>.+)-(?:base|candidate)-\d+$")


def interleaved(base_run: dict, new_run: dict) -> bool:
    """Whether two results are the sides of one interleaved A/B session (`meshgate ab` names
    each side's runs <session>-base-<n> and <session>-candidate-<n>), or one run itself."""
    if base_run.get("id") and base_run.get("id") == new_run.get("id"):
        return True
    a = _AB_SIDE.match(str(base_run.get("id", "")))
    b = _AB_SIDE.match(str(new_run.get("id", "")))
    return bool(a and b and a.group("session") == b.group("session"))
