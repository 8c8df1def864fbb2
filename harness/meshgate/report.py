"""Human reports for runs and comparisons: report.md, junit.xml and a self-contained report.html.

report.md is written to fit a CI job summary: the headline verdict first, then what needs a
person (failures, regressions with their evidence, correctness, plan changes), details last.

Metrics the plots understand (whichever a kind records):
- busbw per message size: `metrics.sizes = [{"bytes": B, "busbw_GBps": x, ...}, ...]`, or
  `metrics.busbw_GBps` as a list aligned with `metrics.bytes`, or a mapping {bytes: value};
- GEMM throughput per implementation: `metrics.impls = {impl: {"tflops": x, ...}}` or
  `metrics.tflops = {impl: x}` (a key spelled `TFLOPs`, `tflops_per_s` ... also counts).
"""

from __future__ import annotations

import sys
import json
import pathlib
import xml.etree.ElementTree as ET
from typing import Any, Iterable, Optional

from . import compare as _compare
from . import jsonfile, stats, summary, svg
from .markup import html_text, md_cell, md_code, visible
from .results import where

STATUSES = ("pass", "fail", "error", "skip")


def _counts(results: dict[str, Any]) -> dict[str, int]:
    counts = {s: 0 for s in STATUSES}
    for row in results.get("cases", []):
        counts[row.get("status", "error")] = counts.get(row.get("status", "error"), 0) + 1
    return counts


def run_exit_code(results: dict[str, Any]) -> int:
    """The results CONTRACT's exit code: 0 all pass/skip, 1 any fail, 2 any error."""
    counts = _counts(results)
    if counts.get("error"):
        return 2
    if counts.get("fail"):
        return 1
    return 0


def run_headline(results: dict[str, Any]) -> str:
    counts = _counts(results)
    verdict = {0: "PASS", 1: "FAIL", 2: "ERROR"}[run_exit_code(results)]
    summary = ", ".join(f"{counts[s]} {s}" for s in STATUSES if counts.get(s))
    return f"{verdict} ({summary or 'no cases'})"


def model_disagreement_cases(results: dict[str, Any]) -> list[dict[str, Any]]:
    """Rows whose metrics carry a non-empty `model_disagreements` list, in results order."""
    out = []
    for row in results.get("cases", []):
        items = (row.get("metrics") or {}).get("model_disagreements")
        if isinstance(items, list) and items:
            out.append(row)
    return out


# How a layout-model disagreement affects users, worst first (the mesh kind's classes; rows
# recorded before classification carry plain strings and count as unclassified).
CHANGE_CLASSES = ("new_rejection", "semantic_change", "representation_change", "relaxation")


def _change_class(item: Any) -> str:
    cls = item.get("class") if isinstance(item, dict) else None
    return cls if cls in CHANGE_CLASSES else "unclassified"


def _worst_class_rank(row: dict[str, Any]) -> int:
    order = CHANGE_CLASSES + ("unclassified",)
    return min(order.index(_change_class(i)) for i in row["metrics"]["model_disagreements"])


def disagreement_summary(results: dict[str, Any]) -> list[tuple[str, int, int, list[str]]]:
    """Per change class present, worst first: (class, configurations, disagreements, observables)."""
    out = []
    rows = model_disagreement_cases(results)
    for cls in CHANGE_CLASSES + ("unclassified",):
        configs, count, observables = 0, 0, []
        for r in rows:
            items = [i for i in r["metrics"]["model_disagreements"] if _change_class(i) == cls]
            configs += bool(items)
            count += len(items)
            for i in items:
                name = str(i.get("observable", "?")) if isinstance(i, dict) else "?"
                name = name.split("[")[0].split(" of rank ")[0]
                if name not in observables:
                    observables.append(name)
        if count:
            out.append((cls, configs, count, observables))
    return out


def _models_compared(results: dict[str, Any]) -> int:
    return sum(1 for r in results.get("cases", []) if "model_disagreements" in (r.get("metrics") or {}))


