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
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as _dt
import pathlib
import re
import sys
from typing import Any, Optional

from . import baseline as _baseline
from . import build
from . import signals as _signals
from . import results as _results
from . import schema as _schema
from . import stats
from . import verdict as _verdict
from .verdict import CaseVerdict
from .markup import case_column_width, pct

VERDICTS = ("pass", "regression", "improvement", "inconclusive", "new", "missing", "correctness", "skip")
# Verdicts in the order a reader wants them: what needs action first.
VERDICT_ORDER = ("regression", "correctness", "inconclusive", "improvement", "missing", "new", "skip", "pass")
# Verdicts that keep a comparison without regressions from being a PASS: a case that could not
# be judged, or that the new run no longer measures, has not passed.
UNJUDGED_VERDICTS = ("inconclusive", "missing")
FAILING_STATUSES = ("fail", "error")


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
    median = stats.finite(metric.get("median")) if isinstance(metric, dict) else None
    return [] if median is None else [median]


def _finite(values: list) -> list[float]:
    return [x for x in map(stats.finite, values) if x is not None]


def compare_results(
    base: dict[str, Any],
    new: dict[str, Any],
    noise_floors: Optional[dict[str, float]] = None,
    alpha: float = stats.ALPHA,
    fdr_q: float = stats.FDR_Q,
    base_label: str = "base",
    new_label: str = "new",
    max_gate: float = stats.MAX_GATE,
) -> Comparison:
    """Pure comparison of two results documents; the order of cases follows `new`, then missing.

    `noise_floors` maps case ids to calibrated noise floors."""
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
        if v.new_status in FAILING_STATUSES:
            v.verdict = "correctness"
            if b is None or v.base_status in FAILING_STATUSES:
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
        if v.base_status in FAILING_STATUSES:
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
    )


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
            }
        )
    return {"exit_code": comparison.exit_code(), "headline": comparison.headline(), "cases": rows}


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
            raise _baseline.InputError(f"{explicit}: calibration file does not exist")
        return _baseline.load_calibration(explicit)
    if base_path is not None:
        beside = pathlib.Path(base_path).parent / _baseline.CALIBRATION_FILE
        if beside.exists():
            return _baseline.load_calibration(beside)
    mclass = machine_class or _baseline.results_machine_class(new)
    return _baseline.load_calibration(pathlib.Path(baselines_root or _baseline.default_baselines()) / mclass / _baseline.CALIBRATION_FILE)


def write_comparison(out_dir: pathlib.Path, comparison: Comparison, new_results: Optional[dict], prefix: str = "") -> list[pathlib.Path]:
    """Writes <prefix>report.md, junit.xml, report.html and comparison.json into out_dir.

    With a prefix (used when comparing inside a run directory that already has the run's own
    report) the files are named e.g. `baseline-report.md`.
    """
    from . import report  # report imports this module for its data types

    out_dir = pathlib.Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    data = comparison.to_json()
    path = out_dir / f"{prefix}comparison.json"
    _results.write_json_atomic(path, data)
    written.append(path)
    if new_results is not None and not prefix:
        path = out_dir / "results.json"
        _results.write_results(path, new_results)
        written.append(path)
    written += report.write_comparison_report(out_dir, comparison, prefix=prefix)
    return written


def compare_with_baseline(results_path: pathlib.Path, baseline_dir: pathlib.Path, out_dir: pathlib.Path,
                          max_gate: float = stats.MAX_GATE) -> int:
    """`meshgate run --baseline DIR`: compares a finished run with the baseline files of its
    suites in DIR, writes baseline-report.md/.html, baseline-junit.xml and
    baseline-comparison.json into out_dir, adds the verdict to out_dir/report.md when the run's
    report is there, and returns the exit code of `meshgate compare`. Suites without a
    baseline file make their cases `new`."""
    try:
        new = _baseline.load_results(results_path)
        baseline_dir = pathlib.Path(baseline_dir)
        if not baseline_dir.is_dir():
            raise _baseline.InputError(
                f"{baseline_dir}: baseline directory does not exist: create it with "
                f"`meshgate baseline update {results_path}`"
            )
        suites = sorted({_baseline.case_suite(r) for r in new["cases"]})
        own_class = baseline_dir / _baseline.results_machine_class(new)
        if not any((baseline_dir / f"{s}.json").exists() for s in suites) and own_class.is_dir():
            # Given the baselines root rather than one machine class: use this machine's.
            baseline_dir = own_class
        base, lacking = _baseline.load_baseline_dir(baseline_dir, suites)
        floors = _baseline.load_calibration(baseline_dir / _baseline.CALIBRATION_FILE)
    except _baseline.InputError as e:
        print(f"meshgate compare: {e}", file=sys.stderr)
        return 2
    comparison = compare_results(base, new, floors, base_label=str(baseline_dir), new_label=str(results_path),
                                 max_gate=max_gate)
    write_comparison(out_dir, comparison, None, prefix="baseline-")
    from . import report

    report.attach_comparison(pathlib.Path(out_dir) / "report.md", comparison, "baseline-report.md")
    if lacking:
        print(f"no baseline in {baseline_dir} for suite(s): {', '.join(lacking)} (their cases are 'new')")
    print(_summary_line(comparison))
    return comparison.exit_code()


