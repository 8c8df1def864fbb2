"""The runner's --progress event stream and how a run's progress is shown: a live one-line
status on a terminal, one plain line per finished case otherwise (CI logs). With fold_skips
(the repeated launches of ab, bisect and calibrate), skipped cases are counted instead: one
line per suite and launch, with the reasons. Long commands show their phases as k of N with
elapsed time and ETA (Steps), and a revision's build a compact progress line (BuildProgress);
`-q` (set_quiet) silences both. On a terminal all three share one line rewritten in place
(StatusLine): the command's step, then the build or the run's cases."""

from __future__ import annotations

import math
import os
import re
import shutil
import sys
import time
from dataclasses import dataclass, field
from typing import Protocol, TextIO

from ..core import jsonfile
from ..core.markup import first_line, format_clock, summary_line, visible
from ..core.results import FAILING, STATUSES, suite_of

EVENTS = ("plan", "start", "end", "done")


def parse_event(line: str) -> dict | None:
    """The progress event on `line`, or None when the line is human text to pass through."""
    text = line.strip()
    if not text.startswith("{"):
        return None
    try:
        event = jsonfile.parse(text, "a progress event", expect=dict)
    except jsonfile.JsonFileError:
        return None
    return event if event.get("event") in EVENTS else None


def format_case_time(seconds: float | None) -> str:
    """A case's duration as the plain lines show it: '12 us', '0.1 ms', '2.35 s'."""
    if seconds is None:
        return "-"
    if seconds >= 1.0:
        return f"{seconds:.2f} s"
    if seconds < 0.5e-4:
        return f"{seconds * 1e6:.0f} us"
    return f"{seconds * 1e3:.1f} ms"


@dataclass
class Tally:
    """What has happened so far in one run (across relaunches of the runner)."""

    total: int = 0
    done: int = 0
    counts: dict = field(default_factory=lambda: dict.fromkeys(STATUSES, 0))
    case_seconds: float = 0.0
    current: str | None = None
    started_at: float = field(default_factory=time.monotonic)

    def record(self, status: str, seconds: float | None) -> None:
        self.done += 1
        self.counts[status if status in self.counts else "error"] += 1
        self.case_seconds += seconds or 0.0
        self.current = None

    def elapsed(self, now: float | None = None) -> float:
        return (time.monotonic() if now is None else now) - self.started_at

    def eta(self) -> float | None:
        """Seconds left, from the mean case time so far; None before the first case ends."""
        if self.done == 0 or self.total <= self.done:
            return None if self.done == 0 else 0.0
        return self.case_seconds / self.done * (self.total - self.done)


class ProgressView(Protocol):
    def plan(self, tally: Tally) -> None: ...
    def started(self, tally: Tally, case_id: str) -> None: ...
    def finished(self, tally: Tally, case_id: str, status: str, seconds: float | None,
                 message: str) -> None: ...
    def text(self, line: str, stream: str) -> None: ...
    def heading(self, line: str) -> None: ...
    def tick(self) -> None: ...     # called while waiting for the runner (live clocks)
    def close(self) -> None: ...


def case_line(tally: Tally, case_id: str, status: str, seconds: float | None,
              message: str) -> str:
    """'[  3/120] pass   layout/coalesce-a  0.1 ms', with the message's summary line for fail,
    error and skip (markup.summary_line: a multi-rank failure by the rank that started it) (a skip's reason); control characters in the id and message are shown as
    escapes (markup.visible)."""
    width = len(str(max(tally.total, tally.done)))
    line = (f"[{tally.done:>{width}}/{max(tally.total, tally.done)}] {visible(status):<6} "
            f"{visible(case_id)}  {format_case_time(seconds)}")
    if (status in FAILING or status == "skip") and summary_line(message):
        line += f"  {visible(summary_line(message))}"
    return line


