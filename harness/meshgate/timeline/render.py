"""The timeline's renderers, pure text: the history's terminal tables (changes_table,
series_table), its report.md and report.html with one SVG plot per series (series_svg), and a
bisection's revert.md (revert_markdown)."""

from __future__ import annotations

import math
import pathlib
from typing import Any, Optional, Sequence

from ..core import svg
from ..core.markup import case_column_width, html_text, md_cell, pct
from ..core.results import FAILING, suite_of
from ..core.tables import fmt_p, md_row, md_table, md_table_head
from ..gate.verdict import CaseVerdict
from .bisection import Recommendation, ci_text, short_line
from .series import Change, Series, ShortSeries, short_series


# ---------------------------------------------------------------------------------------------
# The history on the terminal


def _fmt_ratio(r: Optional[float]) -> str:
    return f"{r:.3f}" if isinstance(r, (int, float)) and math.isfinite(r) else "-"


def changes_table(changes: list[Change], series_count: int, short: Sequence[ShortSeries] = ()) -> str:
    """The change points as a table, then the series whose timing was too short to judge."""
    lines = []
    if not changes:
        lines.append(f"no change points in {series_count} series")
    else:
        w = case_column_width(c.case for c in changes)
        lines.append(f"{'case':<{w}} {'kind':<7} {'first bad':<12} {'last good':<12} {'ratio':>7} {'p':>8}  detail")
        for c in changes:
            lines.append(f"{c.case:<{w}} {c.kind:<7} {c.commit[:12]:<12} {(c.last_good or '-')[:12]:<12} "
                         f"{_fmt_ratio(c.ratio):>7} {fmt_p(c.p):>8}  {c.detail}")
            if len({x.machine for x in changes}) > 1:
                lines.append(f"    machine {c.machine}")
        lines.append(f"{len(changes)} change point(s) in {series_count} series")
    if short:
        lines.append(f"{len(short)} series too short to judge a change in timing:")
        w = case_column_width(s.case for s in short)
        machines = len({s.machine for s in short}) > 1
        for s in short:
            lines.append(f"{s.case:<{w}} {s.describe()}" + (f" (machine {s.machine})" if machines else ""))
    return "\n".join(lines)


def _date(text: str) -> str:
    return text[:10] if text else ""


def _minute(text: str) -> str:
    """'2026-11-26 07:15' of a run's ISO start time."""
    return text[:16].replace("T", " ") if text else ""


def series_table(series_list: list[Series], changes: list[Change]) -> str:
    lines = []
    by_series: dict[tuple[str, str], list[Change]] = {}
    for c in changes:
        by_series.setdefault((c.case, c.machine), []).append(c)
    if len(series_list) == 1:
        s = series_list[0]
        marks = {}
        for c in by_series.get((s.case, s.machine), []):
            marks.setdefault(c.position, []).append(f"<- {c.kind}" + (f" x{c.ratio:.3f}" if c.ratio else ""))
        lines.append(f"{s.case} on {s.machine}")
        lines.append(f"{'date':<10} {'commit':<12} {'status':<6} {'runs':>4} {'median':>10}")
        for i, c in enumerate(s.commits):
            value = svg.format_seconds(c.value) if c.value is not None else "-"
            lines.append(f"{_date(c.started):<10} {c.commit[:12]:<12} {c.status:<6} {len(c.medians):>4} "
                         f"{value:>10}  {' '.join(marks.get(i, []))}".rstrip())
        return "\n".join(lines)
    w = case_column_width(s.case for s in series_list)
    lines.append(f"{'case':<{w}} {'commits':>7} {'last':<10} {'status':<6} {'median':>10}  changes")
    for s in series_list:
        last = s.commits[-1]
        value = next((svg.format_seconds(c.value) for c in reversed(s.commits) if c.value is not None), "-")
        cs = by_series.get((s.case, s.machine), [])
        summary = ", ".join(f"{c.kind}@{c.commit[:8]}" for c in cs[-3:]) + (" ..." if len(cs) > 3 else "")
        lines.append(f"{s.case:<{w}} {len(s.commits):>7} {_date(last.started):<10} {last.status:<6} {value:>10}  {summary}")
    if len({s.machine for s in series_list}) > 1:
        lines.append("(series of different machine classes are listed separately)")
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------
# The history's reports