def format_disagreement(item: Any) -> str:
    if isinstance(item, dict):
        return "; ".join(f"{k}: {json.dumps(v) if not isinstance(v, str) else v}" for k, v in item.items())
    return item if isinstance(item, str) else json.dumps(item)


def _params_summary(row: dict[str, Any]) -> str:
    params = row.get("params")
    if not params:
        return ""
    text = json.dumps(params, separators=(", ", ": "))
    return text if len(text) <= 300 else text[:297] + "..."


def _time_summary(row: dict[str, Any]) -> Optional[tuple[int, float, float]]:
    """(runs, median of per-run medians, relative MAD of per-run medians) for a timed row."""
    medians = _compare.run_medians(row)
    if not medians:
        return None
    return len(medians), stats.median(medians), stats.relative_mad(medians) if len(medians) > 1 else 0.0


def _run_facts(run: dict[str, Any], code=md_code, plain=md_cell) -> list[str]:
    """Provenance of a run in words; `code` marks literal values and `plain` escapes the rest
    (Markdown by default)."""
    from .baseline import machine_class

    machine = run.get("machine") or {}
    facts = []
    if run.get("commit"):
        facts.append(f"commit {code(run['commit'])}" + (" (dirty)" if run.get("dirty") else ""))
    if run.get("backend"):
        facts.append(f"backend {code(run['backend'])}" + (f", world {run['world_size']}" if run.get("world_size") else ""))
    if machine:
        facts.append(f"machine {code(machine.get('host', '?'))} (class {code(machine_class(machine))})")
    if run.get("started"):
        facts.append(f"started {plain(run['started'])}")
    return facts


def run_markdown(results: dict[str, Any]) -> str:
    run = results.get("run", {})
    rows = results.get("cases", [])
    lines = [f"# meshgate run {md_cell(run.get('id', ''))}: {run_headline(results)}", ""]
    facts = _run_facts(run)
    if facts:
        lines += [" · ".join(facts), ""]

    failing = [r for r in rows if r.get("status") in ("fail", "error")]
    if failing:
        lines += ["## Failures", "", "| case | where | status | message |", "|---|---|---|---|"]
        for r in failing:
            lines.append(f"| {md_code(r['id'])} | {md_code(where(r)) if where(r) else ''} | "
                         f"**{md_cell(r.get('status'))}** | {md_cell(r.get('message', ''))} |")
        lines.append("")

    disagree = model_disagreement_cases(results)
    compared = _models_compared(results)
    if disagree or compared:
        lines += [f"## Layout-model disagreements ({len(disagree)} of {compared} configurations)", ""]
        if not disagree:
            lines += ["The one-level and two-level models agree on every compared configuration.", ""]
        else:
            lines += ["| change (one_level to two_level) | configurations | disagreements | observables |",
                      "|---|---:|---:|---|"]
            for cls, configs, count, observables in disagreement_summary(results):
                lines.append(f"| {cls} | {configs} | {count} | {md_cell(', '.join(observables))} |")
            lines.append("")
        for r in sorted(disagree, key=_worst_class_rank):
            items = r["metrics"]["model_disagreements"]
            lines.append(f"### {md_code(r['id'])} ({md_cell(r.get('status'))}, {len(items)} disagreement{'s' if len(items) != 1 else ''})")
            if _params_summary(r):
                lines.append(f"configuration: {md_code(_params_summary(r))}")
            lines.append("")
            lines += [f"- {md_cell(format_disagreement(item))}" for item in items]
            lines.append("")

    timed = [(r, _time_summary(r)) for r in rows]
    timed = [(r, t) for r, t in timed if t]
    if timed:
        lines += ["## Performance", "", "| case | runs | median time | run-to-run spread (MAD) |", "|---|---:|---:|---:|"]
        for r, (k, med, spread) in timed:
            lines.append(f"| {md_code(r['id'])} | {k} | {svg.format_seconds(med)} | {spread * 100:.2f} % |")
        lines.append("")

    lines += collectives_markdown(summary.collective_tables(rows))

    skipped = [r for r in rows if r.get("status") == "skip"]
    if skipped:
        lines += ["<details><summary>Skipped cases (%d)</summary>" % len(skipped), ""]
        lines += [f"- {md_code(r['id'])}: {md_cell(r.get('message', ''))}" for r in skipped]
        lines += ["", "</details>", ""]

    lines += ["<details><summary>All cases (%d)</summary>" % len(rows), "", "| case | kind | status | seconds |", "|---|---|---|---:|"]
    for r in rows:
        secs = r.get("seconds")
        secs_text = f"{secs:.3f}" if isinstance(secs, (int, float)) else ""
        lines.append(f"| {md_code(r['id'])} | {md_cell(r.get('kind', ''))} | {md_cell(r.get('status', ''))} | {secs_text} |")
    lines += ["", "</details>", ""]
    return "\n".join(lines)


