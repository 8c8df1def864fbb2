"""The reports of a comparison (compare.py): report.md, report.html, junit.xml and
comparison.json, the verdict table the terminal shows, and the pieces every HTML report shares
(the page, its badges, the JUnit XML of result rows, the series of bandwidth and throughput a
row's metrics hold). A run's report.md takes the comparison, and the signal check, as a
Section. Pure text, apart from the writers at the end.

Metrics the plots understand (whichever a kind records):
- busbw per message size: `metrics.sizes = [{"bytes": B, "busbw_GBps": x, ...}, ...]`, or
  `metrics.busbw_GBps` as a list aligned with `metrics.bytes`, or a mapping {bytes: value};
- GEMM throughput per implementation: `metrics.impls = {impl: {"tflops": x, ...}}` or
  `metrics.tflops = {impl: x}` (a key spelled `TFLOPs`, `tflops_per_s` ... also counts).
"""

from __future__ import annotations

import dataclasses
import pathlib
import xml.etree.ElementTree as ET
from typing import Any, Iterable, Optional

from ..core import files, svg
from ..core import results as _results
from ..core.markup import case_column_width, html_text, md_cell, md_code, visible
from ..core.markup import summary_line as message_summary
from ..core.results import where
from ..core.tables import fmt_p, md_row, md_table_head
from . import stats
from .compare import UNJUDGED_VERDICTS, VERDICT_ORDER, VERDICTS, Comparison
from .verdict import CaseVerdict


# ---------------------------------------------------------------------------------------------
# Sections of a run's report.md


# The line below which a run's report.md is folded detail (run/report.py writes it).
DETAILS_MARK = "<!-- details -->"


@dataclasses.dataclass
class Section:
    """A check's part of a run's report.md: `label: **headline**` under the title (so a CI job
    summary shows it first) and `markdown` (whose own title line is dropped) as a section at the
    end, headings one level down; `details` names the file with the whole report."""

    label: str
    headline: str
    markdown: str
    details: str


def insert_section(report: str, section: Section) -> str:
    """report.md's text with `section` added (see Section)."""
    lines = report.rstrip("\n").split("\n")
    verdict = f"{section.label}: **{section.headline}** (details below and in {md_code(section.details)})"
    insert_at = 2 if len(lines) > 1 and lines[1] == "" else 1
    lines[insert_at:insert_at] = [verdict, ""]
    body = [("#" + line) if line.startswith(("## ", "### ")) else line
            for line in section.markdown.splitlines()[1:]]
    added = ["", f"## {section.label}: {section.headline}"] + body + [""]
    # Above the report's folded details where it marks them (run/report.py), else at the end.
    mark = next((i for i, line in enumerate(lines) if line == DETAILS_MARK), None)
    if mark is None:
        lines += added
    else:
        lines[mark:mark] = added[1:]
    return "\n".join(lines).rstrip() + "\n"


def comparison_section(comparison: Comparison, details: str) -> Section:
    """A baseline comparison as a section of a run's report.md: its regressions, correctness
    failures and plan changes."""
    return Section("Baseline comparison", comparison.headline(), comparison_markdown(comparison), details)


# ---------------------------------------------------------------------------------------------
# The terminal


def summary_line(comparison: Comparison) -> str:
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
    vw = max([13] + [len(c.level()) for c in comparison.cases])
    lines = [f"{'case':<{w}} {'verdict':<{vw}} {'ratio':>7} {'95% CI':>17} {'p':>8} {'k':>5}"]
    order = {v: i for i, v in enumerate(VERDICT_ORDER)}
    # Cases skipped on both sides say nothing about the change: one line per suite and reason.
    skipped: dict[tuple[str, str], int] = {}
    for c in comparison.cases:
        if c.verdict == "skip":
            suite = _results.suite_of(c.id)
            reason = (c.message or "").splitlines()[0] if c.message else "no reason given"
            skipped[(suite, reason)] = skipped.get((suite, reason), 0) + 1
    for c in sorted(comparison.cases, key=lambda c: order.get(c.verdict, 99)):
        if c.verdict == "skip":
            continue
        ratio = f"{c.ratio:.3f}" if c.ratio is not None else "-"
        ci = f"[{c.ci[0]:.3f}, {c.ci[1]:.3f}]" if c.ci else "-"
        p = fmt_p(c.p)
        k = f"{c.runs_base}/{c.runs_new}" if (c.runs_base or c.runs_new) else "-"
        lines.append(f"{c.id:<{w}} {c.level():<{vw}} {ratio:>7} {ci:>17} {p:>8} {k:>5}")
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
    lines.append(summary_line(comparison))
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------
# HTML and JUnit shared by every report


