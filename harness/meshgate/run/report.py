"""A run's reports: report.md, junit.xml and a self-contained report.html, written once from
its results and the sections of the checks made against it (the deterministic signals and the
stored timing of `--baseline`, or the nightly signal check), and `meshgate report`'s rendering
of a run folder again.

report.md is written to fit a CI job summary: the headline verdict first, then what needs a
person (failures, regressions with their evidence, correctness, plan changes), details last.
The plots and the page are the gate's (gate/render.py); the metrics they understand are listed
there.
"""

from __future__ import annotations

import json
import pathlib
from typing import Any, Optional, Sequence

from ..core import jsonfile, svg
from ..core import results as _results
from ..core.markup import html_text, md_cell, md_code, md_code_block, summary_line
from ..core.results import FAILING, STATUSES, InputError, machine_class, where
from ..core.tables import md_row, md_table_head
from ..gate import render, stats
from ..gate.compare import run_medians
from ..gate.render import Section
from . import summary


def run_headline(results: dict[str, Any]) -> str:
    counts = _results.status_counts(results.get("cases", []))
    verdict = {0: "PASS", 1: "FAIL", 2: "ERROR"}[_results.exit_code(results.get("cases", []))]
    said = ", ".join(f"{counts[s]} {s}" for s in STATUSES if counts.get(s))
    return f"{verdict} ({said or 'no cases'})"


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
    medians = run_medians(row)
    if not medians:
        return None
    return len(medians), stats.median(medians), stats.relative_mad(medians) if len(medians) > 1 else 0.0


def _run_facts(run: dict[str, Any], code=md_code, plain=md_cell) -> list[str]:
    """Provenance of a run in words; `code` marks literal values and `plain` escapes the rest
    (Markdown by default)."""
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


# The line of report.md below which everything is folded detail; the checks' sections go
# above it (an HTML comment: invisible where the Markdown is rendered).
DETAILS_MARK = render.DETAILS_MARK


def _spread_text(runs: int, spread: float) -> str:
    """The run-to-run spread of a timed row: only where there are two runs or more to spread."""
    return f"{spread * 100:.2f} %" if runs >= 2 else "- (1 run)"


def run_markdown(results: dict[str, Any], sections: Sequence[Section] = ()) -> str:
    """report.md of a run, with the `sections` of the checks made against it (render.Section),
    each verdict under the title in reverse order of the sections (the last check's first)."""
    text = _run_markdown(results)
    for section in sections:
        text = render.insert_section(text, section)
    return text


def _run_markdown(results: dict[str, Any]) -> str:
    run = results.get("run", {})
    rows = results.get("cases", [])
    lines = [f"# meshgate run {md_cell(run.get('id', ''))}: {run_headline(results)}", ""]
    facts = _run_facts(run)
    if facts:
        lines += [" · ".join(facts), ""]

    failing = [r for r in rows if r.get("status") in FAILING]
    if failing:
        lines += ["## Failures", ""] + md_table_head(["case", "where", "status", "message"])
        for r in failing:
            lines.append(md_row([md_code(r["id"]), md_code(where(r)) if where(r) else "",
                                 f"**{md_cell(r.get('status'))}**",
                                 md_cell(summary_line(str(r.get("message", ""))))]))
        lines.append("")
        # A message of several lines (every rank's account, a traceback) keeps its lines.
        for r in failing:
            message = str(r.get("message", ""))
            if "\n" in message.strip():
                lines += [f"{md_code(r['id'])} ({md_cell(r.get('status'))}), the whole message:", "",
                          md_code_block(message), ""]

    timed = [(r, _time_summary(r)) for r in rows]
    timed = [(r, t) for r, t in timed if t]
    if timed:
        lines += ["## Performance", ""]
        lines += md_table_head(["case", "runs", "median time", "run-to-run spread (MAD)"], "lrrr")
        for r, (k, med, spread) in timed:
            lines.append(md_row([md_code(r["id"]), f"{k}", svg.format_seconds(med),
                                 _spread_text(k, spread)]))
        lines.append("")

    # Everything below is detail, folded: the checks' sections go above it (DETAILS_MARK).
    lines += [DETAILS_MARK, ""]
    tables = summary.collective_tables(rows)
    if tables:
        lines += [f"<details><summary>Collectives: per-size tables as nccl-tests prints them "
                  f"({len(tables)} group{'s' if len(tables) != 1 else ''})</summary>", ""]
        lines += collectives_markdown(tables)
        lines += ["</details>", ""]

    disagree = model_disagreement_cases(results)
    compared = _models_compared(results)
    if disagree or compared:
        failing_ids = {r["id"] for r in failing}
        in_failing = sum(1 for r in disagree if r["id"] in failing_ids)
        lines += [f"<details><summary>Layout-model disagreements ({len(disagree)} of {compared} "
                  f"configurations; {in_failing} in failing cases)</summary>", "",
                  f"## Layout-model disagreements ({len(disagree)} of {compared} configurations)", ""]
        if not disagree:
            lines += ["The one-level and two-level models agree on every compared configuration.", ""]
        else:
            lines += md_table_head(["change (one_level to two_level)", "configurations",
                                    "disagreements", "observables"], "lrr")
            for cls, configs, count, observables in disagreement_summary(results):
                lines.append(md_row([f"{cls}", f"{configs}", f"{count}",
                                     md_cell(", ".join(observables))]))
            lines.append("")
        for r in sorted(disagree, key=_worst_class_rank):
            items = r["metrics"]["model_disagreements"]
            lines.append(f"### {md_code(r['id'])} ({md_cell(r.get('status'))}, {len(items)} disagreement{'s' if len(items) != 1 else ''})")
            if _params_summary(r):
                lines.append(f"configuration: {md_code(_params_summary(r))}")
            lines.append("")
            lines += [f"- {md_cell(format_disagreement(item))}" for item in items]
            lines.append("")
        lines += ["</details>", ""]

    skipped = [r for r in rows if r.get("status") == "skip"]
    if skipped:
        lines += ["<details><summary>Skipped cases (%d)</summary>" % len(skipped), ""]
        lines += [f"- {md_code(r['id'])}: {md_cell(r.get('message', ''))}" for r in skipped]
        lines += ["", "</details>", ""]

    lines += ["<details><summary>All cases (%d)</summary>" % len(rows), ""]
    lines += md_table_head(["case", "kind", "status", "seconds"], "lllr")
    for r in rows:
        secs = r.get("seconds")
        secs_text = f"{secs:.3f}" if isinstance(secs, (int, float)) else ""
        lines.append(md_row([md_code(r["id"]), md_cell(r.get("kind", "")),
                             md_cell(r.get("status", "")), secs_text]))
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
        align = "".join("l" if key == "case" else "r" for key in table.keys)
        align += "r" * (len(header) - len(table.keys))
        title = md_code(table.name) + (f" ({md_cell(table.about)})" if table.about else "")
        lines += [title, ""] + md_table_head(header, align)
        lines += [md_row(md_cell(cell) for cell in row) for row in table.rows]
        lines.append("")
    return lines


