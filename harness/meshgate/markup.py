"""Text in reports: the one escaping for HTML and for Markdown table cells, and the one way a
fraction is written as a percentage. Every report writer (run, compare, calibrate, history,
bisect, the SVG plots) uses these, so a message prints the same everywhere."""

from __future__ import annotations

import html
from typing import Optional


def html_text(text: object) -> str:
    """Text safe inside HTML and SVG elements and attribute values."""
    return html.escape(str(text), quote=True)


def md_cell(text: object) -> str:
    """Text safe inside a Markdown table cell: one line, pipes escaped."""
    return str(text).replace("|", "\\|").replace("\n", " ").strip()


def pct(fraction: Optional[float], digits: int = 1) -> str:
    """0.0123 -> '1.2 %' ('-' for None)."""
    if fraction is None:
        return "-"
    return f"{fraction * 100:.{digits}f} %"