def _summary_line(comparison: Comparison) -> str:
    """The headline, then the counts of the verdicts it does not already name."""
    named = {"FAIL": ("regression", "correctness"), "INCONCLUSIVE": UNJUDGED_VERDICTS}.get(
        comparison.headline_class(), ())
    counts = ", ".join(f"{comparison.count(v)} {v}" for v in VERDICTS if comparison.count(v) and v not in named)
    plans = len(comparison.plan_changes())
    extra = f", {plans} plan change{'s' if plans != 1 else ''}" if plans else ""
    if not comparison.cases:
        counts = "no cases"
    details = (counts + extra).lstrip(", ")
    return f"compare: {comparison.headline()}" + (f" ({details})" if details else "")


def format_table(comparison: Comparison) -> str:
    """Plain-text verdict table for the terminal."""
    w = case_column_width(c.id for c in comparison.cases)
    lines = [f"{'case':<{w}} {'verdict':<13} {'ratio':>7} {'95% CI':>17} {'p':>8} {'k':>5}"]
    order = {v: i for i, v in enumerate(VERDICT_ORDER)}
    # Cases skipped on both sides say nothing about the change: one line per suite and reason.
    skipped: dict[tuple[str, str], int] = {}
    for c in comparison.cases:
        if c.verdict == "skip":
            suite = c.id.split("/", 1)[0]
            reason = (c.message or "").splitlines()[0] if c.message else "no reason given"
            skipped[(suite, reason)] = skipped.get((suite, reason), 0) + 1
    for c in sorted(comparison.cases, key=lambda c: order.get(c.verdict, 99)):
        if c.verdict == "skip":
            continue
        ratio = f"{c.ratio:.3f}" if c.ratio is not None else "-"
        ci = f"[{c.ci[0]:.3f}, {c.ci[1]:.3f}]" if c.ci else "-"
        p = f"{c.p:.2g}" if c.p is not None else "-"
        k = f"{c.runs_base}/{c.runs_new}" if (c.runs_base or c.runs_new) else "-"
        lines.append(f"{c.id:<{w}} {c.verdict:<13} {ratio:>7} {ci:>17} {p:>8} {k:>5}")
        if c.verdict == "pass" and c.rules_out is not None:
            wide = "; wide CI" if c.wide_ci else ""
            lines.append(f"    no regression >= {max(c.rules_out, 0.0005) * 100:.1f} % (gate {c.min_effect * 100:.1f} %){wide}")
        elif c.note:
            lines.append(f"    {c.note}")
        if c.confirm_verdict is not None:
            ci = f"[{c.confirm_ci[0]:.3f}, {c.confirm_ci[1]:.3f}]" if c.confirm_ci else "-"
            ratio = f"{c.confirm_ratio:.3f}" if c.confirm_ratio is not None else "-"
            lines.append(f"    confirmation batch: {c.confirm_verdict}, ratio {ratio}, 95% CI {ci}")
        if c.plan_changed:
            lines.append(f"    plan changed: {c.plan_base} -> {c.plan_new}")
    for (suite, reason), n in sorted(skipped.items()):
        lines.append(f"{suite}: {n} case{'s' if n != 1 else ''} skipped on both sides ({reason})")
    lines.append(_summary_line(comparison))
    return "\n".join(lines)


def default_report_dir(prefix: str) -> pathlib.Path:
    """reports/<prefix>-<UTC time>, claimed: two commands in the same second get two folders."""
    stamp = _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%d-%H%M%S")
    return _results.claim_run_dir(build.source_root() / "reports", f"{prefix}-{stamp}")[1]


_AB_SIDE = re.compile(r"^(?P<session>.+)-(?:base|candidate)-\d+$")


