"""The reports of a signal check (signals.check): signals-report.md and signals-check.json, the
terminal view, and the section a run's report.md gets. Pure text, apart from write_report."""

from __future__ import annotations

import json
import pathlib
from typing import Any

from ..core.markup import md_cell, md_code, visible
from ..core.tables import md_row, md_table_head
from .render import Section
from .signals import GATING, Check, plan_diff


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
    lines = md_table_head(["#", "baseline", "this run"], "r")
    for i in range(max(len(old), len(new))):
        a = old[i] if i < len(old) else ""
        b = new[i] if i < len(new) else ""
        mark = "" if a == b else " **≠**"
        cell_a = md_code(a) if a != "" else ""
        cell_b = md_code(b) if b != "" else ""
        lines.append(md_row([f"{i + 1}{mark}", cell_a, cell_b]))
    if not old and not new:
        lines.append(md_row([None, "(no collectives)", "(no collectives)"]))
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
        lines += [f"## New failures ({len(failures)})", ""]
        lines += md_table_head(["case", "baseline", "this run", "message"])
        for c in failures:
            lines.append(md_row([md_code(c.id), md_cell(c.base_status), f"**{md_cell(c.new_status)}**",
                                 md_cell(c.message)]))
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
        lines += [f"## Changed signals ({len(changed)})", ""]
        lines += md_table_head(["case", "signal", "baseline -> this run"])
        for c, ch in changed:
            lines.append(md_row([md_code(c.id), md_code(ch.signal),
                                 f"{_md_cell(ch.old)} -> {_md_cell(ch.new)}"]))
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


def section(chk: Check, details: str = "signals-report.md") -> Section:
    """The check as a section of a run's report.md: its verdict under the title, the report at
    the end (render.Section)."""
    return Section("Deterministic signals", chk.headline(), markdown(chk), details)