_CSS = """
body{font:14px/1.45 system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:24px auto;max-width:1100px;color:#1d1d1f;padding:0 16px}
h1{font-size:22px;margin:0 0 4px} h2{font-size:17px;margin:28px 0 8px;border-bottom:1px solid #ddd;padding-bottom:4px}
h3{font-size:14px;margin:16px 0 4px} code{font:12px ui-monospace,Menlo,Consolas,monospace;background:#f4f4f6;padding:1px 4px;border-radius:3px}
table{border-collapse:collapse;margin:6px 0;font-size:13px} th,td{border:1px solid #ddd;padding:4px 8px;text-align:left;vertical-align:top}
th{background:#f4f4f6} td.num{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
.badge{display:inline-block;padding:2px 10px;border-radius:10px;color:#fff;font-weight:600}
.PASS,.pass{background:#2e7d32} .FAIL,.fail,.regression,.correctness{background:#c62828} .ERROR,.error{background:#6a1b9a}
.skip,.missing,.new{background:#757575} .inconclusive,.INCONCLUSIVE{background:#ef6c00} .improvement{background:#1565c0}
.facts{color:#555;margin-bottom:10px} .plots{display:flex;flex-wrap:wrap;gap:12px}
svg.chart{background:#fff;border:1px solid #e3e3e6;border-radius:4px}
svg .title{font-size:12px;font-weight:600} svg .tick{font-size:10px;fill:#555} svg .label{font-size:11px;fill:#333}
svg .axis{stroke:#888} svg .grid{stroke:#eee}
pre{background:#f7f7f9;padding:8px;overflow-x:auto;font-size:12px}
"""


def _html_page(title: str, body: Iterable[str]) -> str:
    return (
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
        f"<title>{html_text(title)}</title><style>{_CSS}</style></head><body>\n" + "\n".join(body) + "\n</body></html>\n"
    )


def _badge(text: str, cls: Optional[str] = None) -> str:
    return f'<span class="badge {html_text(cls or text)}">{html_text(text)}</span>'


def _junit_time(row: dict[str, Any]) -> str:
    secs = row.get("seconds")
    return f"{secs:.6f}" if isinstance(secs, (int, float)) else "0"


def _make_xml_safe(root: ET.Element) -> None:
    """Every text and attribute value under `root` with the characters XML 1.0 forbids (and
    the ones a CI page would act on) written as visible escapes: ElementTree itself writes a
    control character through and leaves a file no XML parser accepts."""
    for element in root.iter():
        if element.text:
            element.text = visible(element.text, multiline=True)
        for key, value in element.attrib.items():
            element.set(key, visible(value, multiline=True))


