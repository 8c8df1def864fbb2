"""Text in reports: the one escaping of user text (case names, messages, runner output) for the
terminal, HTML, Markdown and XML, the one way a fraction is written as a percentage, a span of
wall-clock time as a clock, a message as its first line or as the one line that summarises it
(`summary_line`: a multi-rank failure by the rank that started it), and multi-line text as a
Markdown code block. Every
report writer (run, compare, calibrate, history, bisect, the SVG plots, the terminal views)
uses these, so a message prints the same everywhere.

Characters that would act instead of print are shown as escapes: C0 and C1 controls (so an
ANSI escape sequence arrives as the visible text `\\x1b[31m`, not as red), DEL, the line and
paragraph separators, the bidirectional overrides that reorder what a reader sees, lone
surrogates (which no UTF-8 file can hold) and U+FFFE/U+FFFF (which XML forbids). The escape is
Python's spelling: `\\n`, `\\r`, `\\t`, `\\x07`, `\\u202e`."""

from __future__ import annotations

import html
import re
from typing import Iterable, Optional

# Everything visible() escapes, less tab and newline, which multi-line text keeps.
_ACTING = ("\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028-\u202e\u2066-\u2069"
           "\ud800-\udfff\ufffe\uffff")
_ACTING_IN_LINE = re.compile(f"[\t\n{_ACTING}]")
_ACTING_IN_TEXT = re.compile(f"[{_ACTING}]")
_SHORT = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}
_MARKDOWN_SPECIAL = re.compile(r"([\\|<])")


def _escape(match: re.Match) -> str:
    char = match.group()
    if char in _SHORT:
        return _SHORT[char]
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def visible(text: object, multiline: bool = False) -> str:
    """`text` with every character that would act instead of print written as an escape.
    One line unless `multiline`, which keeps newlines and tabs."""
    pattern = _ACTING_IN_TEXT if multiline else _ACTING_IN_LINE
    return pattern.sub(_escape, str(text))


def html_text(text: object) -> str:
    """Text safe inside HTML, SVG and XML elements and attribute values; keeps newlines."""
    return html.escape(visible(text, multiline=True), quote=True)


def md_cell(text: object) -> str:
    """Text safe inside a Markdown table cell or list item: one line (newlines become spaces),
    and the characters that would end the cell (`|`), start an HTML tag (`<`) or escape the
    next one (`\\`) escaped."""
    # Markdown first: the escapes visible() adds (a backslash before x, u, n, r or t) are
    # literal text in Markdown, while one before punctuation would escape it.
    one_line = str(text).replace("\r\n", " ").replace("\n", " ")
    return visible(_MARKDOWN_SPECIAL.sub(r"\\\1", one_line)).strip()


def md_code(text: object) -> str:
    """`text` as inline Markdown code, safe in a table cell: one line, pipes escaped (GitHub
    splits cells on them even inside code), and a fence longer than any backtick run inside."""
    one_line = visible(text).replace("|", "\\|")
    longest = max((len(run) for run in re.findall(r"`+", one_line)), default=0)
    fence = "`" * (longest + 1)
    pad = " " if one_line.startswith("`") or one_line.endswith("`") else ""
    return f"{fence}{pad}{one_line}{pad}{fence}"


def pct(fraction: Optional[float], digits: int = 1) -> str:
    """0.0123 -> '1.2 %' ('-' for None)."""
    if fraction is None:
        return "-"
    return f"{fraction * 100:.{digits}f} %"


def case_column_width(ids: Iterable[str]) -> int:
    """Width of a terminal table's case column: the longest id, at least 48, so that columns
    to its right stay aligned whatever the ids."""
    return max([48] + [len(i) for i in ids])


def format_clock(seconds: float) -> str:
    """A wall-clock span as m:ss, or h:mm:ss past an hour."""
    whole = max(0, int(round(seconds)))
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}:{minutes:02d}:{secs:02d}"
    return f"{minutes}:{secs:02d}"


def first_line(message: str) -> str:
    """The first line of a message (after leading blank lines), '' for none."""
    return message.strip().splitlines()[0] if message and message.strip() else ""


# A multi-rank message: one block per rank, "rank N: what happened", its output tail indented
# below ("; its stderr ended with:" then "    line" ...), as the runner's command kind merges them.
_RANK_BLOCK = re.compile(r"^rank (\d+): (.*)$")
_STOPPED_BY = re.compile(r"^stopped when rank (\d+) failed")
_TAIL_INTRO = re.compile(r"(; its (?:stderr|stdout) ended with|; the launcher's last lines(?: were)?|:)\s*$")


def _rank_blocks(message: str) -> list[tuple[int, str, list[str]]]:
    """(rank, first line without the prefix, the block's further lines) per rank, or [] when the
    message is not one block per rank."""
    blocks: list[tuple[int, str, list[str]]] = []
    for line in message.strip().splitlines():
        match = _RANK_BLOCK.match(line)
        if match:
            blocks.append((int(match.group(1)), match.group(2), []))
        elif blocks:
            blocks[-1][2].append(line)
        else:
            return []
    return blocks


def _with_tail(head: str, rest: list[str]) -> str:
    """A first line that announces output ("...; its stderr ended with:") completed with the
    output's last non-blank line, the one that usually says why (an exception, an assertion)."""
    tail = [line.strip() for line in rest if line.strip()]
    if tail and _TAIL_INTRO.search(head):
        return f"{head.rstrip()} {tail[-1]}"
    return head


def summary_line(message: str) -> str:
    """The one line that says what went wrong, for the terminal and the summaries: for a
    message of several ranks, the rank whose failure started it (the one the others were
    "stopped when rank N failed" by; else one killed by a signal; else the first that failed
    on its own) with the last line of its output, and how many other ranks the message names;
    for any other message its first line, completed with the output it announces."""
    blocks = _rank_blocks(message)
    if not blocks:
        lines = message.strip().splitlines() if message else []
        return _with_tail(lines[0], lines[1:]) if lines else ""
    by_rank = {rank: (head, rest) for rank, head, rest in blocks}
    own = [b for b in blocks if not _STOPPED_BY.match(b[1])]
    lead = None
    for _, head, _ in blocks:
        match = _STOPPED_BY.match(head)
        if match and int(match.group(1)) in by_rank and not _STOPPED_BY.match(by_rank[int(match.group(1))][0]):
            lead = int(match.group(1))
            break
    if lead is None:
        signalled = [b for b in own if "killed by signal" in b[1]]
        lead = (signalled or own or blocks)[0][0]
    head, rest = by_rank[lead]
    line = f"rank {lead}: {_with_tail(head, rest)}"
    others = len(blocks) - 1
    if others:
        line += f" (+{others} other rank{'s' if others != 1 else ''})"
    return line


def md_code_block(text: object) -> str:
    """Multi-line text as a fenced Markdown code block that keeps its lines: control characters
    shown as escapes, a fence longer than any backtick run inside."""
    body = visible(str(text).strip("\n"), multiline=True)
    longest = max((len(run) for run in re.findall(r"`+", body)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{fence}text\n{body}\n{fence}"
