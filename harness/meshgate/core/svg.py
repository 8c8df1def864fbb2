"""Small inline SVG charts for the HTML reports: no scripts, no network, no dependencies."""

from __future__ import annotations

import math
from typing import Sequence

from .markup import html_text

PALETTE = ("#4e79a7", "#e15759", "#59a14f", "#f28e2b", "#b07aa1", "#76b7b2", "#edc948", "#9c755f")


def _nice_ticks(lo: float, hi: float, count: int = 5) -> list[float]:
    if not (math.isfinite(lo) and math.isfinite(hi)):
        return []
    if hi <= lo:
        return [lo]
    raw = (hi - lo) / count
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    first = math.ceil(lo / step) * step
    ticks = []
    t = first
    while t <= hi + step * 1e-9:
        ticks.append(t)
        t += step
    return ticks


# Average advance of a title character at the stylesheet's title size, in pixels.
TITLE_CHAR_PX = 7.2


def title_text(title: str, x: float, width: int) -> str:
    """The plot's title from `x` to the right edge: cut with an ellipsis when it would not fit
    (the whole title stays in a tooltip), so titles never run past the plot."""
    room = max(8, int((width - x - 4) / TITLE_CHAR_PX))
    shown = title if len(title) <= room else title[: room - 1] + "\u2026"
    return (f'<text x="{x}" y="16" class="title"><title>{html_text(title)}</title>'
            f'{html_text(shown)}</text>')


# Average advance of a tick label character (10 px), and the room kept between two labels.
TICK_CHAR_PX = 6.0
TICK_GAP_PX = 10.0


def label_positions(count: int, plot_width: float, label_chars: int) -> list[int]:
    """Which of `count` evenly spaced points get an axis label of `label_chars` characters
    without two labels overlapping: every k-th from the first, and the last point (the newest,
    usually the one asked about) in the place of a labelled neighbour too close to it."""
    if count <= 0:
        return []
    spacing = plot_width / count
    step = max(1, math.ceil((label_chars * TICK_CHAR_PX + TICK_GAP_PX) / spacing))
    labelled = list(range(0, count, step))
    last = count - 1
    if labelled[-1] != last:
        if last - labelled[-1] >= step:
            labelled.append(last)
        elif len(labelled) > 1:
            labelled[-1] = last
    return labelled


def format_seconds(value: float) -> str:
    """Seconds with an SI unit that keeps 3 significant digits: 12.3 us, 4.56 ms."""
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6), ("ns", 1e-9)):
        if abs(value) >= scale or unit == "ns":
            return f"{value / scale:.3g} {unit}"
    return f"{value:.3g} s"


def format_bytes(value: float) -> str:
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if value >= scale:
            return f"{value / scale:.3g} {unit}"  # 7.99805 KiB reads as 8 KiB
    return f"{value:.4g} B"