_CHANGE_COLOURS = {"slower": "#c62828", "faster": "#1565c0", "status": "#6a1b9a", "plan": "#ef6c00"}
SHORT_SHA = 7  # characters of a commit on the plots' axis, as `git log --oneline` shows it


def series_svg(series: Series, changes: list[Change], width: int = 760, height: int = 260) -> str:
    """The per-commit medians of one series (per-run medians faint behind them), failing commits
    as crosses on the axis, and every change point as a dashed line before its first bad
    commit; hovering a point or a line shows its commit and date (SVG <title>)."""
    commits = series.commits
    left, right, top, bottom = 70, 20, 30, 40
    values = [v for c in commits for v in c.medians]
    if values:
        lo, hi = min(values), max(values)
    else:
        lo, hi = 0.0, 1.0
    pad = (hi - lo) * 0.1 or abs(hi) * 0.05 or 1.0
    lo, hi = max(0.0, lo - pad), hi + pad
    n = max(len(commits), 2)
    plot_w, plot_h = width - left - right, height - top - bottom

    def px(i: float) -> float:
        return left + (i + 0.5) / n * plot_w

    def py(v: float) -> float:
        return top + (1 - (v - lo) / (hi - lo)) * plot_h

    title = f"{series.case} ({series.machine})"
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" role="img" '
        f'aria-label="{html_text(title)}" class="chart series">',
        f'<text x="{left}" y="18" class="title">{html_text(title)}</text>',
        f'<line x1="{left}" y1="{top + plot_h}" x2="{width - right}" y2="{top + plot_h}" class="axis"/>',
        f'<line x1="{left}" y1="{top}" x2="{left}" y2="{top + plot_h}" class="axis"/>',
    ]
    for t in svg._nice_ticks(lo, hi, 4):
        parts.append(f'<line x1="{left}" y1="{py(t):.1f}" x2="{width - right}" y2="{py(t):.1f}" class="grid"/>')
        parts.append(f'<text x="{left - 6}" y="{py(t) + 4:.1f}" class="tick" text-anchor="end">{html_text(svg.format_seconds(t))}</text>')
    # Points are labelled by commit, which tells them apart where a date would not (several
    # runs a day); the date and the full hash are in the label's tooltip.
    for i in svg.label_positions(len(commits), plot_w, SHORT_SHA):
        c = commits[i]
        parts.append(f'<text x="{px(i):.1f}" y="{top + plot_h + 16}" class="tick commit" text-anchor="middle">'
                     f'<title>{html_text(c.commit)} ({html_text(_minute(c.started))})</title>'
                     f'{html_text(c.commit[:SHORT_SHA])}</text>')
    parts.append(f'<text x="{left + plot_w / 2:.1f}" y="{height - 6}" class="label" text-anchor="middle">'
                 f'commits in run order (median time per commit)</text>')
    for c in changes:
        x = px(c.position - 0.5)
        colour = _CHANGE_COLOURS.get(c.kind, "#333")
        how = f" x{c.ratio:.3f}" if c.ratio else ""
        p = f", p={fmt_p(c.p)}" if c.p is not None else ""
        parts.append(
            f'<line x1="{x:.1f}" y1="{top}" x2="{x:.1f}" y2="{top + plot_h}" stroke="{colour}" stroke-width="2" '
            f'stroke-dasharray="5,3" class="change change-{html_text(c.kind)}" data-commit="{html_text(c.commit)}">'
            f'<title>{html_text(c.kind)}{html_text(how)}{html_text(p)}: first bad {html_text(c.commit)} '
            f'({html_text(_date(commits[c.position].started))}), last good {html_text(c.last_good or "-")}'
            f'{" - " + html_text(c.detail) if c.detail else ""}</title></line>')
        parts.append(f'<text x="{x + 3:.1f}" y="{top + 10}" class="tick" fill="{colour}">{html_text(c.kind)}</text>')
    path = [f"{px(i):.1f},{py(c.value):.1f}" for i, c in enumerate(commits) if c.value is not None]
    if len(path) > 1:
        parts.append(f'<polyline points="{" ".join(path)}" fill="none" stroke="#4e79a7" stroke-width="1" '
                     'stroke-opacity="0.6"/>')
    for i, c in enumerate(commits):
        tip = f"{c.commit} ({_date(c.started)}) {c.status}"
        for v in c.medians:
            parts.append(f'<circle cx="{px(i):.1f}" cy="{py(v):.1f}" r="2" fill="#4e79a7" fill-opacity="0.25"/>')
        if c.value is not None:
            parts.append(
                f'<circle cx="{px(i):.1f}" cy="{py(c.value):.1f}" r="3.5" fill="#4e79a7" class="point">'
                f'<title>{html_text(tip)}: median {html_text(svg.format_seconds(c.value))} of {len(c.medians)} run(s)</title></circle>')
        elif c.status in FAILING:
            y = top + plot_h - 6
            parts.append(
                f'<text x="{px(i):.1f}" y="{y:.1f}" text-anchor="middle" fill="#c62828" class="failed">x'
                f'<title>{html_text(tip)}{": " + html_text(c.message) if c.message else ""}</title></text>')
    parts.append("</svg>")
    return "".join(parts)