def junit_xml(results: dict[str, Any], verdicts: Optional[dict[str, Any]] = None, name: str = "meshgate") -> str:
    """JUnit XML: one testsuite per suite, one testcase per case; fail -> failure, error -> error,
    skip -> skipped. With `verdicts` (case id -> CaseVerdict) a regression or correctness verdict
    is a failure too and an inconclusive one is reported in system-out."""
    root = ET.Element("testsuites", name=name)
    suites: dict[str, ET.Element] = {}
    totals: dict[str, dict[str, float]] = {}
    for row in results.get("cases", []):
        suite = _results.suite_of(row)
        if suite not in suites:
            suites[suite] = ET.SubElement(root, "testsuite", name=suite)
            totals[suite] = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0, "time": 0.0}
        t = totals[suite]
        case_name = row.get("name") or row["id"].split("/", 1)[-1]
        tc = ET.SubElement(suites[suite], "testcase", name=case_name, classname=suite, time=_junit_time(row))
        if row.get("file"):
            # The attributes CI viewers (GitLab, Jenkins, GitHub annotations) link to the source.
            tc.set("file", str(row["file"]))
            if isinstance(row.get("line"), int):
                tc.set("line", str(row["line"]))
        t["tests"] += 1
        t["time"] += float(row.get("seconds") or 0)
        status, message = row.get("status"), row.get("message", "") or ""
        if where(row) and status in _results.FAILING:
            message = f"{where(row)}: {message}"
        v = verdicts.get(row["id"]) if verdicts else None
        if status == "fail":
            ET.SubElement(tc, "failure", message=message[:500] or "wrong result", type="fail").text = message
            t["failures"] += 1
        elif status == "error":
            ET.SubElement(tc, "error", message=message[:500] or "error", type="error").text = message
            t["errors"] += 1
        elif status == "skip":
            ET.SubElement(tc, "skipped", message=message[:500])
            t["skipped"] += 1
        elif status != "pass":
            ET.SubElement(tc, "error", message=f"unknown status {status!r}", type="error")
            t["errors"] += 1
        elif v is not None and v.verdict == "regression":
            ET.SubElement(tc, "failure", message=f"performance {v.level()}: {v.note}", type="regression").text = _evidence_text(v)
            t["failures"] += 1
        if v is not None and v.verdict in ("inconclusive", "improvement") or (v is not None and v.plan_changed):
            out = ET.SubElement(tc, "system-out")
            out.text = f"{v.verdict}: {v.note}" + (f"\nplan changed: {v.plan_base} -> {v.plan_new}" if v.plan_changed else "")
    if verdicts:
        # Cases only in the base have no row in the new results; they still appear, as skipped.
        present = {r["id"] for r in results.get("cases", [])}
        for case_id, v in verdicts.items():
            if case_id in present:
                continue
            suite = _results.suite_of(case_id)
            if suite not in suites:
                suites[suite] = ET.SubElement(root, "testsuite", name=suite)
                totals[suite] = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0, "time": 0.0}
            tc = ET.SubElement(suites[suite], "testcase", name=case_id.split("/", 1)[-1], classname=suite, time="0")
            ET.SubElement(tc, "skipped", message=f"{v.verdict}: {v.note}")
            totals[suite]["tests"] += 1
            totals[suite]["skipped"] += 1
    grand = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0, "time": 0.0}
    for suite, el in suites.items():
        for key, value in totals[suite].items():
            el.set(key, f"{value:.6f}" if key == "time" else str(int(value)))
            grand[key] += value
    for key, value in grand.items():
        root.set(key, f"{value:.6f}" if key == "time" else str(int(value)))
    _make_xml_safe(root)
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


def _size_series(metrics: dict[str, Any], key_hint: str = "busbw",
                 inplace: Optional[bool] = None) -> list[tuple[float, float]]:
    sizes = metrics.get("sizes")
    points = []
    if isinstance(sizes, list):
        for entry in sizes:
            if not isinstance(entry, dict):
                continue
            if inplace is not None and bool(entry.get("inplace", False)) != inplace:
                continue
            size = entry.get("bytes", entry.get("size"))
            value = next((v for k, v in entry.items() if k.lower().startswith(key_hint)), None)
            if isinstance(size, (int, float)) and isinstance(value, (int, float)):
                points.append((float(size), float(value)))
        return points
    for key, value in metrics.items():
        if not key.lower().startswith(key_hint):
            continue
        if isinstance(value, dict):
            for size, v in value.items():
                try:
                    points.append((float(size), float(v)))
                except (TypeError, ValueError):
                    continue
        elif isinstance(value, list) and isinstance(metrics.get("bytes"), list) and len(value) == len(metrics["bytes"]):
            points += [(float(s), float(v)) for s, v in zip(metrics["bytes"], value) if isinstance(v, (int, float))]
        if points:
            break
    return points