def collectives_markdown(tables: list[summary.CollectiveTable]) -> list[str]:
    """The "Collectives" section: each collective case group's per-size table as nccl-tests
    prints it (the table `meshgate run` prints), under the group's title."""
    if not tables:
        return []
    lines = ["## Collectives", ""]
    for table in tables:
        measured = list(summary.MEASURED_COLUMNS)
        header = table.keys + measured + ([f"in-place {c}" for c in measured] if table.in_place else [])
        align = ["---" if key == "case" else "---:" for key in table.keys] + ["---:"] * (len(header) - len(table.keys))
        title = md_code(table.name) + (f" ({md_cell(table.about)})" if table.about else "")
        lines += [title, "", "| " + " | ".join(header) + " |",
                  "|" + "|".join(align) + "|"]
        lines += ["| " + " | ".join(md_cell(cell) for cell in row) + " |" for row in table.rows]
        lines.append("")
    return lines


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
    from .baseline import case_suite

    root = ET.Element("testsuites", name=name)
    suites: dict[str, ET.Element] = {}
    totals: dict[str, dict[str, float]] = {}
    for row in results.get("cases", []):
        suite = case_suite(row)
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
        if where(row) and status in ("fail", "error"):
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
            suite = case_id.split("/", 1)[0]
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


def _busbw_series(metrics: dict[str, Any], label: str = "") -> list[tuple[str, list[tuple[float, float]]]]:
    """busbw per size; one line per mode when the sizes were measured in and out of place
    (one line through both would zigzag between two measurements of each size)."""
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


def _metric_plots(row: dict[str, Any], label: str = "", name: Optional[str] = None) -> list[str]:
    """busbw against message size (log-scaled sizes) and TFLOP/s per implementation; titled by
    `name` (the case id unless a suite heading already names the suite)."""
    metrics = row.get("metrics") or {}
    name = name or row["id"]
    plots = []
    busbw = _busbw_series(metrics, label)
    # One message size makes a single dot, which the performance table already says.
    if len({x for _, points in busbw for x, _ in points}) >= 2:
        plots.append(svg.line_plot(busbw, f"{name}: busbw", "message size", "busbw (GB/s)"))
    bars = _tflops_by_impl(metrics)
    if bars:
        plots.append(svg.bar_chart(bars, f"{name}: TFLOP/s", "TFLOP/s"))
    return [p for p in plots if p]


def _case_name(row: dict[str, Any]) -> str:
    return str(row.get("name") or row["id"].split("/", 1)[-1])


