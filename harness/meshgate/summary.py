"""The table `meshgate run` prints at the end: counts per status and per suite, the failing
and erroring cases with the first line of their message, wall time, and where things are."""

from __future__ import annotations

from pathlib import Path

from .markup import visible
from .progress import first_line, format_clock
from .results import STATUSES, status_counts


def suite_counts(cases: list[dict]) -> dict[str, dict[str, int]]:
    """Status counts per suite, suites in order of first appearance."""
    per_suite: dict[str, list[dict]] = {}
    for row in cases:
        suite = visible(row.get("suite") or str(row.get("id", "")).partition("/")[0])
        per_suite.setdefault(suite, []).append(row)
    return {suite: status_counts(rows) for suite, rows in per_suite.items()}


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    widths = [max(len(str(r[i])) for r in [header] + rows) for i in range(len(header))]
    lines = []
    for row in [header] + rows:
        cells = [str(row[0]).ljust(widths[0])]
        cells += [str(cell).rjust(widths[i]) for i, cell in enumerate(row[1:], start=1)]
        lines.append("  ".join(cells).rstrip())
    return lines


def render(cases: list[dict], wall_seconds: float, out_dir: Path,
           reports: list[Path] | None = None, notes: list[str] | None = None) -> str:
    """The final summary as text (no trailing newline); control characters in ids, messages
    and notes are shown as escapes (markup.visible)."""
    counts = status_counts(cases)
    lines = [f"meshgate: {len(cases)} cases  " +
             "  ".join(f"{status} {counts[status]}" for status in STATUSES) +
             f"  (wall {format_clock(wall_seconds)})", ""]
    per_suite = suite_counts(cases)
    if per_suite:
        lines += _table(["suite"] + list(STATUSES),
                        [[suite] + [str(c[s]) for s in STATUSES] for suite, c in per_suite.items()])
        lines.append("")
    for status, title in (("fail", "failed"), ("error", "errors")):
        bad = [row for row in cases if row.get("status") == status]
        if bad:
            lines.append(f"{title} ({len(bad)}):")
            ids = [visible(row.get("id", "")) for row in bad]
            width = max(len(case_id) for case_id in ids)
            for case_id, row in zip(ids, bad):
                lines.append(f"  {case_id.ljust(width)}  "
                             f"{visible(first_line(str(row.get('message', ''))))}".rstrip())
            lines.append("")
    lines += [visible(note, multiline=True) for note in notes or []]
    lines.append(f"results: {visible(out_dir / 'results.json')}")
    for path in reports or []:
        lines.append(f"report:  {visible(path)}")
    return "\n".join(lines)