def strip_plot(
    groups: Sequence[tuple[str, Sequence[float]]], title: str, value_format=format_seconds, width: int = 460
) -> str:
    """One horizontal row of dots per group (e.g. base and new per-run medians), median ticked."""
    values = [v for _, vs in groups for v in vs]
    if not values:
        return ""
    row_h, left, right, top = 26, 70, 20, 28
    height = top + row_h * len(groups) + 30
    lo, hi = min(values), max(values)
    pad = (hi - lo) * 0.08 or abs(hi) * 0.02 or 1.0
    lo, hi = lo - pad, hi + pad
    span = width - left - right

    def x(v: float) -> float:
        return left + (v - lo) / (hi - lo) * span

    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" role="img" '
        f'aria-label="{html_text(title)}" class="chart">',
        title_text(title, left, width),
    ]
    axis_y = top + row_h * len(groups) + 4
    parts.append(f'<line x1="{left}" y1="{axis_y}" x2="{width - right}" y2="{axis_y}" class="axis"/>')
    for t in _nice_ticks(lo, hi, 4):
        parts.append(f'<line x1="{x(t):.1f}" y1="{axis_y}" x2="{x(t):.1f}" y2="{axis_y + 4}" class="axis"/>')
        parts.append(f'<text x="{x(t):.1f}" y="{axis_y + 16}" class="tick" text-anchor="middle">{html_text(value_format(t))}</text>')
    for i, (label, vs) in enumerate(groups):
        cy = top + row_h * i + row_h / 2
        color = PALETTE[i % len(PALETTE)]
        parts.append(f'<text x="{left - 8}" y="{cy + 4:.1f}" class="label" text-anchor="end">{html_text(label)}</text>')
        parts.append(f'<line x1="{left}" y1="{cy:.1f}" x2="{width - right}" y2="{cy:.1f}" class="grid"/>')
        for v in vs:
            parts.append(
                f'<circle cx="{x(v):.1f}" cy="{cy:.1f}" r="4" fill="{color}" fill-opacity="0.65">'
                f"<title>{html_text(value_format(v))}</title></circle>"
            )
        if vs:
            m = sorted(vs)[len(vs) // 2] if len(vs) % 2 else sum(sorted(vs)[len(vs) // 2 - 1 : len(vs) // 2 + 1]) / 2
            parts.append(
                f'<line x1="{x(m):.1f}" y1="{cy - 9:.1f}" x2="{x(m):.1f}" y2="{cy + 9:.1f}" '
                f'stroke="{color}" stroke-width="2.5"><title>median {html_text(value_format(m))}</title></line>'
            )
    parts.append("</svg>")
    return "".join(parts)


def line_plot(
    series: Sequence[tuple[str, Sequence[tuple[float, float]]]],
    title: str,
    x_label: str,
    y_label: str,
    log_x: bool = True,
    x_format=format_bytes,
    width: int = 520,
    height: int = 280,
) -> str:
    """Lines with markers, one per series (e.g. busbw vs message size, base and new)."""
    points = [(x, y) for _, pts in series for x, y in pts if (x > 0 or not log_x)]
    if not points:
        return ""
    left, right, top, bottom = 60, 110, 28, 44
    xs = [math.log2(x) if log_x else x for x, _ in points]
    x_lo, x_hi = min(xs), max(xs)
    if x_hi == x_lo:
        x_lo, x_hi = x_lo - 1, x_hi + 1
    y_hi = max(y for _, y in points) * 1.1 or 1.0
    y_lo = 0.0

    def px(x: float) -> float:
        v = math.log2(x) if log_x else x
        return left + (v - x_lo) / (x_hi - x_lo) * (width - left - right)

    def py(y: float) -> float:
        return top + (1 - (y - y_lo) / (y_hi - y_lo)) * (height - top - bottom)

    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" role="img" '
        f'aria-label="{html_text(title)}" class="chart">',
        title_text(title, left, width),
        f'<line x1="{left}" y1="{py(0):.1f}" x2="{width - right}" y2="{py(0):.1f}" class="axis"/>',
        f'<line x1="{left}" y1="{top}" x2="{left}" y2="{py(0):.1f}" class="axis"/>',
    ]
    for t in _nice_ticks(y_lo, y_hi, 4):
        parts.append(f'<line x1="{left}" y1="{py(t):.1f}" x2="{width - right}" y2="{py(t):.1f}" class="grid"/>')
        parts.append(f'<text x="{left - 6}" y="{py(t) + 4:.1f}" class="tick" text-anchor="end">{t:g}</text>')
    tick_xs = sorted({x for x, _ in points})
    step = max(1, len(tick_xs) // 6)
    for xv in tick_xs[::step]:
        parts.append(
            f'<text x="{px(xv):.1f}" y="{py(0) + 16:.1f}" class="tick" text-anchor="middle">{html_text(x_format(xv))}</text>'
        )
    x_label = f"{x_label} (log scale)" if log_x else x_label
    parts.append(f'<text x="{(left + width - right) / 2:.1f}" y="{height - 6}" class="label" text-anchor="middle">{html_text(x_label)}</text>')
    parts.append(
        f'<text x="14" y="{(top + py(0)) / 2:.1f}" class="label" text-anchor="middle" '
        f'transform="rotate(-90 14 {(top + py(0)) / 2:.1f})">{html_text(y_label)}</text>'
    )
    for i, (name, pts) in enumerate(series):
        color = PALETTE[i % len(PALETTE)]
        pts = sorted(p for p in pts if p[0] > 0 or not log_x)
        if not pts:
            continue
        path = " ".join(f"{px(x):.1f},{py(y):.1f}" for x, y in pts)
        parts.append(f'<polyline points="{path}" fill="none" stroke="{color}" stroke-width="2"/>')
        for x, y in pts:
            parts.append(
                f'<circle cx="{px(x):.1f}" cy="{py(y):.1f}" r="3" fill="{color}">'
                f"<title>{html_text(name)}: {html_text(x_format(x))} -> {y:.4g}</title></circle>"
            )
        ly = top + 14 * i + 6
        parts.append(f'<rect x="{width - right + 10}" y="{ly - 8}" width="10" height="10" fill="{color}"/>')
        parts.append(f'<text x="{width - right + 24}" y="{ly + 1}" class="tick">{html_text(name)}</text>')
    parts.append("</svg>")
    return "".join(parts)


def bar_chart(bars: Sequence[tuple[str, float]], title: str, unit: str, width: int = 460,
              colors: Sequence[str] = ()) -> str:
    """Horizontal bars (e.g. GEMM TFLOP/s per implementation); `colors` per bar, else the palette."""
    colors = list(colors) or [PALETTE[i % len(PALETTE)] for i in range(len(bars))]
    pairs = [(b, c) for b, c in zip(bars, colors) if isinstance(b[1], (int, float)) and math.isfinite(b[1])]
    bars = [b for b, _ in pairs]
    colors = [c for _, c in pairs]
    if not bars:
        return ""
    row_h, left, right, top = 22, 130, 70, 28
    height = top + row_h * len(bars) + 10
    hi = max(v for _, v in bars) or 1.0
    span = width - left - right
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" role="img" '
        f'aria-label="{html_text(title)}" class="chart">',
        title_text(title, left, width),
    ]
    for i, (label, v) in enumerate(bars):
        y = top + row_h * i
        w = max(1.0, v / hi * span)
        color = colors[i]
        parts.append(f'<text x="{left - 8}" y="{y + 14}" class="label" text-anchor="end">{html_text(label)}</text>')
        parts.append(f'<rect x="{left}" y="{y + 3}" width="{w:.1f}" height="{row_h - 6}" fill="{color}"/>')
        parts.append(f'<text x="{left + w + 6:.1f}" y="{y + 14}" class="tick">{v:.3g} {html_text(unit)}</text>')
    parts.append("</svg>")
    return "".join(parts)