class SkippedCases:
    """Skipped cases counted per suite and reason, to be shown as one line per suite:
    'gemm-cuda: 39 skipped (no CUDA device present)'."""

    def __init__(self):
        self.reasons: dict[str, dict[str, int]] = {}  # suite -> reason -> cases, as they came

    def add(self, case_id: str, message: str) -> None:
        suite = suite_of(case_id)
        reason = first_line(message) or "no reason given"
        by_reason = self.reasons.setdefault(suite, {})
        by_reason[reason] = by_reason.get(reason, 0) + 1

    def take_lines(self) -> list[str]:
        """The lines of the skips counted so far, which are then forgotten."""
        lines = []
        for suite, by_reason in self.reasons.items():
            total = sum(by_reason.values())
            if len(by_reason) == 1:
                why = visible(next(iter(by_reason)))
            else:
                why = "; ".join(f"{visible(reason)}: {count}" for reason, count in by_reason.items())
            lines.append(f"{visible(suite)}: {total} skipped ({why})")
        self.reasons = {}
        return lines


class PlainView:
    """One line per finished case; runner text passed through as it comes. With `fold_skips`
    skipped cases are counted and shown as one line per suite before the next heading and at
    the end."""

    def __init__(self, out: TextIO | None = None, err: TextIO | None = None,
                 fold_skips: bool = False):
        self.out = out or sys.stdout
        self.err = err or sys.stderr
        self.skipped = SkippedCases() if fold_skips else None

    def plan(self, tally: Tally) -> None:
        pass

    def started(self, tally: Tally, case_id: str) -> None:
        pass

    def finished(self, tally, case_id, status, seconds, message) -> None:
        if status == "skip" and self.skipped is not None:
            self.skipped.add(case_id, message)
            return
        print(case_line(tally, case_id, status, seconds, message), file=self.out, flush=True)

    def text(self, line: str, stream: str) -> None:
        target = self.err if stream == "stderr" else self.out
        print(visible(line), file=target, flush=True)

    def show_skipped(self) -> None:
        for line in self.skipped.take_lines() if self.skipped is not None else []:
            print(line, file=self.out, flush=True)

    def heading(self, line: str) -> None:
        self.show_skipped()
        print(visible(line), file=self.out, flush=True)

    def tick(self) -> None:
        pass

    def close(self) -> None:
        self.show_skipped()


class StatusLine:
    """The one line of a terminal that progress rewrites in place. A long command's step
    (Steps), a revision's build (BuildProgress) and a run's cases (TtyView) each show a part of
    it, joined in the order they came, so that none draws over another; a line printed through
    it goes above the status line and stays."""

    SEPARATOR = "  |  "

    def __init__(self, out: TextIO, width: int | None = None):
        self.out, self.width = out, width
        self.parts: dict[str, str] = {}
        self.shown = False

    def text(self) -> str:
        line = self.SEPARATOR.join(self.parts.values())
        width = self.width or shutil.get_terminal_size((100, 24)).columns
        return line if len(line) < width else line[: max(width - 4, 10)] + "..."

    def show(self, owner: str, text: str) -> None:
        """`owner`'s part is now `text` (a new owner's part goes last)."""
        self.parts[owner] = text
        self._draw()

    def drop(self, owner: str) -> None:
        """`owner`'s part goes; the line is erased when it was the last."""
        if self.parts.pop(owner, None) is None:
            return
        if self.parts:
            self._draw()
        else:
            self._erase()

    def keep(self, owner: str) -> None:
        """`owner`'s part becomes a line of its own that stays, above what remains."""
        text = self.parts.pop(owner, None)
        if text is None:
            return
        if not self.parts and self.shown:
            self.out.write("\n")  # it is the line shown: leave it where it is
            self.out.flush()
            self.shown = False
            return
        self.above(text)

    def above(self, text: str, out: TextIO | None = None) -> None:
        """Prints `text` (to `out`, default the line's stream) above the status line."""
        self._erase()
        print(text, file=out or self.out, flush=True)
        if self.parts:
            self._draw()

    def _draw(self) -> None:
        self.out.write("\r\x1b[K" + self.text())
        self.out.flush()
        self.shown = True

    def _erase(self) -> None:
        if self.shown:
            self.out.write("\r\x1b[K")
            self.out.flush()
            self.shown = False