def _tflops_by_impl(metrics: dict[str, Any]) -> list[tuple[str, float]]:
    def tflops_of(d: dict[str, Any]) -> Optional[float]:
        for k, v in d.items():
            if "tflop" in k.lower() and isinstance(v, (int, float)):
                return float(v)
        return None

    impls = metrics.get("impls")
    if isinstance(impls, dict):
        bars = [(name, tflops_of(m)) for name, m in impls.items() if isinstance(m, dict)]
        return [(n, v) for n, v in bars if v is not None]
    for k, v in metrics.items():
        if "tflop" in k.lower() and isinstance(v, dict):
            return [(n, float(x)) for n, x in v.items() if isinstance(x, (int, float))]
    return []


def one_rank_groups(metrics: dict[str, Any]) -> bool:
    """Whether a collective ran over groups of one rank (metrics.group_size 1)."""
    return metrics.get("group_size") == 1


def _busbw_series(metrics: dict[str, Any], label: str = "") -> list[tuple[str, list[tuple[float, float]]]]:
    """busbw per size; one line per mode when the sizes were measured in and out of place
    (one line through both would zigzag between two measurements of each size). None for a
    collective over groups of one rank, which moves nothing between ranks: its bus bandwidth is
    zero by definition and its algorithm bandwidth the speed of a local copy, or of nothing."""
    if one_rank_groups(metrics):
        return []
    sizes = metrics.get("sizes")
    modes = sorted({bool(e["inplace"]) for e in sizes if isinstance(e, dict) and "inplace" in e}) \
        if isinstance(sizes, list) else []
    if len(modes) < 2:
        points = _size_series(metrics, "busbw")
        return [(label or "busbw", points)] if points else []
    series = []
    for mode in modes:
        points = _size_series(metrics, "busbw", inplace=mode)
        name = "in-place" if mode else "out-of-place"
        if points:
            series.append((f"{label} {name}".strip(), points))
    return series


# ---------------------------------------------------------------------------------------------
# A comparison's report


def _fmt_ratio(v: CaseVerdict) -> str:
    return f"{v.ratio:.3f}" if v.ratio is not None else "-"


def _fmt_ci(v: CaseVerdict) -> str:
    return f"[{v.ci[0]:.3f}, {v.ci[1]:.3f}]" if v.ci else "-"


def _fmt_confirmation(v: CaseVerdict) -> str:
    """The confirmation batch's verdict, ratio and CI, or '-' when there was none."""
    if v.confirm_verdict is None:
        return "-"
    ratio = f"{v.confirm_ratio:.3f}" if v.confirm_ratio is not None else "-"
    ci = f"[{v.confirm_ci[0]:.3f}, {v.confirm_ci[1]:.3f}]" if v.confirm_ci else "-"
    return f"{v.confirm_verdict} {ratio} {ci}"


def _fmt_rules_out(v: CaseVerdict) -> str:
    """What a PASS row claims, e.g. 'no slowdown >= 1.3 %' (from the CI's upper bound)."""
    if v.rules_out is None:
        return "-"
    if v.rules_out <= 0:
        return "any slowdown"
    return f"slowdown >= {v.rules_out * 100:.1f} %"


def _evidence_text(v: CaseVerdict) -> str:
    parts = [
        f"ratio {_fmt_ratio(v)} (95 % CI {_fmt_ci(v)})",
        f"p = {fmt_p(v.p)}, q = {fmt_p(v.q)}",
        f"runs {v.runs_base} base / {v.runs_new} new",
        f"minimum effect {v.min_effect * 100:.1f} %" if v.min_effect is not None else "",
        f"noise floor {v.noise_floor * 100:.2f} %" if v.noise_floor is not None else "no calibration",
    ]
    if v.base_medians:
        parts.append(f"base median {svg.format_seconds(stats.median(v.base_medians))}")
    if v.new_medians:
        parts.append(f"new median {svg.format_seconds(stats.median(v.new_medians))}")
    if v.confirmed is not None:
        parts.append("confirmed by a fresh batch" if v.confirmed else "not confirmed by a fresh batch")
    if v.grade:
        parts.append(v.grade + (f": {v.grade_note}" if v.grade_note else ""))
    return "; ".join(p for p in parts if p)


