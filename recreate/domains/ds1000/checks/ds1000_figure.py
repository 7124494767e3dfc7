"""Runs INSIDE DS-1000 sandboxes: a matplotlib figure as data, and a real figure rebuilt from it.

The plot problems' checks inspect the live figure (`plt.gca().lines[0].get_marker()`, legend font
sizes, tick labels...). The solution's sandbox sends `summarize()` of its current figure; the checker
`rebuild()`s real matplotlib objects from that summary and runs the problem's own check on them. What
the summary keeps: figure size; per axes: position, frame, visibility (the axes, `axis("off")`, each axis,
each spine), title and axis labels (text, font size, rotation, position, visibility), limits, scales,
major and minor ticks (locations, labels, rotation, visibility of labels, tick marks on both sides and
grid lines); lines (data, style, marker, colours, width, z-order, label, visibility; `axline`s as such);
patches (vertices, colours, kind, visibility); collections (offsets, colours, visibility); images
(shape, colormap, visibility); the legend (texts, font sizes, title, visibility). Every artist kept
keeps its visibility. A check that reads anything else sees the default of a fresh figure.
"""

LINE_PROPS = (
    "linestyle",
    "marker",
    "color",
    "markerfacecolor",
    "markeredgecolor",
    "markeredgewidth",
    "markersize",
    "linewidth",
    "zorder",
    "label",
    "visible",
    "alpha",
)


def _text(text):
    return {
        "text": text.get_text(),
        "fontsize": text.get_fontsize(),
        "rotation": text.get_rotation(),
        "position": tuple(float(v) for v in text.get_position()),
        "visible": text.get_visible(),
    }


def _axis(axis, which):
    ticks = axis.get_minor_ticks() if which == "minor" else axis.get_major_ticks()
    locs = axis.get_minorticklocs() if which == "minor" else axis.get_majorticklocs()
    ticks = ticks[: len(locs)]
    return {
        "locs": [float(v) for v in locs],
        "labels": [_text(t.label1) for t in ticks],
        "tick1_visible": [bool(t.tick1line.get_visible()) for t in ticks],
        "tick2_visible": [bool(t.tick2line.get_visible()) for t in ticks],
        "grid_visible": [bool(t.gridline.get_visible()) for t in ticks],
    }


def _line(line):
    from matplotlib.lines import AxLine

    props = {name: getattr(line, f"get_{name}")() for name in LINE_PROPS}
    if isinstance(line, AxLine):
        return {"kind": "axline", "xy1": line._xy1, "xy2": line._xy2, "slope": line._slope, "props": props}
    return {"kind": "line", "xy": line.get_xydata(), "props": props}


def _patch(patch):
    from matplotlib.patches import Polygon, Rectangle

    kind = (
        "rectangle" if isinstance(patch, Rectangle) else "polygon" if isinstance(patch, Polygon) else "path"
    )
    vertices = patch.get_xy() if kind == "polygon" else patch.get_verts()
    extra = (
        {"xy": patch.get_xy(), "width": patch.get_width(), "height": patch.get_height()}
        if kind == "rectangle"
        else {}
    )
    return {
        "kind": kind,
        "vertices": vertices,
        "facecolor": patch.get_facecolor(),
        "edgecolor": patch.get_edgecolor(),
        "zorder": patch.get_zorder(),
        "visible": patch.get_visible(),
        **extra,
    }


def _axes(ax):
    legend = ax.get_legend()
    return {
        "position": tuple(ax.get_position().bounds),
        "frame_on": ax.get_frame_on(),
        "visible": ax.get_visible(),
        "axison": ax.axison,
        "axis_visible": (ax.xaxis.get_visible(), ax.yaxis.get_visible()),
        "spines_visible": {name: spine.get_visible() for name, spine in ax.spines.items()},
        "title": _text(ax.title),
        "xlabel": _text(ax.xaxis.get_label()),
        "ylabel": _text(ax.yaxis.get_label()),
        "xlim": tuple(ax.get_xlim()),
        "ylim": tuple(ax.get_ylim()),
        "scales": (ax.get_xscale(), ax.get_yscale()),
        "ticks": {
            f"{name}_{which}": _axis(getattr(ax, f"{name}axis"), which)
            for name in ("x", "y")
            for which in ("major", "minor")
        },
        "lines": [_line(line) for line in ax.lines],
        "patches": [_patch(p) for p in ax.patches],
        "collections": [
            {
                "offsets": c.get_offsets(),
                "facecolors": c.get_facecolor(),
                "edgecolors": c.get_edgecolor(),
                "visible": c.get_visible(),
            }
            for c in ax.collections
        ],
        "images": [
            {"shape": tuple(im.get_array().shape), "cmap": im.cmap.name, "visible": im.get_visible()}
            for im in ax.images
        ],
        "legend": None
        if legend is None
        else {
            "visible": legend.get_visible(),
            "texts": [_text(t) for t in legend.get_texts()],
            "title": _text(legend.get_title()),
        },
    }