_terminal_line: StatusLine | None = None


def _isatty(out: TextIO) -> bool:
    try:
        return out.isatty()
    except (AttributeError, ValueError):
        return False


def status_line(out: TextIO, width: int | None = None) -> StatusLine:
    """The status line to draw on `out`: the process's one line of the terminal when `out` is
    one (every owner shares it), else a line of `out`'s own."""
    global _terminal_line
    if not _isatty(out):
        return StatusLine(out, width)
    if _terminal_line is None:
        _terminal_line = StatusLine(out, width)
    return _terminal_line


class TtyView:
    """A live status line, rewritten in place: case n/N, current id, elapsed, ETA, fail/error
    counts. Failing and erroring cases and runner text are printed above it and stay. It is the
    `cases` part of the terminal's StatusLine, after a long command's step."""

    def __init__(self, out: TextIO | None = None, err: TextIO | None = None,
                 width: int | None = None, min_interval: float = 0.1, fold_skips: bool = False):
        self.out = out or sys.stdout
        self.err = err or sys.stderr
        self.skipped = SkippedCases() if fold_skips else None
        self.width = width
        # Hundreds of sub-millisecond cases would otherwise flood a slow (ssh) terminal.
        self.min_interval = min_interval
        self.last_draw = -math.inf
        self.tally: Tally | None = None
        self.status = status_line(self.out, width)

    def status_line(self, tally: Tally) -> str:
        position = min(tally.done + (1 if tally.current else 0), max(tally.total, 1))
        eta = tally.eta()
        parts = [f"[{position}/{tally.total}]", visible(tally.current or ""),
                 f"elapsed {format_clock(tally.elapsed())}",
                 f"ETA {format_clock(eta) if eta is not None else '?'}",
                 f"fail {tally.counts['fail']}", f"error {tally.counts['error']}"]
        line = "  ".join(part for part in parts if part)
        width = self.width or shutil.get_terminal_size((100, 24)).columns
        return line if len(line) < width else line[: max(width - 4, 10)] + "..."

    def draw(self, force: bool = False) -> None:
        if self.tally is None:
            return
        now = time.monotonic()
        shown = "cases" in self.status.parts
        if not force and shown and now - self.last_draw < self.min_interval:
            return
        self.status.show("cases", self.status_line(self.tally))
        self.last_draw = now

    def plan(self, tally: Tally) -> None:
        self.tally = tally
        self.draw()

    def started(self, tally: Tally, case_id: str) -> None:
        self.tally = tally
        self.draw()

    def finished(self, tally, case_id, status, seconds, message) -> None:
        self.tally = tally
        if status == "skip" and self.skipped is not None:
            self.skipped.add(case_id, message)
        if status in FAILING:
            self.status.above(case_line(tally, case_id, status, seconds, message))
            self.draw(force=True)
        else:
            self.draw()

    def text(self, line: str, stream: str) -> None:
        self.status.above(visible(line), self.err if stream == "stderr" else self.out)
        self.draw(force=True)

    def show_skipped(self) -> None:
        for line in self.skipped.take_lines() if self.skipped is not None else []:
            self.status.above(line)

    def heading(self, line: str) -> None:
        self.show_skipped()
        self.status.above(visible(line))

    def tick(self) -> None:
        """Keeps the elapsed time moving and shows what a throttled redraw held back."""
        self.draw()

    def close(self) -> None:
        self.status.drop("cases")
        self.show_skipped()


def make_view(out: TextIO | None = None, fold_skips: bool = False) -> ProgressView:
    """TtyView when stdout is a terminal, PlainView otherwise; `fold_skips` counts skipped
    cases into one line per suite (SkippedCases)."""
    out = out or sys.stdout
    return TtyView(out, fold_skips=fold_skips) if out.isatty() else PlainView(out, fold_skips=fold_skips)


# ---------------------------------------------------------------------------------------------
# Long commands: k of N with elapsed and ETA, and a build's progress

_quiet = False


