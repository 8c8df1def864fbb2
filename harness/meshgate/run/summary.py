"""The table `meshgate run` prints at the end: counts per status and per suite, the failing
and erroring cases with the first line of their message, wall time, and where things are.
Before it, the per-size table of each collective case group (collective_tables), which
report.md shows too."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from ..core.markup import format_clock, summary_line, visible
from ..core.results import STATUSES, status_counts, suite_of


def suite_counts(cases: list[dict]) -> dict[str, dict[str, int]]:
    """Status counts per suite, suites in order of first appearance."""
    per_suite: dict[str, list[dict]] = {}
    for row in cases:
        suite = visible(suite_of(row))
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
                             f"{visible(summary_line(str(row.get('message', ''))))}".rstrip())
            lines.append("")
    lines += [visible(note, multiline=True) for note in notes or []]
    lines.append(f"results: {visible(out_dir / 'results.json')}")
    for path in reports or []:
        lines.append(f"report:  {visible(path)}")
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------
# Collectives: nccl-tests' per-size table

# The measured columns, once out of place and, when the group measured it, once in place.
MEASURED_COLUMNS = ("time (us)", "algbw (GB/s)", "busbw (GB/s)", "#wrong")


@dataclass
class CollectiveTable:
    """The per-size measurements of one collective case group (the cases one entry of a case
    file expands to, e.g. every dtype x reduce op of a matrix) as nccl-tests prints them: a row
    per case and message size, out-of-place and in-place measurements side by side."""

    name: str              # suite/case name, or a pattern of the group's names: 'collectives/*-4'
    about: str             # op, group geometry and where the group is written
    keys: list[str]        # the columns that say what a row measured: size, count, type, ...
    in_place: bool         # whether the in-place columns follow the out-of-place ones
    rows: list[list[str]]  # the key cells, then MEASURED_COLUMNS out of place (and in place)

    @property
    def title(self) -> str:
        return f"{self.name} ({self.about})" if self.about else self.name

    @property
    def columns(self) -> list[str]:
        measured = list(MEASURED_COLUMNS) * (2 if self.in_place else 1)
        return self.keys + measured


def _size_entries(row: dict) -> list[dict]:
    sizes = (row.get("metrics") or {}).get("sizes")
    if not isinstance(sizes, list):
        return []
    return [e for e in sizes if isinstance(e, dict) and isinstance(e.get("bytes"), (int, float))]


def _group_key(row: dict) -> tuple:
    """The case file entry a row was expanded from; without a file and line (results written
    before rows carried them), its suite, op and dtype."""
    params = row.get("params") or {}
    if row.get("file") and isinstance(row.get("line"), int):
        return (row.get("suite"), row["file"], row["line"])
    return (row.get("suite"), params.get("op"), params.get("dtype"))


def _geometry(row: dict) -> tuple:
    """(groups, ranks per group) of a collective row."""
    metrics, params = row.get("metrics") or {}, row.get("params") or {}
    return metrics.get("groups"), metrics.get("group_size", params.get("group_size"))


def _geometry_words(groups, size) -> str:
    if groups is None or size is None:
        return ""
    return f"{groups} group{'s' if groups != 1 else ''} of {size} rank{'s' if size != 1 else ''}"


def _name_pattern(names: list[str]) -> str:
    """One name for the names of a group: the name itself, or the words (between dashes) they
    all start and end with around a '*': 'all-reduce-tp-sum-*', '*-4'."""
    if len(set(names)) == 1:
        return names[0]
    words = [name.split("-") for name in names]
    start = os.path.commonprefix(words)
    end = os.path.commonprefix([w[len(start):][::-1] for w in words])[::-1]
    return "-".join(start + ["*"] + end)


def _number(value, digits: int = 2) -> str:
    return f"{value:.{digits}f}" if isinstance(value, (int, float)) else "-"


def _measured_cells(entry: dict | None, one_rank: bool = False) -> list[str]:
    """time, algbw, busbw and #wrong of one size; no bandwidth for groups of one rank, where
    nothing moves between ranks (busbw is zero by definition, algbw the speed of a local copy
    out of place and of nothing in place). A row the implementation under test declined
    (`"status": "skip"`, docs/impl-protocol.md) says so where its time would be, so that it does
    not read as a row that was never asked for."""
    if entry is None:
        return ["-"] * len(MEASURED_COLUMNS)
    if entry.get("status") == "skip":
        return ["skip"] + ["-"] * (len(MEASURED_COLUMNS) - 1)
    time_s = entry.get("time_s")
    wrong = entry.get("wrong")
    bandwidth = ["-", "-"] if one_rank else [_number(entry.get("algbw_GBps")), _number(entry.get("busbw_GBps"))]
    return [_number(time_s * 1e6) if isinstance(time_s, (int, float)) else "-", *bandwidth,
            str(wrong) if isinstance(wrong, int) else "-"]


def _group_table(rows: list[dict]) -> CollectiveTable:
    first = rows[0]
    params = [r.get("params") or {} for r in rows]
    ops = sorted({str(p["op"]) for p in params if p.get("op")})
    geometries = {_geometry(r) for r in rows}
    # The identity of each case within the group: the columns that tell its rows apart.
    identity = {"type": [str(p.get("dtype", "-")) for p in params],
                "redop": [str(p.get("reduce", "-")) for p in params]}
    if any("root" in p for p in params):
        identity["root"] = [str(p.get("root", "-")) for p in params]
    if len(geometries) > 1:
        identity["groups x ranks"] = [f"{g}x{s}" for g, s in map(_geometry, rows)]
    keys_of_case = list(zip(*identity.values()))
    names = [visible(r.get("name") or str(r.get("id", "")).split("/", 1)[-1]) for r in rows]
    # Cases the columns above do not tell apart (a matrix over the mesh's names, say) are
    # named in a column of their own.
    named = len(set(keys_of_case)) < len(keys_of_case)
    keys = (["case"] if named else []) + ["size (B)", "count", *identity]
    in_place = any(e.get("inplace") for r in rows for e in _size_entries(r))
    table_rows = []
    for name, case_keys, row in zip(names, keys_of_case, rows):
        entries = _size_entries(row)
        for size in dict.fromkeys(e["bytes"] for e in entries):  # sizes in measured order
            out_of_place = next((e for e in entries if e["bytes"] == size and not e.get("inplace")), None)
            inplace = next((e for e in entries if e["bytes"] == size and e.get("inplace")), None)
            count = (out_of_place or inplace or {}).get("count")
            cells = ([name] if named else []) + [str(int(size)), str(count) if count is not None else "-",
                                                 *map(visible, case_keys)]
            one_rank = _geometry(row)[1] == 1
            cells += _measured_cells(out_of_place, one_rank)
            if in_place:
                cells += _measured_cells(inplace, one_rank)
            table_rows.append(cells)
    suite = visible(suite_of(first))
    about = [", ".join(ops)]
    if len(geometries) == 1:
        about.append(_geometry_words(*next(iter(geometries))))
    if first.get("file") and isinstance(first.get("line"), int):
        about.append(f"{visible(Path(first['file']).name)}:{first['line']}")
    return CollectiveTable(f"{suite}/{_name_pattern(names)}", "; ".join(a for a in about if a),
                           keys, in_place, table_rows)


def collective_tables(cases: list[dict]) -> list[CollectiveTable]:
    """One table per collective case group with per-size rows (metrics.sizes), groups in the
    order of their first case."""
    groups: dict[tuple, list[dict]] = {}
    for row in cases:
        if row.get("kind") == "collective" and _size_entries(row):
            groups.setdefault(_group_key(row), []).append(row)
    return [_group_table(rows) for rows in groups.values()]


def _header_lines(columns: list[str]) -> tuple[list[str], list[str]]:
    """Column names over their units, as nccl-tests prints them: 'time (us)' -> 'time', '(us)'."""
    names, units = [], []
    for column in columns:
        name, _, unit = column.partition(" (")
        names.append(name)
        units.append(f"({unit}" if unit else "")
    return names, units


def collective_text(tables: list[CollectiveTable]) -> list[str]:
    """The tables as terminal text, each under its title: columns right-aligned under a line of
    names and one of units, and above the measured columns which are out of place and which in
    place."""
    lines = []
    for table in tables:
        names, units = _header_lines(table.columns)
        widths = [max(len(cell) for cell in [name, unit] + [r[i] for r in table.rows])
                  for i, (name, unit) in enumerate(zip(names, units))]
        lines.append(table.title)
        if table.in_place:
            keys = len(table.keys)
            measured = len(MEASURED_COLUMNS)
            spans = [sum(widths[keys + k * measured:keys + (k + 1) * measured]) + 2 * (measured - 1)
                     for k in range(2)]
            indent = sum(widths[:keys]) + 2 * keys
            lines.append(("  " + " " * indent + "out-of-place".center(spans[0]) + "  "
                          + "in-place".center(spans[1])).rstrip())
        for cells in [names, units] + table.rows:
            lines.append(("  " + "  ".join(cell.rjust(width) for cell, width in zip(cells, widths))).rstrip())
        lines.append("")
    return lines