def summarize():
    """The current figure as data (None when the solution drew nothing)."""
    import matplotlib.pyplot as plt

    if not plt.get_fignums():
        return None
    figure = plt.gcf()
    axes = figure.axes
    current = axes.index(figure.gca()) if axes else None
    return {
        "size": tuple(float(v) for v in figure.get_size_inches()),
        "axes": [_axes(a) for a in axes],
        "current": current,
    }


def _set_text(target, data):
    target.set_text(data["text"])
    target.set_fontsize(data["fontsize"])
    target.set_rotation(data["rotation"])
    target.set_position(data["position"])
    target.set_visible(data["visible"])


def _set_ticks(axis, which, data):
    minor = which == "minor"
    axis.set_ticks(data["locs"], [t["text"] for t in data["labels"]] if data["labels"] else None, minor=minor)
    ticks = axis.get_minor_ticks(len(data["locs"])) if minor else axis.get_major_ticks(len(data["locs"]))
    grid = data["grid_visible"]
    if grid and all(grid):
        axis.grid(True, which=which)  # as `grid()` leaves it: ticks made later get grid lines too
    for tick, label, *shown in zip(
        ticks, data["labels"], data["tick1_visible"], data["tick2_visible"], grid, strict=False
    ):
        _set_text(tick.label1, label)
        for line, visible in zip((tick.tick1line, tick.tick2line, tick.gridline), shown, strict=True):
            line.set_visible(visible)


def _rebuild_axes(figure, data):
    import matplotlib.colors
    from matplotlib.lines import Line2D
    from matplotlib.patches import PathPatch, Polygon, Rectangle
    from matplotlib.path import Path

    ax = figure.add_axes(data["position"])
    ax.set_frame_on(data["frame_on"])
    ax.set_visible(data["visible"])
    ax.set_axis_on() if data["axison"] else ax.set_axis_off()
    for axis, visible in zip((ax.xaxis, ax.yaxis), data["axis_visible"], strict=True):
        axis.set_visible(visible)
    for name, visible in data["spines_visible"].items():
        if name in ax.spines:
            ax.spines[name].set_visible(visible)
    _set_text(ax.title, data["title"])
    ax.set_xscale(data["scales"][0])
    ax.set_yscale(data["scales"][1])
    for line in data["lines"]:
        props = {name: line["props"][name] for name in LINE_PROPS if name in line["props"]}
        if line["kind"] == "axline":
            made = ax.axline(line["xy1"], line["xy2"], slope=line["slope"])
            made.set(**props)
        else:
            xy = line["xy"]
            ax.add_line(Line2D(xy[:, 0] if len(xy) else [], xy[:, 1] if len(xy) else [], **props))
    for patch in data["patches"]:
        colours = {
            "facecolor": patch["facecolor"],
            "edgecolor": patch["edgecolor"],
            "zorder": patch["zorder"],
            "visible": patch["visible"],
        }
        if patch["kind"] == "rectangle":
            made = Rectangle(patch["xy"], patch["width"], patch["height"], **colours)
        elif patch["kind"] == "polygon":
            made = Polygon(patch["vertices"], **colours)
        else:
            made = PathPatch(Path(patch["vertices"]), **colours)
        ax.add_patch(made)
    for collection in data["collections"]:
        made = ax.scatter([], [])
        made.set_offsets(collection["offsets"])
        made.set_facecolor(collection["facecolors"])
        made.set_edgecolor(collection["edgecolors"])
        made.set_visible(collection["visible"])
    for image in data["images"]:
        name = image["cmap"]
        cmap = name if name in matplotlib.colormaps else None
        made = ax.imshow(__import__("numpy").zeros(image["shape"][:2]), cmap=cmap)
        made.set_visible(image["visible"])
    for name in ("x", "y"):
        axis = getattr(ax, f"{name}axis")
        for which in ("major", "minor"):
            _set_ticks(axis, which, data["ticks"][f"{name}_{which}"])
        _set_text(axis.get_label(), data[f"{name}label"])
    ax.set_xlim(data["xlim"])
    ax.set_ylim(data["ylim"])
    if data["legend"] is not None:
        texts = data["legend"]["texts"]
        legend = ax.legend(
            [Line2D([], []) for _ in texts], [t["text"] for t in texts], title=data["legend"]["title"]["text"]
        )
        for target, text in zip(legend.get_texts(), texts, strict=False):
            _set_text(target, text)
        _set_text(legend.get_title(), data["legend"]["title"])
        legend.set_visible(data["legend"]["visible"])
    return ax


def rebuild(summary):
    """Close every figure and rebuild the summarized one as the current figure (nothing for None)."""
    import matplotlib.pyplot as plt

    plt.close("all")
    if summary is None:
        return
    figure = plt.figure(figsize=summary["size"])
    axes = [_rebuild_axes(figure, data) for data in summary["axes"]]
    if summary["current"] is not None:
        figure.sca(axes[summary["current"]])