_CSS = """
body{font:14px/1.45 system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:24px auto;max-width:1100px;color:#1d1d1f;padding:0 16px}
h1{font-size:22px;margin:0 0 4px} h2{font-size:16px;margin:26px 0 8px;border-bottom:1px solid #ddd;padding-bottom:4px}
table{border-collapse:collapse;margin:6px 0;font-size:13px} th,td{border:1px solid #ddd;padding:4px 8px;text-align:left;vertical-align:top}
th{background:#f4f4f6} td.num{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
code{font:12px ui-monospace,Menlo,Consolas,monospace;background:#f4f4f6;padding:1px 4px;border-radius:3px}
.facts{color:#555;margin-bottom:10px}
svg.chart{background:#fff;border:1px solid #e3e3e6;border-radius:4px}
svg .title{font-size:12px;font-weight:600} svg .tick{font-size:10px;fill:#555} svg .label{font-size:11px;fill:#333}
svg .axis{stroke:#888} svg .grid{stroke:#eee} svg .failed{font:bold 12px sans-serif}
"""


def report_markdown(db_path: pathlib.Path, series_list: list[Series], changes: list[Change]) -> str:
    lines = [f"# meshgate history", "", f"Database `{db_path}`: {len(series_list)} series "
             f"(case x machine class), {len(changes)} change point(s).", ""]
    if changes:
        lines += ["## Change points", ""]
        lines += md_table_head(["case", "kind", "first bad", "last good", "ratio", "p", "detail"],
                               "llllrr")
        for c in changes:
            lines.append(md_row([md_cell(c.case), f"{c.kind}", f"`{c.commit[:12]}`",
                                 f"`{(c.last_good or '-')[:12]}`", _fmt_ratio(c.ratio), fmt_p(c.p),
                                 md_cell(c.detail)]))
        lines.append("")
    by_series: dict[tuple[str, str], list[Change]] = {}
    for c in changes:
        by_series.setdefault((c.case, c.machine), []).append(c)
    lines += ["## Series", ""]
    lines += md_table_head(["case", "machine", "commits", "first", "last", "last status",
                            "last median", "changes"], "llrlllrr")
    for s in series_list:
        value = next((svg.format_seconds(c.value) for c in reversed(s.commits) if c.value is not None), "-")
        lines.append(md_row([md_cell(s.case), md_cell(s.machine), f"{len(s.commits)}",
                             _date(s.commits[0].started), _date(s.commits[-1].started),
                             f"{s.commits[-1].status}", value,
                             f"{len(by_series.get((s.case, s.machine), []))}"]))
    short = short_series(series_list, changes)
    if short:
        lines += ["", f"Too short to judge a change in timing ({len(short)} series):", ""]
        lines += [f"- {md_cell(s.case)} ({md_cell(s.machine)}): {s.describe()}" for s in short]
    lines += ["", "Plots: report.html (one per series; hover a point for its commit and date)."]
    return "\n".join(lines) + "\n"