def run_html(results: dict[str, Any]) -> str:
    run = results.get("run", {})
    rows = results.get("cases", [])
    verdict = {0: "PASS", 1: "FAIL", 2: "ERROR"}[run_exit_code(results)]
    body = [
        f"<h1>meshgate run {html_text(run.get('id', ''))} {_badge(verdict)}</h1>",
        f"<div class=\"facts\">{html_text(run_headline(results))}<br>"
        f"{' · '.join(_run_facts(run, code=lambda t: f'<code>{html_text(t)}</code>', plain=html_text))}</div>",
    ]
    failing = [r for r in rows if r.get("status") in ("fail", "error")]
    if failing:
        body.append("<h2>Failures</h2><table><tr><th>case</th><th>where</th><th>status</th><th>message</th></tr>")
        for r in failing:
            body.append(f"<tr><td><code>{html_text(r['id'])}</code></td><td><code>{html_text(where(r))}</code></td>"
                        f"<td>{_badge(r.get('status', ''))}</td><td>{html_text(r.get('message', ''))}</td></tr>")
        body.append("</table>")
    disagree = model_disagreement_cases(results)
    if disagree or _models_compared(results):
        body.append(f"<h2>Layout-model disagreements ({len(disagree)} of {_models_compared(results)} configurations)</h2>")
        if disagree:
            body.append("<table><tr><th>change (one_level to two_level)</th><th>configurations</th><th>disagreements</th><th>observables</th></tr>")
            for cls, configs, count, observables in disagreement_summary(results):
                body.append(f"<tr><td>{cls}</td><td>{configs}</td><td>{count}</td><td>{html_text(', '.join(observables))}</td></tr>")
            body.append("</table>")
        for r in sorted(disagree, key=_worst_class_rank):
            body.append(f"<h3><code>{html_text(r['id'])}</code></h3><div class=\"facts\">{html_text(_params_summary(r))}</div><ul>")
            body += [f"<li>{html_text(format_disagreement(i))}</li>" for i in r["metrics"]["model_disagreements"]]
            body.append("</ul>")
    timed = [(r, _time_summary(r)) for r in rows]
    timed = [(r, t) for r, t in timed if t]
    if timed:
        body.append("<h2>Performance</h2><table><tr><th>case</th><th>runs</th><th>median time</th><th>spread (MAD)</th></tr>")
        for r, (k, med, spread) in timed:
            body.append(
                f"<tr><td><code>{html_text(r['id'])}</code></td><td class=num>{k}</td>"
                f"<td class=num>{html_text(svg.format_seconds(med))}</td><td class=num>{spread * 100:.2f} %</td></tr>"
            )
        body.append("</table>")
    timed_ids = {r["id"] for r, _ in timed}
    plots: dict[str, list[str]] = {}  # suite -> its plots; suites and cases in results order
    for r in rows:
        suite_plots = []
        if r["id"] in timed_ids:
            suite_plots.append(svg.strip_plot([("runs", _compare.run_medians(r))],
                                              f"{_case_name(r)}: per-run medians"))
        suite_plots += _metric_plots(r, name=_case_name(r))
        if suite_plots:
            plots.setdefault(r.get("suite") or r["id"].split("/")[0], []).extend(suite_plots)
    if plots:
        body.append("<h2 id=\"plots\">Plots</h2>")
        for suite, suite_plots in plots.items():
            body.append(f"<h3>{html_text(suite)} ({len(suite_plots)})</h3>"
                        f"<div class=\"plots\">{''.join(suite_plots)}</div>")
    body.append("<h2>All cases</h2><table><tr><th>case</th><th>kind</th><th>status</th><th>message</th></tr>")
    for r in rows:
        body.append(
            f"<tr><td><code>{html_text(r['id'])}</code></td><td>{html_text(r.get('kind', ''))}</td>"
            f"<td>{_badge(r.get('status', ''))}</td><td>{html_text(r.get('message', ''))}</td></tr>"
        )
    body.append("</table>")
    return _html_page(f"meshgate run {run.get('id', '')}", body)


def write_run_report(run_dir: pathlib.Path, results: dict[str, Any]) -> list[pathlib.Path]:
    """Writes report.md, junit.xml and report.html for a finished run; returns their paths."""
    run_dir = pathlib.Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    outputs = {
        "report.md": run_markdown(results),
        "junit.xml": junit_xml(results, name=f"meshgate run {results.get('run', {}).get('id', '')}".strip()),
        "report.html": run_html(results),
    }
    written = []
    for name, text in outputs.items():
        path = run_dir / name
        path.write_text(text, encoding="utf-8")
        written.append(path)
    return written