def _metric_plots(row: dict[str, Any], label: str = "", name: Optional[str] = None) -> list[str]:
    """busbw against message size (log-scaled sizes) and TFLOP/s per implementation; titled by
    `name` (the case id unless a suite heading already names the suite)."""
    metrics = row.get("metrics") or {}
    name = name or row["id"]
    plots = []
    busbw = render._busbw_series(metrics, label)
    # One message size makes a single dot, which the performance table already says.
    if len({x for _, points in busbw for x, _ in points}) >= 2:
        plots.append(svg.line_plot(busbw, f"{name}: busbw", "message size", "busbw (GB/s)"))
    bars = render._tflops_by_impl(metrics)
    if bars:
        plots.append(svg.bar_chart(bars, f"{name}: TFLOP/s", "TFLOP/s"))
    return [p for p in plots if p]


def _case_name(row: dict[str, Any]) -> str:
    return str(row.get("name") or row["id"].split("/", 1)[-1])


def _html_message(row: dict[str, Any]) -> str:
    """A row's message in an HTML cell: one line as text; several (every rank's account, a
    traceback) as their summary line above the whole message, its lines kept."""
    message = str(row.get("message", ""))
    if "\n" not in message.strip():
        return html_text(message)
    return f"{html_text(summary_line(message))}<pre>{html_text(message.strip())}</pre>"


