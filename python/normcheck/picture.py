"""The weight table as a picture: one bar per group, the code's weight over the objective's, rank by rank.

``weight_picture(report)`` draws an SVG from one report of ``check --json``: every group of
``gate.weights`` is a bar whose height is its ratio (exact in the report, read as a fraction), with
the reference line at 1 (the objective) and the line at 0. Every number written in the picture is the
report's: the ratios as the report prints them (``ratio_decimal``), the groups, ranks and microbatches;
each bar's title holds the exact code and objective weights. Groups outside their bound are drawn red.

Standard library only.
"""

from __future__ import annotations

import os
from fractions import Fraction
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple
from xml.sax.saxutils import escape, quoteattr

from . import dump

__all__ = ["weight_picture", "write_picture", "has_picture"]

_PLOT_HEIGHT = 240.0
_LEFT, _TOP, _BOTTOM, _RIGHT = 40.0, 96.0, 56.0, 84.0
_RANK_GAP = 14.0
_LABELLED = 48
"""Up to this many groups each bar carries its ratio and group number as text."""


def has_picture(report: Mapping[str, Any]) -> bool:
    """True when ``report``'s gate holds a weight table with rows to draw."""
    weights = (report.get("gate") or {}).get("weights")
    return isinstance(weights, dict) and bool([r for r in weights.get("rows", []) if isinstance(r, dict)])


def _ratio(row: Mapping[str, Any]) -> Optional[Fraction]:
    text = row.get("ratio")
    return None if text is None else Fraction(str(text))


def _bar_width(count: int) -> float:
    return max(4.0, min(28.0, 720.0 / max(count, 1)))


def _layout(rows: Sequence[Mapping[str, Any]]) -> Tuple[List[float], float]:
    """Each row's left edge and the plot's width: groups in report order, a gap where the rank changes."""
    width = _bar_width(len(rows))
    x, edges, previous = _LEFT + _RANK_GAP / 2, [], None
    for row in rows:
        if previous is not None and row.get("rank") != previous:
            x += _RANK_GAP
        edges.append(x)
        x += width * 1.25
        previous = row.get("rank")
    return edges, x + _RANK_GAP / 2 - _LEFT