def _fmt_ratio(v: "_compare.CaseVerdict") -> str:
    return f"{v.ratio:.3f}" if v.ratio is not None else "-"


def _fmt_ci(v: "_compare.CaseVerdict") -> str:
    return f"[{v.ci[0]:.3f}, {v.ci[1]:.3f}]" if v.ci else "-"


def _fmt_p(x: Optional[float]) -> str:
    return f"{x:.2g}" if x is not None else "-"


def _fmt_confirmation(v: "_compare.CaseVerdict") -> str:
    """The confirmation batch's verdict, ratio and CI, or '-' when there was none."""
    if v.confirm_verdict is None:
        return "-"
    ratio = f"{v.confirm_ratio:.3f}" if v.confirm_ratio is not None else "-"
    ci = f"[{v.confirm_ci[0]:.3f}, {v.confirm_ci[1]:.3f}]" if v.confirm_ci else "-"
    return f"{v.confirm_verdict} {ratio} {ci}"


def _fmt_rules_out(v: "_compare.CaseVerdict") -> str:
    """What a PASS row claims, e.g. 'no slowdown >= 1.3 %' (from the CI's upper bound)."""
    if v.rules_out is None:
        return "-"
    if v.rules_out <= 0:
        return "any slowdown"
    return f"slowdown >= {v.rules_out * 100:.1f} %"


