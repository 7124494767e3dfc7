"""Small inline SVG charts drawn on the server: no JavaScript, no CDN, nothing to vendor. Every label
goes through `html.escape`; the rest of the markup is numbers."""

from __future__ import annotations

import html
from collections.abc import Sequence

from markupsafe import Markup

WIDTH, HEIGHT, PAD, LEGEND = 640, 220, 40, 150
COLORS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f")


def _scale(lo: float, hi: float, size: float, flip: bool) -> tuple[float, float]:
    span = (hi - lo) or 1.0
    return (-size / span, size) if flip else (size / span, 0.0)


def _frame(lo: float, hi: float, title: str, right: float = WIDTH - 10) -> list[str]:
    return [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="chart" viewBox="0 0 {WIDTH} {HEIGHT}" '
        f'role="img" aria-label="{html.escape(title)}">',
        f'<line x1="{PAD}" y1="{HEIGHT - PAD}" x2="{right}" y2="{HEIGHT - PAD}" class="axis"/>',
        f'<line x1="{PAD}" y1="10" x2="{PAD}" y2="{HEIGHT - PAD}" class="axis"/>',
        f'<text x="{PAD - 4}" y="{HEIGHT - PAD}" class="tick" text-anchor="end">{lo:.3g}</text>',
        f'<text x="{PAD - 4}" y="18" class="tick" text-anchor="end">{hi:.3g}</text>',
    ]


def line_chart(
    series: Sequence[tuple[str, Sequence[float], Sequence[float]]],
    title: str,
    *,
    y_range: tuple[float, float] | None = None,
    point_colors: Sequence[str] | None = None,
) -> Markup:
    """Lines of (name, xs, ys); `point_colors` colours the first series' points (accepted/rejected)."""
    xs = [x for _, sx, _ in series for x in sx]
    ys = [y for _, _, sy in series for y in sy]
    if not xs:
        return Markup('<p class="empty">no data</p>')
    y_lo, y_hi = y_range or (min(ys), max(ys))
    x_lo, x_hi = min(xs), max(xs)
    sx, _ = _scale(x_lo, x_hi, WIDTH - PAD - LEGEND, False)
    sy, _ = _scale(y_lo, y_hi, HEIGHT - PAD - 20, True)
    right = WIDTH - LEGEND
    out = _frame(y_lo, y_hi, title, right)
    out.append(f'<text x="{right}" y="{HEIGHT - PAD + 16}" class="tick" text-anchor="end">{x_hi:.4g}</text>')
    out.append(f'<text x="{PAD}" y="{HEIGHT - PAD + 16}" class="tick">{x_lo:.4g}</text>')
    for i, (name, sxs, sys_) in enumerate(series):
        color = COLORS[i % len(COLORS)]
        pts = [
            (PAD + (x - x_lo) * sx, HEIGHT - PAD + (y - y_lo) * sy) for x, y in zip(sxs, sys_, strict=True)
        ]
        path = " ".join(f"{x:.1f},{y:.1f}" for x, y in pts)
        out.append(f'<polyline points="{path}" fill="none" stroke="{color}" stroke-width="1.5"/>')
        for j, (x, y) in enumerate(pts):
            dot = point_colors[j] if point_colors and i == 0 else color
            out.append(f'<circle cx="{x:.1f}" cy="{y:.1f}" r="3" fill="{dot}"/>')
        label = html.escape(name)
        out.append(f'<text x="{right + 10}" y="{22 + 13 * i}" class="legend" fill="{color}">{label}</text>')
    out.append("</svg>")
    return Markup("".join(out))


def bar_chart(labels: Sequence[str], values: Sequence[float], title: str) -> Markup:
    if not labels or not any(values):
        return Markup('<p class="empty">nothing to plot: no values, or all zero</p>')
    hi = max(max(values), 1e-12)
    out = _frame(0.0, hi, title)
    slot = (WIDTH - PAD - 20) / len(labels)
    for i, (label, value) in enumerate(zip(labels, values, strict=True)):
        h = (HEIGHT - PAD - 20) * value / hi
        x = PAD + i * slot + slot * 0.15
        out.append(
            f'<rect x="{x:.1f}" y="{HEIGHT - PAD - h:.1f}" width="{slot * 0.7:.1f}" height="{h:.1f}" '
            f'fill="{COLORS[0]}"><title>{html.escape(label)}: {value:.4g}</title></rect>'
        )
        out.append(
            f'<text x="{x + slot * 0.35:.1f}" y="{HEIGHT - PAD + 16}" class="tick" '
            f'text-anchor="middle">{html.escape(label)}</text>'
        )
    out.append("</svg>")
    return Markup("".join(out))