def _evidence_extra(v: CaseVerdict) -> str:
    """What the regression table's own columns do not show: medians, noise floor, confirmation."""
    parts = []
    if v.base_medians and v.new_medians:
        parts.append(f"median {svg.format_seconds(stats.median(v.base_medians))} -> {svg.format_seconds(stats.median(v.new_medians))}")
    parts.append(f"noise floor {v.noise_floor * 100:.2f} %" if v.noise_floor is not None else "no calibration")
    if v.confirmed is not None:
        parts.append("confirmed by a fresh batch" if v.confirmed else "not confirmed by a fresh batch")
    if v.grade:
        parts.append(f"**{v.grade}**" + (f": {v.grade_note}" if v.grade_note else ""))
    if v.plan_changed:
        parts.append("plan changed (see below)")
    return "; ".join(parts)


def comparison_markdown(comparison: Comparison) -> str:
    c = comparison
    lines = [f"# meshgate {md_cell(c.command)}: {c.headline()}", ""]
    counts = ", ".join(f"{c.count(v)} {v}" for v in VERDICTS if c.count(v))
    lines += [f"{counts or 'no cases'} · base {md_code(c.base_label)} · new {md_code(c.new_label)}", ""]
    gate = ("max(2 %, 3 x calibrated noise floor)" if c.calibrated
            else "2 % (no calibration for this machine class)")
    lines += [
        f"Decision: a regression (improvement) is a median ratio past the gate {gate}, significant by "
        f"Mann-Whitney U on per-run medians (one-sided alpha = {c.alpha} in its direction; p below is "
        f"two-sided) with Benjamini-Hochberg q <= {c.fdr_q}, with a 95 % CI of the ratio that excludes 1.0, "
        f"confirmed by a fresh batch that meets the same rule where one ran. Where adaptive runs added runs, "
        f"the looks share alpha (the first at alpha / 2). "
        f"PASS needs the 95 % CI's upper bound within the gate, a gate of at most "
        f"{c.max_gate * 100:g} % (--max-gate) and a CI whose lower bound is above {1 / (1 + c.max_gate):.3f}; "
        "everything else is inconclusive and does not block. The rule in full: docs/gate.md.",
        "",
    ]
    if c.separate_runs:
        held = [v for v in c.cases if v.separate_verdict]
        lines += [
            f"**Separate runs.** Base and new are two separate runs, not the sides of one interleaved "
            f"A/B: a drift of the machine between them reads as a change of the code, so no timing "
            f"difference is more than `inconclusive (separate runs)` here ({len(held)} case(s) held "
            f"back). `meshgate ab` interleaves the two builds; `--trust-separate-runs` judges these "
            f"runs as if they were one A/B.",
            "",
        ]
    regressions = c.by_verdict("regression")
    if regressions:
        lines += ["## Regressions", ""]
        lines += md_table_head(["case", "ratio", "95 % CI", "p", "q", "runs", "gate",
                                "confirmation batch", "evidence"], "lrrrrrr")
        for v in sorted(regressions, key=lambda v: -(v.ratio or 0)):
            lines.append(md_row([md_code(v.id), f"**{_fmt_ratio(v)}**", _fmt_ci(v), fmt_p(v.p),
                                 fmt_p(v.q), f"{v.runs_base}/{v.runs_new}",
                                 f"{v.min_effect * 100:.1f} %", _fmt_confirmation(v),
                                 md_cell(_evidence_extra(v))]))
        lines.append("")
    correctness = c.by_verdict("correctness")
    if correctness:
        lines += ["## Correctness", ""] + md_table_head(["case", "change", "message"])
        for v in correctness:
            lines.append(md_row([md_code(v.id), md_cell(v.note), md_cell(message_summary(v.message))]))
        lines.append("")
    plans = c.plan_changes()
    if plans:
        lines += ["## Plan changes", ""]
        for v in plans:
            lines += [f"### {md_code(v.id)} (timing verdict: {v.verdict})", ""]
            lines += md_table_head(["base plan", "new plan"])
            old, new = v.plan_base or [], v.plan_new or []
            for i in range(max(len(old), len(new))):
                a = md_code(old[i]) if i < len(old) else ""
                b = md_code(new[i]) if i < len(new) else ""
                if i < len(old) and i < len(new) and old[i] != new[i]:
                    a, b = f"**{a}**", f"**{b}**"
                lines.append(md_row([a, b]))
            lines.append("")
    inconclusive = c.by_verdict("inconclusive")
    if inconclusive:
        lines += ["## Inconclusive (does not block)", ""]
        lines += md_table_head(["case", "ratio", "95 % CI", "p", "runs", "confirmation batch",
                                "runs needed", "why"], "lrrrrlr")
        for v in inconclusive:
            lines.append(md_row([md_code(v.id), _fmt_ratio(v), _fmt_ci(v), fmt_p(v.p),
                                 f"{v.runs_base}/{v.runs_new}", _fmt_confirmation(v),
                                 f"{v.runs_needed if v.runs_needed is not None else '-'}",
                                 md_cell(v.note)]))
        lines.append("")
    improvements = c.by_verdict("improvement")
    if improvements:
        lines += ["## Improvements", ""]
        lines += md_table_head(["case", "ratio", "95 % CI", "p", "runs", "confirmation batch"],
                               "lrrrr")
        for v in improvements:
            lines.append(md_row([md_code(v.id), _fmt_ratio(v), _fmt_ci(v), fmt_p(v.p),
                                 f"{v.runs_base}/{v.runs_new}", _fmt_confirmation(v)]))
        lines.append("")
    passes = [v for v in c.by_verdict("pass") if v.rules_out is not None]
    if passes:
        wide = [v for v in passes if v.wide_ci]
        lines += ["## Passed timing (what each PASS rules out)", ""]
        if wide:
            lines += [f"{len(wide)} PASS row(s) flagged **wide CI**: the interval also admits a speed-up "
                      "past the gate, so these runs could not have told a gate-sized change apart in "
                      "that direction; more runs or a quieter machine make the claim stronger.", ""]
        lines += md_table_head(["case", "ratio", "95 % CI", "gate", "rules out", "runs", ""],
                               "lrrrlr")
        for v in passes:
            lines.append(md_row([md_code(v.id), _fmt_ratio(v), _fmt_ci(v),
                                 f"{v.min_effect * 100:.1f} %", _fmt_rules_out(v),
                                 f"{v.runs_base}/{v.runs_new}", "**wide CI**" if v.wide_ci else ""]))
        lines.append("")
    other = c.by_verdict("new") + c.by_verdict("missing")
    if other:
        lines += ["## New and missing cases", ""]
        lines += [f"- {md_code(v.id)}: {v.verdict} ({md_cell(v.note)})" for v in other]
        lines.append("")
    lines += ["<details><summary>All cases (%d)</summary>" % len(c.cases), ""]
    lines += md_table_head(["case", "verdict", "ratio", "95 % CI", "p", "runs"], "llrrrr")
    for v in c.cases:
        lines.append(md_row([md_code(v.id), v.level(), _fmt_ratio(v), _fmt_ci(v), fmt_p(v.p),
                             f"{v.runs_base}/{v.runs_new}"]))
    lines += ["", "</details>", ""]
    return "\n".join(lines)