def _evidence_text(v: "_compare.CaseVerdict") -> str:
    parts = [
        f"ratio {_fmt_ratio(v)} (95 % CI {_fmt_ci(v)})",
        f"p = {_fmt_p(v.p)}, q = {_fmt_p(v.q)}",
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


def _evidence_extra(v: "_compare.CaseVerdict") -> str:
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


def comparison_markdown(comparison: "_compare.Comparison") -> str:
    c = comparison
    lines = [f"# meshgate compare: {c.headline()}", ""]
    counts = ", ".join(f"{c.count(v)} {v}" for v in _compare.VERDICTS if c.count(v))
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
    regressions = c.by_verdict("regression")
    if regressions:
        lines += ["## Regressions", "",
                  "| case | ratio | 95 % CI | p | q | runs | gate | confirmation batch | evidence |",
                  "|---|---:|---:|---:|---:|---:|---:|---|---|"]
        for v in sorted(regressions, key=lambda v: -(v.ratio or 0)):
            lines.append(
                f"| {md_code(v.id)} | **{_fmt_ratio(v)}** | {_fmt_ci(v)} | {_fmt_p(v.p)} | {_fmt_p(v.q)} | "
                f"{v.runs_base}/{v.runs_new} | {v.min_effect * 100:.1f} % | {_fmt_confirmation(v)} | "
                f"{md_cell(_evidence_extra(v))} |"
            )
        lines.append("")
    correctness = c.by_verdict("correctness")
    if correctness:
        lines += ["## Correctness", "", "| case | change | message |", "|---|---|---|"]
        for v in correctness:
            lines.append(f"| {md_code(v.id)} | {md_cell(v.note)} | {md_cell(v.message)} |")
        lines.append("")
    plans = c.plan_changes()
    if plans:
        lines += ["## Plan changes", ""]
        for v in plans:
            lines += [f"### {md_code(v.id)} (timing verdict: {v.verdict})", "", "| base plan | new plan |", "|---|---|"]
            old, new = v.plan_base or [], v.plan_new or []
            for i in range(max(len(old), len(new))):
                a = md_code(old[i]) if i < len(old) else ""
                b = md_code(new[i]) if i < len(new) else ""
                if i < len(old) and i < len(new) and old[i] != new[i]:
                    a, b = f"**{a}**", f"**{b}**"
                lines.append(f"| {a} | {b} |")
            lines.append("")
    inconclusive = c.by_verdict("inconclusive")
    if inconclusive:
        lines += ["## Inconclusive (does not block)", "",
                  "| case | ratio | 95 % CI | p | runs | confirmation batch | runs needed | why |",
                  "|---|---:|---:|---:|---:|---|---:|---|"]
        for v in inconclusive:
            lines.append(
                f"| {md_code(v.id)} | {_fmt_ratio(v)} | {_fmt_ci(v)} | {_fmt_p(v.p)} | {v.runs_base}/{v.runs_new} | "
                f"{_fmt_confirmation(v)} | {v.runs_needed if v.runs_needed is not None else '-'} | {md_cell(v.note)} |"
            )
        lines.append("")
    improvements = c.by_verdict("improvement")
    if improvements:
        lines += ["## Improvements", "", "| case | ratio | 95 % CI | p | runs | confirmation batch |",
                  "|---|---:|---:|---:|---:|---|"]
        for v in improvements:
            lines.append(f"| {md_code(v.id)} | {_fmt_ratio(v)} | {_fmt_ci(v)} | {_fmt_p(v.p)} | {v.runs_base}/{v.runs_new} | "
                         f"{_fmt_confirmation(v)} |")
        lines.append("")
    passes = [v for v in c.by_verdict("pass") if v.rules_out is not None]
    if passes:
        wide = [v for v in passes if v.wide_ci]
        lines += ["## Passed timing (what each PASS rules out)", ""]
        if wide:
            lines += [f"{len(wide)} PASS row(s) flagged **wide CI**: the interval also admits a speed-up "
                      "past the gate, so these runs could not have told a gate-sized change apart in "
                      "that direction; more runs or a quieter machine make the claim stronger.", ""]
        lines += ["| case | ratio | 95 % CI | gate | rules out | runs | |", "|---|---:|---:|---:|---|---:|---|"]
        for v in passes:
            lines.append(f"| {md_code(v.id)} | {_fmt_ratio(v)} | {_fmt_ci(v)} | {v.min_effect * 100:.1f} % | "
                         f"{_fmt_rules_out(v)} | {v.runs_base}/{v.runs_new} | {'**wide CI**' if v.wide_ci else ''} |")
        lines.append("")
    other = c.by_verdict("new") + c.by_verdict("missing")
    if other:
        lines += ["## New and missing cases", ""]
        lines += [f"- {md_code(v.id)}: {v.verdict} ({md_cell(v.note)})" for v in other]
        lines.append("")
    lines += [
        "<details><summary>All cases (%d)</summary>" % len(c.cases),
        "",
        "| case | verdict | ratio | 95 % CI | p | runs |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for v in c.cases:
        lines.append(f"| {md_code(v.id)} | {v.level()} | {_fmt_ratio(v)} | {_fmt_ci(v)} | {_fmt_p(v.p)} | {v.runs_base}/{v.runs_new} |")
    lines += ["", "</details>", ""]
    return "\n".join(lines)


def comparison_html(comparison: "_compare.Comparison") -> str:
    c = comparison
    counts = ", ".join(f"{c.count(v)} {v}" for v in _compare.VERDICTS if c.count(v))
    body = [
        f"<h1>meshgate compare {_badge(c.headline(), c.headline_class())}</h1>",
        f"<div class=\"facts\">{html_text(counts)}<br>base <code>{html_text(c.base_label)}</code> · new <code>{html_text(c.new_label)}</code></div>",
    ]
    body.append(
        "<h2>Verdicts</h2><table><tr><th>case</th><th>verdict</th><th>ratio</th><th>95 % CI</th>"
        "<th>p</th><th>q</th><th>runs</th><th>note</th></tr>"
    )
    for verdict in _compare.VERDICT_ORDER:
        for v in c.by_verdict(verdict):
            body.append(
                f"<tr><td><code>{html_text(v.id)}</code></td><td>{_badge(v.level(), v.verdict)}</td><td class=num>{_fmt_ratio(v)}</td>"
                f"<td class=num>{_fmt_ci(v)}</td><td class=num>{_fmt_p(v.p)}</td><td class=num>{_fmt_p(v.q)}</td>"
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
    for verdict in _compare.VERDICT_ORDER:
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
    return _html_page("meshgate compare", body)


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


def attach_section(report_md: pathlib.Path, label: str, headline: str, markdown: str, details: str) -> None:
    """Adds a check's verdict to a run's report.md: one line under the title (so a CI job
    summary shows it first) and its report (`markdown`, whose own title line is dropped) as a
    section at the end, headings one level down. Nothing when report.md does not exist."""
    report_md = pathlib.Path(report_md)
    if not report_md.exists():
        return
    lines = report_md.read_text(encoding="utf-8", errors="replace").rstrip("\n").split("\n")
    verdict = f"{label}: **{headline}** (details below and in {md_code(details)})"
    insert_at = 2 if len(lines) > 1 and lines[1] == "" else 1
    lines[insert_at:insert_at] = [verdict, ""]
    section = [("#" + line) if line.startswith(("## ", "### ")) else line for line in markdown.splitlines()[1:]]
    lines += ["", f"## {label}: {headline}"] + section
    report_md.write_text("\n".join(lines).rstrip() + "\n", encoding="utf-8")


def attach_comparison(report_md: pathlib.Path, comparison: "_compare.Comparison", details: str) -> None:
    """A baseline comparison in a run's report.md (attach_section): its regressions, correctness
    failures and plan changes."""
    attach_section(report_md, "Baseline comparison", comparison.headline(), comparison_markdown(comparison), details)


def write_comparison_report(out_dir: pathlib.Path, comparison: "_compare.Comparison", prefix: str = "") -> list[pathlib.Path]:
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


def render_run_dir(target: pathlib.Path) -> tuple[pathlib.Path, list[pathlib.Path]]:
    """`meshgate report DIR`: the reports of DIR/results.json (or of a results.json given
    directly) written again beside it. A run killed before it wrote results.json is rendered
    from its results.jsonl, and results.json is written from those rows. InputError (from
    baseline) names the file when there is nothing usable."""
    from . import baseline as _baseline
    from . import results as _results

    target = pathlib.Path(target)
    run_dir = target.parent if target.is_file() else target
    path = target if target.is_file() else run_dir / "results.json"
    jsonl = run_dir / "results.jsonl"
    if not path.exists() and jsonl.exists():
        try:
            rows = _results.read_rows(jsonl)
        except jsonfile.JsonFileError as e:
            raise _baseline.InputError(str(e)) from None
        if not rows:
            raise _baseline.InputError(f"{jsonl}: no finished case to report")
        document = _results.assemble(None, rows, [], {"id": run_dir.name})
        _baseline.check_results(document, jsonl)  # before results.json is written from it
        _results.write_results(path, document)
        return run_dir, write_run_report(run_dir, document)
    if not path.exists():
        raise _baseline.InputError(f"{run_dir}: no results.json or results.jsonl: pass a run folder "
                                   "(reports/<run-id>) or a results.json")
    return run_dir, write_run_report(run_dir, _baseline.load_results(path))


def _cmd_report(args: Any) -> int:
    from . import baseline as _baseline

    try:
        run_dir, written = render_run_dir(pathlib.Path(args.dir))
    except _baseline.InputError as e:
        print(f"meshgate report: {e}", file=sys.stderr)
        return 2
    for path in written:
        print(f"report: {path}")
    return 0


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "report", help="re-render the reports (report.md, junit.xml, report.html) of a run's results",
        description="Writes report.md, junit.xml and report.html again from DIR/results.json (or "
                    "from DIR/results.jsonl when the run was killed before it wrote results.json). "
                    "Exit 0 when written, 2 on unusable input.")
    parser.add_argument("dir", metavar="DIR", help="a run folder (reports/<run-id>) or a results.json")
    parser.set_defaults(func=_cmd_report)