def run_html(results: dict[str, Any]) -> str:
    run = results.get("run", {})
    rows = results.get("cases", [])
    verdict = {0: "PASS", 1: "FAIL", 2: "ERROR"}[_results.exit_code(rows)]
    body = [
        f"<h1>meshgate run {html_text(run.get('id', ''))} {render._badge(verdict)}</h1>",
        f"<div class=\"facts\">{html_text(run_headline(results))}<br>"
        f"{' · '.join(_run_facts(run, code=lambda t: f'<code>{html_text(t)}</code>', plain=html_text))}</div>",
    ]
    failing = [r for r in rows if r.get("status") in FAILING]
    if failing:
        body.append("<h2>Failures</h2><table><tr><th>case</th><th>where</th><th>status</th><th>message</th></tr>")
        for r in failing:
            body.append(f"<tr><td><code>{html_text(r['id'])}</code></td><td><code>{html_text(where(r))}</code></td>"
                        f"<td>{render._badge(r.get('status', ''))}</td><td>{_html_message(r)}</td></tr>")
        body.append("</table>")
    timed = [(r, _time_summary(r)) for r in rows]
    timed = [(r, t) for r, t in timed if t]
    if timed:
        body.append("<h2>Performance</h2><table><tr><th>case</th><th>runs</th><th>median time</th><th>spread (MAD)</th></tr>")
        for r, (k, med, spread) in timed:
            body.append(
                f"<tr><td><code>{html_text(r['id'])}</code></td><td class=num>{k}</td>"
                f"<td class=num>{html_text(svg.format_seconds(med))}</td><td class=num>{_spread_text(k, spread)}</td></tr>"
            )
        body.append("</table>")
    timed_ids = {r["id"] for r, _ in timed}
    plots: dict[str, list[str]] = {}  # suite -> its plots; suites and cases in results order
    for r in rows:
        suite_plots = []
        if r["id"] in timed_ids:
            suite_plots.append(svg.strip_plot([("runs", run_medians(r))],
                                              f"{_case_name(r)}: per-run medians"))
        suite_plots += _metric_plots(r, name=_case_name(r))
        if suite_plots:
            plots.setdefault(_results.suite_of(r), []).extend(suite_plots)
    if plots:
        body.append("<h2 id=\"plots\">Plots</h2>")
        for suite, suite_plots in plots.items():
            body.append(f"<h3>{html_text(suite)} ({len(suite_plots)})</h3>"
                        f"<div class=\"plots\">{''.join(suite_plots)}</div>")
    disagree = model_disagreement_cases(results)
    if disagree or _models_compared(results):
        body.append(f"<details><summary>Layout-model disagreements ({len(disagree)} of "
                    f"{_models_compared(results)} configurations)</summary>")
        if disagree:
            body.append("<table><tr><th>change (one_level to two_level)</th><th>configurations</th><th>disagreements</th><th>observables</th></tr>")
            for cls, configs, count, observables in disagreement_summary(results):
                body.append(f"<tr><td>{cls}</td><td>{configs}</td><td>{count}</td><td>{html_text(', '.join(observables))}</td></tr>")
            body.append("</table>")
        for r in sorted(disagree, key=_worst_class_rank):
            body.append(f"<h3><code>{html_text(r['id'])}</code></h3><div class=\"facts\">{html_text(_params_summary(r))}</div><ul>")
            body += [f"<li>{html_text(format_disagreement(i))}</li>" for i in r["metrics"]["model_disagreements"]]
            body.append("</ul>")
        body.append("</details>")
    body.append("<h2>All cases</h2><table><tr><th>case</th><th>kind</th><th>status</th><th>message</th></tr>")
    for r in rows:
        body.append(
            f"<tr><td><code>{html_text(r['id'])}</code></td><td>{html_text(r.get('kind', ''))}</td>"
            f"<td>{render._badge(r.get('status', ''))}</td><td>{_html_message(r)}</td></tr>"
        )
    body.append("</table>")
    return render._html_page(f"meshgate run {run.get('id', '')}", body)


def write_run_report(run_dir: pathlib.Path, results: dict[str, Any],
                     sections: Sequence[Section] = ()) -> list[pathlib.Path]:
    """Writes report.md (with the checks' `sections`), junit.xml and report.html for a finished
    run; returns their paths."""
    run_dir = pathlib.Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    outputs = {
        "report.md": run_markdown(results, sections),
        "junit.xml": render.junit_xml(results, name=f"meshgate run {results.get('run', {}).get('id', '')}".strip()),
        "report.html": run_html(results),
    }
    written = []
    for name, text in outputs.items():
        path = run_dir / name
        path.write_text(text, encoding="utf-8")
        written.append(path)
    return written


def render_run_dir(target: pathlib.Path) -> tuple[pathlib.Path, list[pathlib.Path]]:
    """`meshgate report DIR`: the reports of DIR/results.json (or of a results.json given
    directly) written again beside it. A run killed before it wrote results.json is rendered
    from its results.jsonl, and results.json is written from those rows. InputError names the
    file when there is nothing usable."""
    target = pathlib.Path(target)
    run_dir = target.parent if target.is_file() else target
    path = target if target.is_file() else run_dir / "results.json"
    jsonl = run_dir / "results.jsonl"
    if not path.exists() and jsonl.exists():
        try:
            rows = _results.read_rows(jsonl)
        except jsonfile.JsonFileError as e:
            raise InputError(str(e)) from None
        if not rows:
            raise InputError(f"{jsonl}: no finished case to report")
        document = _results.assemble(None, rows, [], {"id": run_dir.name})
        _results.check_results(document, jsonl)  # before results.json is written from it
        _results.write_results(path, document)
        return run_dir, write_run_report(run_dir, document)
    if not path.exists():
        raise InputError(f"{run_dir}: no results.json or results.jsonl: pass a run folder "
                                   "(reports/<run-id>) or a results.json")
    return run_dir, write_run_report(run_dir, _results.load_results(path))