def set_quiet(value: bool) -> None:
    """`-q` of ab, bisect and nightly: no progress lines (verdicts, reports and errors still)."""
    global _quiet
    _quiet = value


def is_quiet() -> bool:
    return _quiet or os.environ.get("MESHGATE_QUIET", "") not in ("", "0")


class Steps:
    """A long command's phase as k of N: 'meshgate ab: batch 1: launch 5 of 18 (candidate),
    elapsed 0:42, ETA 1:50', the ETA from the mean time of the steps so far, once the phase has
    run for `quiet_for` seconds (a phase of quick steps needs no progress); nothing with -q. On
    a terminal it is the first part of the one status line, rewritten at each step, with the
    runner's live line after it (close() takes it away); elsewhere (a log) one line per step."""

    def __init__(self, command: str, phase: str, total: int, out: TextIO | None = None,
                 clock=time.monotonic, quiet_for: float = 2.0):
        self.command, self.phase, self.total = command, phase, max(0, total)
        self.out = out
        self.clock = clock
        self.quiet_for = quiet_for
        self.started = clock()
        self.k = 0

    def line(self, what: str = "") -> str:
        elapsed = self.clock() - self.started
        done = self.k - 1
        eta = elapsed / done * (self.total - done) if done > 0 and self.total >= done else None
        label = f" ({what})" if what else ""
        return (f"{self.command}: {self.phase}: {self.k} of {self.total}{label}, elapsed "
                f"{format_clock(elapsed)}, ETA {format_clock(eta) if eta is not None else '?'}")

    def step(self, what: str = "") -> None:
        """Step k + 1 starts (N grows with it where the plan was a bound that skips exceed)."""
        self.k += 1
        self.total = max(self.total, self.k)
        if is_quiet() or self.clock() - self.started < self.quiet_for:
            return
        out = self.out or sys.stderr
        if _isatty(out):
            status_line(out).show(self._owner(), self.line(what))
        else:
            print(self.line(what), file=out, flush=True)

    def _owner(self) -> str:
        return f"steps-{id(self)}"

    def close(self) -> None:
        """The phase is over: its part of a terminal's status line goes."""
        out = self.out or sys.stderr
        if _isatty(out):
            status_line(out).drop(self._owner())


class BuildProgress:
    """A compact progress line for a build whose tools' output goes to a log: 'meshgate: built
    57/212 targets of 1a2b3c4d5e6f, 0:42' from ninja's [k/N] (or make's [ 42%]) lines,
    rewritten in place on a terminal (its part of the StatusLine, which stays as a line when
    the build ends), else a line at each quarter; nothing with -q."""

    _NINJA = re.compile(r"^\[(\d+)/(\d+)\]")
    _MAKE = re.compile(r"^\[\s*(\d+)%\]")

    def __init__(self, what: str, out: TextIO | None = None, clock=time.monotonic, tty: bool | None = None):
        self.what = what
        self.out = out or sys.stderr
        self.clock = clock
        self.started = clock()
        self.tty = _isatty(self.out) if tty is None else tty
        self.status = status_line(self.out) if self.tty else None
        self.shown_quarter = -1
        self.last = ""

    def feed(self, line: str) -> None:
        """One line of the build tool's output."""
        match = self._NINJA.match(line)
        if match:
            done, total = int(match.group(1)), int(match.group(2))
            text, fraction = f"{done}/{total} targets", done / max(total, 1)
        else:
            match = self._MAKE.match(line)
            if not match:
                return
            fraction = int(match.group(1)) / 100
            text = f"{match.group(1)} %"
        if is_quiet():
            return
        self.last = f"meshgate: built {text} of {self.what}, {format_clock(self.clock() - self.started)}"
        if self.status is not None:
            self.status.show(self._owner(), self.last)
        elif int(fraction * 4) > self.shown_quarter:
            self.shown_quarter = int(fraction * 4)
            print(self.last, file=self.out, flush=True)

    def _owner(self) -> str:
        return f"build-{id(self)}"

    def close(self) -> None:
        if self.status is not None:
            self.status.keep(self._owner())