def interleaved(base_run: dict, new_run: dict) -> bool:
    """Whether two results are the sides of one interleaved A/B session (`meshgate ab` names
    each side's runs <session>-base-<n> and <session>-candidate-<n>), or one run itself."""
    if base_run.get("id") and base_run.get("id") == new_run.get("id"):
        return True
    a = _AB_SIDE.match(str(base_run.get("id", "")))
    b = _AB_SIDE.match(str(new_run.get("id", "")))
    return bool(a and b and a.group("session") == b.group("session"))


def _cmd_compare(args: argparse.Namespace) -> int:
    base_path, new_path = pathlib.Path(args.base), pathlib.Path(args.new)
    try:
        base = _baseline.load_results(base_path)
        new = _baseline.load_results(new_path)
        floors = calibration_for(
            new,
            base_path=base_path,
            explicit=pathlib.Path(args.calibration) if args.calibration else None,
            machine_class=args.machine_class,
        )
    except _baseline.InputError as e:
        print(f"meshgate compare: {e}", file=sys.stderr)
        return 2
    comparison = compare_results(
        base, new, floors, base_label=str(base_path), new_label=str(new_path), max_gate=args.max_gate
    )
    common = set(comparison.base_rows) & set(comparison.new_rows)
    if not common:
        # Every case would be "new" or "missing": nothing was judged, which must not pass a gate.
        print(f"meshgate compare: nothing to compare: {base_path} ({len(comparison.base_rows)} "
              f"case(s)) and {new_path} ({len(comparison.new_rows)} case(s)) have no case in "
              f"common", file=sys.stderr)
        return 2
    print(format_table(comparison))
    if not interleaved(base.get("run") or {}, new.get("run") or {}):
        print(f"meshgate compare: warning: {base_path} and {new_path} come from separate runs "
              f"(ids {(base.get('run') or {}).get('id', '?')!r} and "
              f"{(new.get('run') or {}).get('id', '?')!r}), not one interleaved A/B: a drift of "
              f"the machine between them reads as a change of the code; `meshgate ab` "
              f"interleaves the two builds", file=sys.stderr)
    if args.json:
        json_path = pathlib.Path(args.json)
        json_path.parent.mkdir(parents=True, exist_ok=True)
        verdicts = verdicts_json(comparison)
        _schema.check_if_asked(verdicts, "verdicts-1", json_path)
        _results.write_json_atomic(json_path, verdicts)
    out_dir = pathlib.Path(args.out) if args.out else default_report_dir("compare")
    write_comparison(out_dir, comparison, new)
    print(f"report: {out_dir / 'report.md'}")
    return comparison.exit_code()


def max_gate_fraction(text: str) -> float:
    """--max-gate accepts a fraction (0.1) or a percentage (10 or 10%)."""
    value = text.strip().rstrip("%").strip()
    try:
        number = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number such as 0.1 or 10%") from None
    fraction = number / 100.0 if text.strip().endswith("%") or number >= 1.0 else number
    if not 0.0 < fraction < 1.0:
        raise argparse.ArgumentTypeError(f"{text!r}: the gate must lie between 0 and 100 %")
    if fraction < stats.MIN_EFFECT:
        raise argparse.ArgumentTypeError(
            f"{text!r}: no gate is narrower than the {pct(stats.MIN_EFFECT)} minimum effect "
            "(docs/gate.md), so nothing could pass")
    return fraction


def add_max_gate_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--max-gate", type=max_gate_fraction, default=stats.MAX_GATE, metavar="G",
                        help="the largest regression you accept to miss: PASS needs the gate (max(2 %%, "
                             "3 x noise floor)) at most G and the CI's upper bound within the gate "
                             "(a fraction or a percentage; default 10%%)")


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "compare", help="verdict per case between two results files (exit 1 on regression)"
    )
    parser.add_argument("base", metavar="BASE.json", help="results.json of the reference run (or a baseline)")
    parser.add_argument("new", metavar="NEW.json", help="results.json of the run under test")
    parser.add_argument("--json", metavar="VERDICTS.json", help="also write the verdicts as JSON")
    parser.add_argument("--out", metavar="DIR", help="report directory (default: reports/compare-<time>)")
    parser.add_argument("--calibration", metavar="FILE", help="calibration.json with noise floors")
    parser.add_argument("--machine-class", help="machine class whose calibration applies")
    add_max_gate_argument(parser)
    parser.set_defaults(func=_cmd_compare)
