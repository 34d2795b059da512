"""Small inline SVG charts for the version report: histograms and ranked bars.

Each function returns one ``<svg>`` element as text, drawn with classes only (the report's
stylesheet colours them; no ``style=`` attribute, so the page's Content-Security-Policy can
allow its one stylesheet by hash and nothing else). Every text that comes from data goes
through :func:`esc`; numbers are formatted by :func:`fmt_num`, so the same input gives the
same bytes. Hovering a bar shows its exact numbers (an SVG ``<title>``: no script needed).

Pure: the standard library only.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from typing import NamedTuple

__all__ = ["Bar", "Bucket", "esc", "fmt_num", "fmt_share", "histogram_svg", "ranked_bars_svg"]

# C0 and C1 control characters, and the bidi/zero-width ones that make text read other than
# it is: shown as \uXXXX, never passed to the page.
_INVISIBLE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u200b-\u200f\u202a-\u202e\u2066-\u2069]")


def esc(value: object, limit: int | None = None) -> str:
    """``value`` as text safe inside HTML or SVG, in an element or a quoted attribute.

    Args:
      value: anything; ``str()`` of it is shown.
      limit: show at most this many characters, then ``…``.

    Returns:
      The text with ``& < > " '`` escaped and invisible control characters spelled out.
    """
    text = str(value)
    if limit is not None and len(text) > limit:
        text = text[:max(limit - 1, 1)] + "…"
    text = _INVISIBLE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)
    return (text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
            .replace('"', "&quot;").replace("'", "&#39;"))


def fmt_num(value: float | int | None) -> str:
    """A number for people: integers with thousands separators, others to 4 significant
    digits (more where the integer part needs them), ``–`` for None.

    Args:
        value: the number, or None for a missing one.

    Returns:
        The formatted number.
    """
    if value is None:
        return "–"
    if isinstance(value, float):
        if math.isnan(value):
            return "NaN"
        if math.isinf(value):
            return "∞" if value > 0 else "−∞"
        if value.is_integer() and abs(value) < 1e15:
            value = int(value)
        elif 1 <= abs(value) < 1e6:
            return f"{value:,.2f}"
        else:
            return f"{value:.4g}"
    return f"{value:,}"


def fmt_share(part: float, whole: float) -> str:
    """``part / whole`` as a percentage; ``<0.1%`` rather than a misleading ``0.0%``.

    Args:
        part: the count or size shown.
        whole: the total; zero gives ``–``.

    Returns:
        The percentage, such as ``12.5%``.
    """
    if not whole:
        return "–"
    share = 100.0 * part / whole
    if 0 < share < 0.1:
        return "<0.1%"
    if 99.9 < share < 100:
        return ">99.9%"
    return f"{share:.1f}%"


class Bucket(NamedTuple):
    """A histogram bucket: values in [low, high], and how many."""

    low: float
    high: float
    count: float


class Bar(NamedTuple):
    """A ranked bar: its label, its share in [0, 1], the other version's share of the same
    label (None: not known there) and a note shown after the share (e.g. ``new``)."""

    label: str
    share: float
    previous: float | None = None
    note: str = ""


_W, _H = 320, 120  # a histogram's drawing area, in px
_PAD_L, _PAD_B, _PAD_T = 8, 18, 6


def _x(value: float, lo: float, hi: float) -> float:
    return _PAD_L + (value - lo) / (hi - lo) * (_W - 2 * _PAD_L)


def _f(value: float) -> str:
    """A coordinate, rounded so the bytes do not depend on float noise."""
    text = f"{value:.1f}"
    return text[:-2] if text.endswith(".0") else text


def _density(buckets: Sequence[Bucket]) -> list[tuple[float, float, float]]:
    """(low, high, share of the values per unit of width) of buckets with a width; a
    zero-width bucket (all values equal) gets its share as the height. Shares, not counts:
    two versions of different sizes compare by the shape of their distributions."""
    total = sum(count for _, _, count in buckets) or 1.0
    return [(lo, hi, count / total / (hi - lo) if hi > lo else count / total)
            for lo, hi, count in buckets]


def histogram_svg(buckets: Sequence[Bucket], *, previous: Sequence[Bucket] = (),
                  band: tuple[float, float, float] | None = None, label: str = "",
                  unit: str = "", fmt=fmt_num) -> str:
    """A histogram of ``buckets`` as bars, the ``previous`` version's as an outline.

    Buckets of different widths (two versions' equal-width histograms over different
    ranges) are drawn by density, so their areas compare. ``band`` ``(min, target, max)``
    shades the band and marks the target (the shard sizes' chart).

    Args:
      buckets: the histogram; at least one bucket with finite bounds.
      previous: the other version's histogram of the same thing, or empty.
      band: an interval of the x axis to shade, with a line at its middle value.
      label: what the chart shows, for its accessible name.
      unit: appended to the axis' end labels.
      fmt: formats the axis' end labels.

    Returns:
      One ``<svg>`` element, or a ``<p>`` saying why nothing can be drawn.
    """
    drawn = [b for b in buckets if math.isfinite(b[0]) and math.isfinite(b[1])]
    before = [b for b in previous if math.isfinite(b[0]) and math.isfinite(b[1])]
    if not drawn or len(drawn) != len(buckets):
        return '<p class="note">not charted: the values include infinities</p>'
    edges = [v for lo, hi, _ in drawn + before for v in (lo, hi)]
    if band is not None:
        edges += [band[0], band[2]]
    lo, hi = min(edges), max(edges)
    if not hi > lo:  # one value: a bar in the middle of an axis around it (wide enough to
        pad = max(0.5, abs(lo) * 1e-6)  # survive float rounding: timestamps in ns are ~1e18)
        lo, hi = lo - pad, hi + pad
    bars, outline = _density(drawn), _density(before)
    top = max([d for _, _, d in bars + outline] + [0.0]) or 1.0
    base = _H - _PAD_B
    scale = (base - _PAD_T) / top
    parts = [f'<svg class="chart" viewBox="0 0 {_W} {_H}" width="{_W}" height="{_H}" '
             f'role="img" aria-label="{esc(label)}">']
    if band is not None:
        x0, x1, xt = (_x(v, lo, hi) for v in (band[0], band[2], band[1]))
        parts.append(f'<rect class="band" x="{_f(x0)}" y="{_PAD_T}" width="{_f(x1 - x0)}" '
                     f'height="{_f(base - _PAD_T)}"><title>band {esc(fmt(band[0]))} to '
                     f'{esc(fmt(band[2]))}{esc(unit)}</title></rect>')
        parts.append(f'<line class="target" x1="{_f(xt)}" x2="{_f(xt)}" y1="{_PAD_T}" '
                     f'y2="{_f(base)}"/>')
    for (b_lo, b_hi, count), (_, _, density) in zip(drawn, bars):
        x0, x1 = _x(b_lo, lo, hi), _x(b_hi, lo, hi)
        if x1 - x0 < 2:  # a zero-width bucket (or one too thin to see)
            x0, x1 = (x0 + x1) / 2 - 3, (x0 + x1) / 2 + 3
        height = density * scale
        parts.append(f'<rect class="bar" x="{_f(x0)}" y="{_f(base - height)}" '
                     f'width="{_f(max(x1 - x0 - 1, 1))}" height="{_f(height)}"><title>'
                     f'{esc(fmt(b_lo))} to {esc(fmt(b_hi))}{esc(unit)}: '
                     f'{esc(fmt_num(count))}</title></rect>')
    if outline:
        points = []
        for b_lo, b_hi, density in outline:
            y = _f(base - density * scale)
            points += [f"{_f(_x(b_lo, lo, hi))},{y}", f"{_f(_x(b_hi, lo, hi))},{y}"]
        first, last = _x(outline[0][0], lo, hi), _x(outline[-1][1], lo, hi)
        parts.append(f'<polyline class="before" points="{_f(first)},{_f(base)} '
                     f'{" ".join(points)} {_f(last)},{_f(base)}"/>')
    parts.append(f'<line class="axis" x1="{_PAD_L}" x2="{_W - _PAD_L}" y1="{_f(base)}" '
                 f'y2="{_f(base)}"/>')
    parts.append(f'<text class="tick" x="{_PAD_L}" y="{_H - 4}">{esc(fmt(lo))}{esc(unit)}'
                 f'</text><text class="tick end" x="{_W - _PAD_L}" y="{_H - 4}">'
                 f'{esc(fmt(hi))}{esc(unit)}</text></svg>')
    return "".join(parts)


_ROW_H, _LABEL_W, _BAR_W = 18, 150, 150


def ranked_bars_svg(bars: Sequence[Bar], *, label: str = "") -> str:
    """Horizontal bars, one per ``Bar`` (top values and their shares), the ``previous``
    version's share of the same value marked by a tick; the longest bar fills the width.

    Args:
      bars: label, share in [0, 1], the other version's share or None, and a note shown
        after the share (e.g. ``new``).
      label: what the chart shows, for its accessible name.

    Returns:
      One ``<svg>`` element.
    """
    width = _LABEL_W + _BAR_W + 90
    height = _ROW_H * len(bars) + 4
    longest = max([b.share for b in bars] + [b.previous or 0.0 for b in bars] + [1e-12])
    parts = [f'<svg class="chart" viewBox="0 0 {width} {height}" width="{width}" '
             f'height="{height}" role="img" aria-label="{esc(label)}">']
    for i, (text, share, previous, note) in enumerate(bars):
        y = 2 + i * _ROW_H
        length = max(share, 0.0) / longest * _BAR_W
        tip = f"{text} : {fmt_share(share, 1)}"
        if previous is not None:
            tip += f" (was {fmt_share(previous, 1)})"
        parts.append(f'<g><title>{esc(tip)}</title>'
                     f'<text class="label" x="{_LABEL_W - 6}" y="{y + 13}">'
                     f'{esc(text, 22)}</text>'
                     f'<rect class="bar" x="{_LABEL_W}" y="{y + 3}" '
                     f'width="{_f(max(length, 1))}" height="{_ROW_H - 6}"/>')
        if previous is not None:
            xp = _LABEL_W + max(previous, 0.0) / longest * _BAR_W
            parts.append(f'<line class="before" x1="{_f(xp)}" x2="{_f(xp)}" y1="{y + 1}" '
                         f'y2="{y + _ROW_H - 1}"/>')
        parts.append(f'<text class="value" x="{_LABEL_W + _BAR_W + 6}" y="{y + 13}">'
                     f'{esc(fmt_share(share, 1))}{(" " + esc(note)) if note else ""}'
                     f'</text></g>')
    parts.append("</svg>")
    return "".join(parts)