def comparison_html(comparison: Comparison) -> str:
    c = comparison
    counts = ", ".join(f"{c.count(v)} {v}" for v in VERDICTS if c.count(v))
    body = [
        f"<h1>meshgate {html_text(c.command)} {_badge(c.headline(), c.headline_class())}</h1>",
        f"<div class=\"facts\">{html_text(counts)}<br>base <code>{html_text(c.base_label)}</code> · new <code>{html_text(c.new_label)}</code></div>",
    ]
    body.append(
        "<h2>Verdicts</h2><table><tr><th>case</th><th>verdict</th><th>ratio</th><th>95 % CI</th>"
        "<th>p</th><th>q</th><th>runs</th><th>note</th></tr>"
    )
    for verdict in VERDICT_ORDER:
        for v in c.by_verdict(verdict):
            body.append(
                f"<tr><td><code>{html_text(v.id)}</code></td><td>{_badge(v.level(), v.verdict)}</td><td class=num>{_fmt_ratio(v)}</td>"
                f"<td class=num>{_fmt_ci(v)}</td><td class=num>{fmt_p(v.p)}</td><td class=num>{fmt_p(v.q)}</td>"
                f"<td class=num>{v.runs_base}/{v.runs_new}</td><td>{html_text(v.note)}</td></tr>"
            )
    body.append("</table>")
    plans = c.plan_changes()
    if plans:
        body.append("<h2>Plan changes</h2>")
        for v in plans:
            body.append(
                f"<h3><code>{html_text(v.id)}</code></h3><table><tr><th>base plan</th><th>new plan</th></tr>"
                f"<tr><td><pre>{html_text(chr(10).join(map(str, v.plan_base or [])))}</pre></td>"
                f"<td><pre>{html_text(chr(10).join(map(str, v.plan_new or [])))}</pre></td></tr></table>"
            )
    plots = []
    for verdict in VERDICT_ORDER:
        for v in c.by_verdict(verdict):
            if v.base_medians or v.new_medians:
                title = f"{v.id} ({v.verdict}, ratio {_fmt_ratio(v)})"
                plots.append(svg.strip_plot([("base", v.base_medians), ("new", v.new_medians)], title))
    if plots:
        body.append("<h2>Per-run medians, base vs new</h2><div class=\"plots\">" + "".join(plots) + "</div>")
    metric_plots = []
    for v in c.cases:
        metric_plots += _metric_comparison_plots(v.id, c.base_rows.get(v.id), c.new_rows.get(v.id))
    if metric_plots:
        body.append("<h2>Bandwidth and throughput, base vs new</h2><div class=\"plots\">" + "".join(metric_plots) + "</div>")
    return _html_page(f"meshgate {c.command}", body)