def report_html(db_path: pathlib.Path, series_list: list[Series], changes: list[Change]) -> str:
    by_series: dict[tuple[str, str], list[Change]] = {}
    for c in changes:
        by_series.setdefault((c.case, c.machine), []).append(c)
    body = [f"<h1>meshgate history</h1>",
            f'<div class="facts">database <code>{html_text(db_path)}</code>: {len(series_list)} series, '
            f"{len(changes)} change point(s). Points are per-commit medians of the per-run medians; "
            f"faint dots the per-run medians; dashed lines the change points (before the first bad "
            f"commit); crosses failing commits.</div>"]
    for s in series_list:
        cs = by_series.get((s.case, s.machine), [])
        body.append(f"<h2>{html_text(s.case)}</h2>")
        body.append(f'<div class="facts">{html_text(s.machine)}, {len(s.commits)} commit(s), '
                    f"{html_text(_date(s.commits[0].started))} to {html_text(_date(s.commits[-1].started))}</div>")
        body.append(series_svg(s, cs))
        if cs:
            body.append("<table><tr><th>kind</th><th>first bad</th><th>last good</th><th>ratio</th>"
                        "<th>p</th><th>detail</th></tr>")
            for c in cs:
                body.append(f"<tr><td>{html_text(c.kind)}</td><td><code>{html_text(c.commit)}</code></td>"
                            f"<td><code>{html_text(c.last_good or '-')}</code></td><td class=\"num\">{_fmt_ratio(c.ratio)}</td>"
                            f"<td class=\"num\">{fmt_p(c.p)}</td><td>{html_text(c.detail)}</td></tr>")
            body.append("</table>")
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>meshgate history</title>"
            f"<style>{_CSS}</style></head><body>\n" + "\n".join(body) + "\n</body></html>\n")


