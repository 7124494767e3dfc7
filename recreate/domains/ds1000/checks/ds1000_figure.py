"""Runs INSIDE DS-1000 sandboxes: a matplotlib figure as data, and a real figure rebuilt from it.

The plot problems' checks inspect the live figure (`plt.gca().lines[0].get_marker()`, legend font
sizes, tick labels...). The solution's sandbox sends `summarize()` of its current figure; the checker
`rebuild()`s real matplotlib objects from that summary and runs the problem's own check on them.

What the summary keeps:
- the figure: size, dpi, suptitle / supxlabel / supylabel, other figure texts, figure legends;
- per axes: position, projection (a 3D one's view and z label / limits), frame, face colour, aspect,
  margins, visibility (the axes, `axis("off")`, each axis), spines (visibility, colour, width), title,
  axis labels and their positions (`set_label_position`), limits, scales, texts and annotations;
- ticks, major and minor: locations, both rows of labels, tick marks on both sides, grid lines, and the
  axis' tick settings (`tick_params`, `tick_top()`, grid style...: new ticks follow them);
- every text: content, font size, weight, colour, alpha, alignments, rotation, position, visibility
  (and an annotation's point);
- lines: data, style, draw style, marker, markevery, fill style, colours, width, alpha, z-order,
  clipping, label (`axline`s as such);
- patches: vertices, colours, hatch, line width and style, fill, alpha, z-order, label (rectangles,
  polygons and a pie's wedges as such);
- collections: paths, offsets, colours, sizes, line widths, hatch, alpha, colormap, colour array and
  limits, z-order, clipping, label (line collections as such);
- images: shape, colormap;
- legends: texts, title, frame, location, columns, spacing parameters, each handle's style.
Every artist kept keeps its visibility. A check that reads anything else sees the default of a fresh
figure.
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
    "drawstyle",
    "markevery",
    "fillstyle",
    "clip_on",
)
PATCH_PROPS = ("facecolor", "edgecolor", "hatch", "linewidth", "linestyle", "fill", "alpha", "zorder")
PATCH_PROPS += ("label", "visible")
COLLECTION_PROPS = ("facecolor", "edgecolor", "sizes", "linewidth", "hatch", "alpha", "zorder", "label")
COLLECTION_PROPS += ("clip_on", "visible")
TEXT_PROPS = ("fontsize", "fontweight", "color", "alpha", "rotation", "horizontalalignment")
TEXT_PROPS += ("verticalalignment", "visible")
LEGEND_PARAMS = ("numpoints", "scatterpoints", "markerscale", "borderpad", "labelspacing", "handlelength")
LEGEND_PARAMS += ("handleheight", "handletextpad", "borderaxespad", "columnspacing")


def _props(artist, names):
    return {name: getattr(artist, f"get_{name}")() for name in names if hasattr(artist, f"get_{name}")}


def _text(text):
    data = {"text": text.get_text(), "position": tuple(float(v) for v in text.get_position())}
    if hasattr(text, "xy"):  # an annotation: the point it annotates
        data["xy"] = tuple(float(v) for v in text.xy)
    return {**data, **_props(text, TEXT_PROPS)}


def _axis(axis, which):
    ticks = axis.get_minor_ticks() if which == "minor" else axis.get_major_ticks()
    locs = axis.get_minorticklocs() if which == "minor" else axis.get_majorticklocs()
    ticks = ticks[: len(locs)]
    return {
        "locs": [float(v) for v in locs],
        "labels": [_text(t.label1) for t in ticks],
        "labels2": [_text(t.label2) for t in ticks],  # the ones shown at the top / right
        "tick1_visible": [bool(t.tick1line.get_visible()) for t in ticks],
        "tick2_visible": [bool(t.tick2line.get_visible()) for t in ticks],
        "grid_visible": [bool(t.gridline.get_visible()) for t in ticks],
    }


def _line(line):
    from matplotlib.lines import AxLine

    props = _props(line, LINE_PROPS)
    if isinstance(props.get("markevery"), slice):  # not data: as (start, stop, step) would misread
        del props["markevery"]
    if isinstance(line, AxLine):
        return {"kind": "axline", "xy1": line._xy1, "xy2": line._xy2, "slope": line._slope, "props": props}
    return {"kind": "line", "xy": line.get_xydata(), "props": props}


def _patch(patch):
    from matplotlib.patches import Polygon, Rectangle, Wedge

    kinds = {Rectangle: "rectangle", Polygon: "polygon", Wedge: "wedge"}
    kind = next((name for cls, name in kinds.items() if isinstance(patch, cls)), "path")
    vertices = patch.get_xy() if kind == "polygon" else patch.get_verts()
    extra = {}
    if kind == "rectangle":
        extra = {"xy": patch.get_xy(), "width": patch.get_width(), "height": patch.get_height()}
    elif kind == "wedge":  # a pie's slice
        extra = {"wedge": (tuple(patch.center), patch.r, patch.theta1, patch.theta2, patch.width)}
    return {"kind": kind, "vertices": vertices, "props": _props(patch, PATCH_PROPS), **extra}


def _collection(collection):
    from matplotlib.collections import LineCollection

    return {
        "kind": "lines" if isinstance(collection, LineCollection) else "paths",
        "paths": [(path.vertices, path.codes) for path in collection.get_paths()],
        "offsets": collection.get_offsets(),
        "props": _props(collection, COLLECTION_PROPS),
        "cmap": collection.cmap.name,
        "array": collection.get_array(),
        "clim": tuple(collection.get_clim()),
    }


def _legend(legend):
    from matplotlib.collections import Collection
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    if legend is None:
        return None
    handles = []
    for handle in legend.legend_handles:
        if isinstance(handle, Line2D):
            handles.append({"kind": "line", "props": _props(handle, LINE_PROPS)})
        elif isinstance(handle, Patch):
            handles.append({"kind": "patch", "props": _props(handle, PATCH_PROPS)})
        elif isinstance(handle, Collection):
            handles.append({"kind": "collection", "props": _props(handle, COLLECTION_PROPS)})
        else:
            handles.append({"kind": "line", "props": {}})
    return {
        "visible": legend.get_visible(),
        "texts": [_text(t) for t in legend.get_texts()],
        "title": _text(legend.get_title()),
        "handles": handles,
        "frame_on": legend.get_frame_on(),
        "loc": legend._loc,
        "ncols": legend._ncols,
        "params": {name: getattr(legend, name) for name in LEGEND_PARAMS},
    }


def _axes(ax):
    return {
        "position": tuple(ax.get_position().bounds),
        "projection": ax.name,
        "view": (ax.elev, ax.azim, ax.roll) if ax.name == "3d" else None,
        "z": (_text(ax.zaxis.get_label()), tuple(ax.get_zlim())) if ax.name == "3d" else None,
        "frame_on": ax.get_frame_on() if callable(ax.get_frame_on) else True,  # None on a 3D axes
        "facecolor": ax.get_facecolor(),
        "aspect": ax.get_aspect(),
        "margins": tuple(ax.margins()),
        "visible": ax.get_visible(),
        "axison": ax.axison,
        "axis_visible": (ax.xaxis.get_visible(), ax.yaxis.get_visible()),
        "spines": {
            name: {"visible": s.get_visible(), "edgecolor": s.get_edgecolor(), "linewidth": s.get_linewidth()}
            for name, s in ax.spines.items()
        },
        "title": _text(ax.title),
        "xlabel": _text(ax.xaxis.get_label()),
        "ylabel": _text(ax.yaxis.get_label()),
        "label_positions": (ax.xaxis.get_label_position(), ax.yaxis.get_label_position()),
        "tick_kw": {
            name: (
                dict(getattr(ax, f"{name}axis")._major_tick_kw),
                dict(getattr(ax, f"{name}axis")._minor_tick_kw),
            )
            for name in ("x", "y")
        },
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
        "collections": [_collection(c) for c in ax.collections],
        "images": [
            {"shape": tuple(im.get_array().shape), "cmap": im.cmap.name, "visible": im.get_visible()}
            for im in ax.images
        ],
        "texts": [_text(t) for t in ax.texts],
        "legend": _legend(ax.get_legend()),
    }


def summarize():
    """The current figure as data (None when the solution drew nothing)."""
    import matplotlib.pyplot as plt

    if not plt.get_fignums():
        return None
    figure = plt.gcf()
    axes = figure.axes
    current = axes.index(figure.gca()) if axes else None
    named = {name: getattr(figure, f"_{name}", None) for name in ("suptitle", "supxlabel", "supylabel")}
    return {
        "size": tuple(float(v) for v in figure.get_size_inches()),
        "dpi": float(figure.get_dpi()),
        "named_texts": {name: _text(t) for name, t in named.items() if t is not None},
        "texts": [_text(t) for t in figure.texts if not any(t is n for n in named.values())],
        "legends": [_legend(legend) for legend in figure.legends],
        "axes": [_axes(a) for a in axes],
        "current": current,
    }


def _set_text(target, data):
    target.set_text(data["text"])
    target.set_position(data["position"])
    target.set(**{name: data[name] for name in TEXT_PROPS if name in data})


def _set_ticks(axis, which, data):
    minor = which == "minor"
    axis.set_ticks(data["locs"], [t["text"] for t in data["labels"]] if data["labels"] else None, minor=minor)
    ticks = axis.get_minor_ticks(len(data["locs"])) if minor else axis.get_major_ticks(len(data["locs"]))
    grid = data["grid_visible"]
    if grid and all(grid):
        axis.grid(True, which=which)  # as `grid()` leaves it: ticks made later get grid lines too
    for tick, label, label2, *shown in zip(
        ticks,
        data["labels"],
        data["labels2"],
        data["tick1_visible"],
        data["tick2_visible"],
        grid,
        strict=False,
    ):
        _set_text(tick.label1, label)
        _set_text(tick.label2, label2)
        for line, visible in zip((tick.tick1line, tick.tick2line, tick.gridline), shown, strict=True):
            line.set_visible(visible)


def _set_legend(owner, data):
    """A legend on `owner` (an axes or the figure) with the kept texts, handles and settings."""
    import matplotlib.markers
    from matplotlib.collections import PathCollection
    from matplotlib.lines import Line2D
    from matplotlib.patches import Rectangle

    texts = data["texts"]
    proxies = {
        "line": lambda: Line2D([], []),
        "patch": lambda: Rectangle((0, 0), 1, 1),
        "collection": lambda: PathCollection([matplotlib.markers.MarkerStyle("o").get_path()]),
    }
    kinds = [h["kind"] for h in data["handles"]] + ["line"] * (len(texts) - len(data["handles"]))
    legend = owner.legend(
        [proxies[kind]() for kind in kinds],
        [t["text"] for t in texts],
        title=data["title"]["text"],
        loc=data["loc"],
        ncols=data["ncols"],
        frameon=data["frame_on"],
        **data["params"],
    )
    for made, handle in zip(legend.legend_handles, data["handles"], strict=False):
        if made is not None:
            made.set(**handle["props"])
    for target, text in zip(legend.get_texts(), texts, strict=False):
        _set_text(target, text)
    _set_text(legend.get_title(), data["title"])
    legend.set_visible(data["visible"])


def _add_text(owner, data):
    if "xy" in data and hasattr(owner, "annotate"):  # a figure has no `annotate`
        made = owner.annotate(data["text"], data["xy"], xytext=data["position"])
    else:
        made = owner.text(*data["position"], data["text"])
    _set_text(made, data)


def _rebuild_axes(figure, data):
    import matplotlib.colors
    from matplotlib.collections import LineCollection
    from matplotlib.lines import Line2D
    from matplotlib.patches import PathPatch, Polygon, Rectangle, Wedge
    from matplotlib.path import Path

    ax = figure.add_axes(data["position"], projection=data["projection"])
    if data["view"] is not None:
        ax.view_init(*data["view"])
    if data["z"] is not None:
        _set_text(ax.zaxis.get_label(), data["z"][0])
        ax.set_zlim(data["z"][1])
    if callable(ax.set_frame_on):
        ax.set_frame_on(data["frame_on"])
    ax.set_facecolor(data["facecolor"])
    ax.set_aspect(data["aspect"])
    ax.set_visible(data["visible"])
    ax.set_axis_on() if data["axison"] else ax.set_axis_off()
    for axis, visible in zip((ax.xaxis, ax.yaxis), data["axis_visible"], strict=True):
        axis.set_visible(visible)
    for name, spine in data["spines"].items():
        if name in ax.spines:
            ax.spines[name].set(**spine)
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
        props = patch["props"]
        if patch["kind"] == "rectangle":
            made = Rectangle(patch["xy"], patch["width"], patch["height"], **props)
        elif patch["kind"] == "polygon":
            made = Polygon(patch["vertices"], **props)
        elif patch["kind"] == "wedge":
            center, r, theta1, theta2, width = patch["wedge"]
            made = Wedge(center, r, theta1, theta2, width=width, **props)
        else:
            made = PathPatch(Path(patch["vertices"]), **props)
        ax.add_patch(made)
    for collection in data["collections"]:
        if collection["kind"] == "lines":  # vlines, hlines, error bars...
            made = ax.add_collection(LineCollection([vertices for vertices, _ in collection["paths"]]))
        else:
            made = ax.scatter([], [])
            made.set_paths([Path(vertices, codes) for vertices, codes in collection["paths"]])
        made.set_offsets(collection["offsets"])
        if collection["cmap"] in matplotlib.colormaps:
            made.set_cmap(collection["cmap"])
        if collection["array"] is not None:
            made.set_array(collection["array"].ravel())  # a mesh's 2D array: a scatter maps 1D
            made.set_clim(*collection["clim"])
        made.set(**collection["props"])
    for image in data["images"]:
        name = image["cmap"]
        cmap = name if name in matplotlib.colormaps else None
        made = ax.imshow(__import__("numpy").zeros(image["shape"][:2]), cmap=cmap)
        made.set_visible(image["visible"])
    for text in data["texts"]:
        _add_text(ax, text)
    for name, position in zip(("x", "y"), data["label_positions"], strict=True):
        axis = getattr(ax, f"{name}axis")
        axis._major_tick_kw, axis._minor_tick_kw = (dict(kw) for kw in data["tick_kw"][name])
        axis.reset_ticks()  # ticks made from here on follow the kept tick settings
        for which in ("major", "minor"):
            _set_ticks(axis, which, data["ticks"][f"{name}_{which}"])
        axis.set_label_position(position)
        _set_text(axis.get_label(), data[f"{name}label"])
    ax.margins(*data["margins"])
    ax.set_xlim(data["xlim"])
    ax.set_ylim(data["ylim"])
    if data["legend"] is not None:
        _set_legend(ax, data["legend"])
    return ax


def rebuild(summary):
    """Close every figure and rebuild the summarized one as the current figure (nothing for None)."""
    import matplotlib.pyplot as plt

    plt.close("all")
    if summary is None:
        return
    figure = plt.figure(figsize=summary["size"], dpi=summary["dpi"])
    axes = [_rebuild_axes(figure, data) for data in summary["axes"]]
    for name, text in summary["named_texts"].items():
        _set_text(getattr(figure, name)(text["text"]), text)
    for text in summary["texts"]:
        _add_text(figure, text)
    for legend in summary["legends"]:
        _set_legend(figure, legend)
    if summary["current"] is not None:
        figure.sca(axes[summary["current"]])