def weight_picture(report: Mapping[str, Any]) -> str:
    """The SVG text of ``report``'s weight table (``has_picture`` must hold)."""
    gate = report.get("gate") or {}
    weights: Dict[str, Any] = gate.get("weights") or {}
    rows = [r for r in weights.get("rows", []) if isinstance(r, dict)]
    if not rows:
        raise ValueError("the report holds no weight table to draw")
    ratios = [_ratio(r) for r in rows]
    known = [r for r in ratios if r is not None]
    top = max([Fraction(1), *known])
    bottom = min([Fraction(0), *known])
    span = float(top - bottom) * 1.15 or 1.0
    scale = _PLOT_HEIGHT / span

    def y(value: Fraction) -> float:
        return _TOP + (float(top) * 1.1 - float(value)) * scale

    edges, plot_width = _layout(rows)
    width = _LEFT + plot_width + _RIGHT
    height = _TOP + _PLOT_HEIGHT + _BOTTOM
    bar = _bar_width(len(rows))
    labelled = len(rows) <= _LABELLED
    verdict = str(gate.get("verdict", ""))
    heading = "the code's weight over the objective's, per group, rank by rank"
    source = (f"{os.path.basename(str(report.get('file', '')))}: {weights.get('groups', len(rows))} groups, "
              f"gate {verdict}")
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width:.1f}" height="{height:.1f}" '
           f'viewBox="0 0 {width:.1f} {height:.1f}" font-family="sans-serif" font-size="11">',
           f"<title>{escape(heading)}: {escape(source)}</title>",
           f'<text x="{_LEFT:.1f}" y="20" font-size="13">{escape(heading)}</text>',
           f'<text class="source" x="{_LEFT:.1f}" y="38">{escape(source)}</text>',
           f'<line id="zero" x1="{_LEFT:.1f}" x2="{_LEFT + plot_width:.1f}" y1="{y(Fraction(0)):.3f}" '
           f'y2="{y(Fraction(0)):.3f}" stroke="#444"/>',
           f'<line id="one" x1="{_LEFT:.1f}" x2="{_LEFT + plot_width:.1f}" y1="{y(Fraction(1)):.3f}" '
           f'y2="{y(Fraction(1)):.3f}" stroke="#2a7" stroke-dasharray="5 3"/>',
           f'<text x="{_LEFT - 6:.1f}" y="{y(Fraction(0)) + 4:.3f}" text-anchor="end">0</text>',
           f'<text x="{_LEFT - 6:.1f}" y="{y(Fraction(1)) + 4:.3f}" text-anchor="end">1</text>',
           f'<text x="{_LEFT + plot_width + 4:.1f}" y="{y(Fraction(1)) + 4:.3f}" fill="#2a7">the objective</text>']
    for row, left, ratio in zip(rows, edges, ratios):
        place = f"group {row.get('group')}, rank {row.get('rank')}, microbatch {row.get('microbatch')}"
        if row.get("sequence") is not None:
            place += f", sequence {row.get('sequence')}"
        attributes = (f'data-group="{row.get("group")}" data-rank="{row.get("rank")}" '
                      f'data-ratio={quoteattr(str(row.get("ratio")))}')
        if ratio is None:
            out.append(f'<circle class="empty" {attributes} cx="{left + bar / 2:.3f}" cy="{y(Fraction(0)):.3f}" '
                       f'r="2.5" fill="#999"><title>{escape(place)}: no token</title></circle>')
            continue
        upper, lower = y(max(ratio, Fraction(0))), y(min(ratio, Fraction(0)))
        colour = "#c33" if row.get("within_bound") is False else "#48c"
        title = (f"{place}: {row.get('tokens')} tokens, code {row.get('code')} ≈ {row.get('code_decimal')}, "
                 f"objective {row.get('objective')} ≈ {row.get('objective_decimal')}, "
                 f"ratio {row.get('ratio')} ≈ {row.get('ratio_decimal')}"
                 + ("" if row.get("within_bound") is not False else ", outside its bound"))
        out.append(f'<rect class="bar" {attributes} x="{left:.3f}" y="{upper:.3f}" width="{bar:.3f}" '
                   f'height="{lower - upper:.3f}" fill="{colour}"><title>{escape(title)}</title></rect>')
        if labelled:
            out.append(f'<text class="ratio" data-group="{row.get("group")}" x="{left + bar / 2 + 3:.3f}" '
                       f'y="{upper - 3:.3f}" transform="rotate(-90 {left + bar / 2 + 3:.3f} {upper - 3:.3f})" '
                       f'font-size="9">{escape(str(row.get("ratio_decimal")))}</text>')
            out.append(f'<text class="group" x="{left + bar / 2:.3f}" y="{_TOP + _PLOT_HEIGHT + 14:.3f}" '
                       f'text-anchor="middle" font-size="9">{row.get("group")}</text>')
    for rank in sorted({int(r.get("rank", 0)) for r in rows}):
        placed = [left for row, left in zip(rows, edges) if int(row.get("rank", 0)) == rank]
        middle = (placed[0] + placed[-1] + bar) / 2
        out.append(f'<text class="rank" x="{middle:.3f}" y="{_TOP + _PLOT_HEIGHT + 32:.3f}" '
                   f'text-anchor="middle">rank {rank}</text>')
    omitted = int(weights.get("omitted", 0) or 0)
    if omitted:
        out.append(f'<text x="{_LEFT:.1f}" y="{height - 6:.1f}">… {omitted} more groups the report does not list'
                   "</text>")
    out.append("</svg>")
    return "\n".join(out) + "\n"


def write_picture(report: Mapping[str, Any], path: str) -> str:
    """Writes ``weight_picture(report)`` to ``path`` atomically; returns ``path``."""
    dump.write_atomically(path, weight_picture(report))
    return path
