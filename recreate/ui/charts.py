"""Charts drawn by matplotlib as SVG, shown as `<img src="data:image/svg+xml;base64,...">`: one library
for the UI and the report (a static export of the run page), no JavaScript, nothing to vendor. An SVG in
an <img> runs no script and loads nothing, and its text is drawn as paths, so a label from a trajectory
cannot become markup; the page's own markup is only the image tag with an escaped alt text."""

from __future__ import annotations

import base64
import functools
import html
import io
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import ParamSpec

import matplotlib
from markupsafe import Markup
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

COLORS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f")
ACCEPTED, REJECTED = "#2ca02c", "#d62728"
SIZE = (6.4, 2.6)  # inches: 640 x 260 px at the page's scale
P = ParamSpec("P")


@dataclass
class Series:
    name: str
    xs: Sequence[float]
    ys: Sequence[float]
    point_colors: Sequence[str] = field(default_factory=list)  # one per point (accepted/rejected)
    marker: str = "o"
    labels: Sequence[str] = field(default_factory=list)  # one per point, written beside it


def _plain_text(draw: Callable[P, Markup]) -> Callable[P, Markup]:
    """`draw` with labels taken as text: a name with "$...$" in it is not math (nor a parse error)."""

    @functools.wraps(draw)
    def drawn(*args: P.args, **kwargs: P.kwargs) -> Markup:
        with matplotlib.rc_context({"text.parse_math": False}):
            return draw(*args, **kwargs)

    return drawn


def _image(fig: Figure, title: str) -> Markup:
    buffer = io.BytesIO()
    fig.savefig(buffer, format="svg", metadata={"Date": None})  # no date: the same data, the same bytes
    data = base64.b64encode(buffer.getvalue()).decode("ascii")
    return Markup(f'<img class="chart" alt="{html.escape(title)}" src="data:image/svg+xml;base64,{data}">')


def _empty(why: str) -> Markup:
    return Markup(f'<p class="empty">{html.escape(why)}</p>')


@_plain_text
def line_chart(
    series: Sequence[Series],
    title: str,
    *,
    y_range: tuple[float, float] | None = None,
    x_label: str = "",
    integer_x: bool = False,
) -> Markup:
    """Lines of points; a series' `point_colors` colour its points one by one."""
    drawn = [s for s in series if s.xs and all(math.isfinite(y) for y in s.ys)]
    if not drawn:
        return _empty("no data")
    fig = Figure(figsize=SIZE, layout="constrained")
    ax = fig.subplots()
    for i, s in enumerate(drawn):
        color = COLORS[i % len(COLORS)]
        ax.plot(s.xs, s.ys, color=color, linewidth=1.3, alpha=0.5 if s.point_colors else 1.0, label=s.name)
        ax.scatter(s.xs, s.ys, c=list(s.point_colors) or color, marker=s.marker, s=22, zorder=3)
        for x, y, label in zip(s.xs, s.ys, s.labels, strict=False):
            ax.annotate(label, (x, y), textcoords="offset points", xytext=(4, 4), fontsize=6, color="#444")
    if y_range:
        pad = (y_range[1] - y_range[0]) * 0.04
        ax.set_ylim(y_range[0] - pad, y_range[1] + pad)
    if integer_x:
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel(x_label, fontsize=8)
    ax.tick_params(labelsize=7)
    ax.grid(alpha=0.25)
    if len(drawn) > 1:
        ax.legend(fontsize=6, loc="center left", bbox_to_anchor=(1.0, 0.5), frameon=False)
    return _image(fig, title)


@_plain_text
def bar_chart(labels: Sequence[str], values: Sequence[float], title: str, unit: str = "") -> Markup:
    if not labels or not any(values):
        return _empty("nothing to plot: no values, or all zero")
    fig = Figure(figsize=SIZE, layout="constrained")
    ax = fig.subplots()
    ax.bar(list(labels), list(values), color=COLORS[0])
    ax.set_ylabel(unit, fontsize=8)
    ax.tick_params(labelsize=7)
    ax.grid(axis="y", alpha=0.25)
    return _image(fig, title)