def write_report(out_dir: pathlib.Path, db_path: pathlib.Path, series_list: list[Series],
                 changes: list[Change]) -> list[pathlib.Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for name, text in (("report.md", report_markdown(db_path, series_list, changes)),
                       ("report.html", report_html(db_path, series_list, changes))):
        path = out_dir / name
        path.write_text(text)
        written.append(path)
    return written


# ---------------------------------------------------------------------------------------------
# revert.md


def _fmt(x: Optional[float], spec: str = ".3f") -> str:
    return format(x, spec) if isinstance(x, (int, float)) else "-"


def revert_markdown(doc: dict[str, Any], info: Optional[dict[str, str]], rec: Recommendation,
                    perf: list[CaseVerdict], status: list[dict[str, Any]],
                    signal_changes: dict[str, list[str]], machine: dict[str, Any]) -> str:
    """revert.md: the recommendation with its evidence, or why there is none. `doc` is the
    bisection's JSON document, `info` the culprit's commit (sha, subject, author, date)."""
    ev = doc["evidence"]
    culprit = doc["culprit"]
    lines: list[str] = []
    if rec.revert:
        lines += [f"# Revert {culprit[:12]}: {info.get('subject', '') if info else ''}".rstrip(), "",
                  f"**Recommendation: revert `{culprit[:12]}`.** {rec.why}", "", "```",
                  f"git revert {culprit}", "```", ""]
    else:
        lines += ["# No revert recommendation", "", rec.why, ""]
    if culprit and info:
        lines += ["## The commit", ""] + md_table(
            ["", ""], [["commit", f"`{culprit}`"], ["subject", md_cell(info.get("subject", ""))],
                       ["author", md_cell(info.get("author", ""))], ["date", md_cell(info.get("date", ""))],
                       ["parent (tested good)", f"`{ev.get('parent') or '-'}`"]]) + [""]
    if perf:
        k = ev.get("revert_runs")
        lines += [f"## Culprit vs parent: interleaved A/B, k = {k} runs per side, then a fresh batch", "",
                  *md_table_head(["case", "verdict", "runs", "ratio", "95 % CI", "p", "confirmation ratio",
                                  "confirmation CI", "p", "gate", "noise floor"])]
        for v in perf:
            floor = pct(v.noise_floor) if v.noise_floor is not None else "not calibrated"
            lines.append(md_row([f"`{v.id}`", f"{v.level()}{' (confirmed)' if v.confirmed else ''}",
                                 f"{v.runs_base}/{v.runs_new}", _fmt(v.ratio), ci_text(v.ci), fmt_p(v.p),
                                 _fmt(v.confirm_ratio), ci_text(v.confirm_ci), fmt_p(v.confirm_p),
                                 pct(v.min_effect or 0), floor]))
        lines += ["", "Ratio = culprit / parent of the medians of per-run medians (> 1 is slower); the gate is "
                  "max(2 %, 3 x the calibrated noise floor). A regression is revert-grade when its CI's lower "
                  "end lies above 1 + gate in both batches."]
        lines += [f"- `{v.id}`: not revert-grade: {v.grade_note}" for v in perf if v.grade == "not revert-grade"]
        lines.append("")
    if status:
        lines += ["## Correctness: culprit vs parent", ""]
        lines += md_table_head(["case", "parent", "culprit", "message"])
        for s in status:
            lines.append(md_row([f"`{s['id']}`", f"{s.get('parent_status')}", f"{s.get('culprit_status')}",
                                 md_cell(short_line(s.get("message", ""), 300))]))
        lines.append("")
        for s in status:
            if s.get("message"):
                lines += [f"`{s['id']}` at the culprit:", "", "```", s["message"].rstrip(), "```", ""]
    if machine:
        lines += ["## Machine", "", f"- host: {machine.get('host', '-')}", f"- cpu: {machine.get('cpu', '-')}",
                  f"- machine class: `{machine.get('class', '-')}`"]
        if machine.get("gpus"):
            lines.append(f"- gpus: {machine['gpus']}")
        if machine.get("backend"):
            lines.append(f"- backend: {machine['backend']}")
        lines.append("")
    if culprit and (perf or status):
        lines += ["## Deterministic signals that changed (parent -> culprit)", ""]
        if signal_changes:
            for case_id, changes in signal_changes.items():
                lines.append(f"- `{case_id}`:")
                lines += [f"  {line}" for line in changes]
        else:
            lines.append("None of the targets' deterministic signals (status, plan, bytes, modeled cost, "
                         "algorithm) changed: the difference is in the time alone.")
        lines.append("")
    lines += ["## Bisection", "",
              f"- good `{doc['good']}`, bad `{doc['bad']}`: {ev['commits']} commit(s) in good..bad"
              + (" (first-parent chain: the range has merges)" if ev.get("first_parent") else ""),
              f"- tested {ev['tested']} commit(s), endpoints included (bound ceil(log2 N) + 2 = {ev['bound']}); "
              f"{ev['builds']} build(s)",
              f"- runs per side: {ev['k']}, adaptive up to {ev['max_runs']} for an inconclusive case; "
              f"culprit vs parent {ev['revert_runs']}; seed {ev.get('seed')}"]
    if doc["skipped"]:
        lines.append(f"- skipped (could not be built or judged): {', '.join(c[:12] for c in doc['skipped'])}")
    unjudged = ev.get("endpoint_cases") or []
    if not culprit and ev.get("suspects"):
        lines.append(f"- the first bad commit is one of: {', '.join(c[:12] for c in ev['suspects'])}")
    targets = ev.get("targets") or []
    if targets:
        lines.append("- targets: " + ", ".join(f"`{t['id']}` ({t['kind']})" for t in targets))
    if ev.get("unexplained"):
        lines.append(f"- not explained by the culprit: {', '.join(ev['unexplained'])} "
                     f"(bisect again with --good {culprit[:12] if culprit else doc['good'][:12]})")
    lines += [""] + md_table_head(["#", "commit", "role", "verdict", "ratio", "95 % CI", "p", "reason"])
    for i, step in enumerate(doc["steps"], 1):
        lines.append(md_row([f"{i}", f"`{step['commit'][:12]}`", f"{step.get('role', 'step')}",
                             f"{step['verdict']}", _fmt(step.get("ratio")), ci_text(step.get("ci")),
                             fmt_p(step.get("p")), md_cell(step["reason"])]))
    if unjudged:
        lines += ["", "## Endpoint cases that were not bisected", "",
                  "Selected cases that did not become targets because good against bad could not be judged, "
                  "or that were left out (skipped, missing, failing on both): a regression may hide here.", "",
                  *md_table_head(["case", "verdict", "runs", "ratio", "95 % CI", "why"])]
        skipped: dict[tuple[str, str], int] = {}
        for c in unjudged:
            if c["verdict"] == "skip":  # skipped on both sides: one line per suite and reason
                key = (suite_of(c["id"]), short_line(c.get("message") or c.get("note", ""), 200))
                skipped[key] = skipped.get(key, 0) + 1
                continue
            runs = f"{c['runs'][0]}/{c['runs'][1]}" if c.get("runs") and any(c["runs"]) else "-"
            lines.append(md_row([f"`{c['id']}`", f"{c['verdict']}", runs, _fmt(c.get("ratio")),
                                 ci_text(c.get("ci")), md_cell(short_line(c.get("note", ""), 300))]))
        for (suite, reason), n in sorted(skipped.items()):
            lines.append(md_row([f"`{suite}/*` ({n} case{'s' if n != 1 else ''})", "skip", "-", "-", "-",
                                 f"skipped on both sides: {md_cell(reason)}"]))
    return "\n".join(lines) + "\n"
