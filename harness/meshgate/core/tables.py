"""Markdown tables and p-values as every report writes them (run, compare, history, bisect,
nightly, calibrate, signals, compat, parity, releases): one table builder and one p-value
format, so that a column or a number prints the same in every report.

Cells are written as given: escape user text first (markup.md_cell, markup.md_code)."""

from __future__ import annotations

from typing import Iterable, Optional, Sequence


def fmt_p(p: Optional[float]) -> str:
    """A p-value (or q-value) to two significant digits, '-' when there is none:
    0.01234 -> '0.012', 3e-07 -> '3e-07'."""
    return format(p, ".2g") if isinstance(p, (int, float)) else "-"


def md_row(cells: Iterable[object]) -> str:
    """One row: `| a | b |`. A None cell is blank, written `| |`; any other cell is written
    with str() (an empty string gives `|  |`)."""
    return "|" + "|".join(" " if cell is None else f" {cell} " for cell in cells) + "|"


def md_table_head(header: Sequence[Optional[str]], align: str = "") -> list[str]:
    """The header row and the separator row. `align` holds one letter per column, `l` (`---`)
    or `r` (`---:`); columns past its end are left-aligned. An empty header cell is blank."""
    separator = "|" + "".join("---:|" if align[i:i + 1] == "r" else "---|"
                              for i in range(len(header)))
    return [md_row(None if h in (None, "") else h for h in header), separator]


def md_table(header: Sequence[Optional[str]], rows: Iterable[Iterable[object]],
             align: str = "") -> list[str]:
    """The lines of a whole table: md_table_head, then one md_row per row."""
    return md_table_head(header, align) + [md_row(row) for row in rows]