def _metric_comparison_plots(case_id: str, base: Optional[dict[str, Any]], new: Optional[dict[str, Any]]) -> list[str]:
    sides = [(label, (row or {}).get("metrics") or {}) for label, row in (("base", base), ("new", new)) if row]
    plots = []
    series = [line for label, m in sides for line in _busbw_series(m, label)]
    if series:
        plots.append(svg.line_plot(series, f"{case_id}: busbw vs size", "message size", "busbw (GB/s)"))
    bars, colors = [], []
    for label, m in sides:
        for impl, value in _tflops_by_impl(m):
            bars.append((f"{impl} ({label})", value))
            colors.append(svg.PALETTE[0 if label == "base" else 1])
    if bars:
        plots.append(svg.bar_chart(bars, f"{case_id}: TFLOP/s per implementation", "TFLOP/s", width=520, colors=colors))
    return [p for p in plots if p]


def write_comparison_report(out_dir: pathlib.Path, comparison: Comparison, prefix: str = "") -> list[pathlib.Path]:
    """Writes <prefix>report.md, <prefix>junit.xml and <prefix>report.html for a comparison."""
    out_dir = pathlib.Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    verdicts = {v.id: v for v in comparison.cases}
    # The JUnit view of a comparison: the new side's rows, judged by their verdicts.
    rows = []
    for v in comparison.cases:
        if v.new_status is None:
            continue
        rows.append({"id": v.id, "status": v.new_status, "message": v.message})
    outputs = {
        f"{prefix}report.md": comparison_markdown(comparison),
        f"{prefix}junit.xml": junit_xml({"cases": rows}, verdicts, name="meshgate compare"),
        f"{prefix}report.html": comparison_html(comparison),
    }
    written = []
    for name, text in outputs.items():
        path = out_dir / name
        path.write_text(text, encoding="utf-8")
        written.append(path)
    return written


def write_comparison(out_dir: pathlib.Path, comparison: Comparison, new_results: Optional[dict], prefix: str = "") -> list[pathlib.Path]:
    """Writes <prefix>report.md, junit.xml, report.html and comparison.json into out_dir.

    With a prefix (used when comparing inside a run directory that already has the run's own
    report) the files are named e.g. `baseline-report.md`.
    """
    out_dir = pathlib.Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    data = comparison.to_json()
    path = out_dir / f"{prefix}comparison.json"
    files.write_json_atomic(path, data)
    written.append(path)
    if new_results is not None and not prefix:
        path = out_dir / "results.json"
        _results.write_results(path, new_results)
        written.append(path)
    written += write_comparison_report(out_dir, comparison, prefix=prefix)
    return written


