"""Runs INSIDE DS-1000 sandboxes: a matplotlib figure as data, and a real figure rebuilt from it.

The plot problems' checks inspect the live figure (`plt.gca().lines[0].get_marker()`, legend font
sizes, tick labels...). The solution's sandbox sends `summarize()` of its current figure; the checker
`rebuild()`s real matplotlib objects from that summary and runs the problem's own check on them.

What the summary keeps:
- the figure: size, dpi, subplot parameters, layout engine, face / edge colour and frame, suptitle /
  supxlabel / supylabel, other figure texts, figure legends, the axes in order (their subplot grids,
  shared x / y, twins, colorbars);
- per axes: label, position, subplot (grid, rows, columns), projection (a 3D one's view and z axis, a
  polar one's theta offset and direction, radial label position, r origin), frame, face colour and
  background patch, aspect and adjustable, margins, visibility (the axes, `axis("off")`, each axis),
  spines (visibility, colour, width, position), titles (centre, left, right), axis labels and their
  positions (`set_label_position`), limits, scales (log / symlog settings too), texts and annotations,
  containers (bars, error bars, stems: which of its artists each holds);
- ticks, major and minor: locations, both rows of labels, tick marks on both sides, grid lines, and the
  axis' tick settings (`tick_params`, `tick_top()`, grid style...: new ticks follow them);
- every text: content, font size, weight, family, style, variant, colour, alpha, alignments, rotation,
  position, visibility, box (`bbox=`) (and an annotation's point, coordinates (a name, an (x, y) pair,
  an axes' or figure's transform, an earlier artist) and arrow properties);
- lines: data, style, draw style, marker, markevery, fill style, colours, width, alpha, z-order,
  clipping, label (`axline`s as such);
- patches: vertices, colours, hatch, line width and style, fill, alpha, z-order, label (rectangles,
  polygons (open or closed), a pie's wedges, arrows, circles, ellipses and arcs as such, with geometry);
- collections: paths, offsets, colours, sizes, line widths and styles, hatch, alpha, colormap, colour
  array and limits, z-order, clipping, label (line and polygon collections and meshes as such; contour
  sets with their levels, paths, colours and `clabel` texts, and `pcolor`'s meshes, by class);
- a line's, patch's or text's transform where it is the axes' or figure's (`transform=ax.transAxes`,
  `axhline`'s...);
- images: values (up to a bound), extent, colour limits, interpolation, origin, colormap, alpha;
- colour normalisations (of images, collections, colorbars): class (`LogNorm`...) and settings;
- tables: cells (text, size, colours, edges), location, box, automatic font size and column widths;
- legends: texts, title, frame (and its colours), location and anchor box, columns, spacing
  parameters, shadow, mode, alignment, marker side, rounded box, each handle's style.
The less plain kinds are summarized and rebuilt by ds1000_figure_artists and ds1000_figure_extra; 3D
axes and artists, quivers and the artists' order (`ax.get_children()`) by ds1000_figure_3d; axes and
figure settings, text boxes, collections' line styles and transforms by ds1000_figure_axes.
Every artist kept keeps its visibility. A check that reads anything else sees the default of a fresh
figure.
"""

import ds1000_figure_3d as threed
import ds1000_figure_artists as artists
import ds1000_figure_axes as settings
import ds1000_figure_extra as extra
from ds1000_figure_artists import COLLECTION_PROPS, PATCH_PROPS, props

LINE_PROPS = ("linestyle", "marker", "color", "markerfacecolor", "markeredgecolor", "markeredgewidth")
LINE_PROPS += ("markersize", "linewidth", "zorder", "label", "visible", "alpha", "drawstyle", "markevery")
LINE_PROPS += ("fillstyle", "clip_on")
TEXT_PROPS = ("fontsize", "fontweight", "color", "alpha", "rotation", "horizontalalignment")
TEXT_PROPS += ("verticalalignment", "visible", "fontfamily", "fontstyle", "fontvariant")
LEGEND_PARAMS = ("numpoints", "scatterpoints", "markerscale", "borderpad", "labelspacing", "handlelength")
LEGEND_PARAMS += ("handleheight", "handletextpad", "borderaxespad", "columnspacing", "shadow")
FRAME_PROPS = ("facecolor", "edgecolor", "linewidth", "alpha")
LAYOUTS = {"TightLayoutEngine": "tight", "ConstrainedLayoutEngine": "constrained"}
MAX_COUNT = 1024  # of a legend's columns or points, of a text's font families: more would take long


def _text(text):
    data = {"text": text.get_text(), "position": tuple(float(v) for v in text.get_position())}
    if hasattr(text, "xy"):  # an annotation: the point it annotates
        data["xy"], data["annotation"] = tuple(float(v) for v in text.xy), extra.annotation(text)
    return {**data, **props(text, TEXT_PROPS), **threed.text(text), **settings.text(text)}


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

    kept = props(line, LINE_PROPS)
    if isinstance(kept.get("markevery"), slice):  # not data: as (start, stop, step) would misread
        del kept["markevery"]
    if isinstance(line, AxLine):
        return {"kind": "axline", "xy1": line._xy1, "xy2": line._xy2, "slope": line._slope, "props": kept}
    return {"kind": "line", "xy": line.get_xydata(), "props": kept, **threed.line(line)}


def _legend(legend):
    from matplotlib.collections import Collection
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    if legend is None:
        return None
    handles = []
    for handle in legend.legend_handles:
        if isinstance(handle, Line2D):
            handles.append({"kind": "line", "props": props(handle, LINE_PROPS)})
        elif isinstance(handle, Patch):
            handles.append({"kind": "patch", "props": props(handle, PATCH_PROPS)})
        elif isinstance(handle, Collection):
            handles.append({"kind": "collection", "props": props(handle, COLLECTION_PROPS)})
        else:
            handles.append({"kind": "line", "props": {}})
    return {
        "visible": legend.get_visible(),
        "texts": [_text(t) for t in legend.get_texts()],
        "title": _text(legend.get_title()),
        "handles": handles,
        "frame_on": legend.get_frame_on(),
        "frame": props(legend.get_frame(), FRAME_PROPS),
        "loc": legend._loc,
        "anchor": _anchor(legend),
        "ncols": legend._ncols,
        "params": {name: getattr(legend, name) for name in LEGEND_PARAMS},
        "layout": extra.legend(legend),
    }


def _anchor(legend):
    """`bbox_to_anchor`: as given (in its parent's box) or, under another transform, in pixels."""
    from matplotlib.transforms import BboxTransformTo

    box = legend._bbox_to_anchor
    if box is None:
        return None
    transform = box._transform
    if isinstance(transform, BboxTransformTo) and transform._boxout is legend.parent.bbox:
        return tuple(box._bbox.bounds), False
    return tuple(box.bounds), True


def _axes(ax):
    return {
        "position": tuple(ax.get_position().bounds),
        "projection": ax.name,
        "more": threed.axes(ax, _text, _axis),  # 3D view and z axis, quiver keys, the artists' order
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
        "scales": (artists.scale(ax.xaxis), artists.scale(ax.yaxis)),
        "ticks": {
            f"{name}_{which}": _axis(getattr(ax, f"{name}axis"), which)
            for name in ("x", "y")
            for which in ("major", "minor")
        },
        "lines": [_line(line) for line in ax.lines],
        "patches": [threed.patch(p) for p in ax.patches],
        "collections": [extra.collection(c) for c in ax.collections],
        "images": [extra.image(im) for im in ax.images],
        "containers": artists.containers(ax),
        "texts": [_text(t) for t in ax.texts],
        "legend": _legend(ax.get_legend()),
        "extra": extra.axes(ax, _text),
        "settings": settings.axes(ax, _text),
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
    grids = []  # filled by artists.layout: the subplot grids the axes sit in
    placed = [_axes(a) | artists.layout(a, axes, grids) for a in axes]
    engine = figure.get_layout_engine()
    layout = "compressed" if getattr(engine, "_compress", False) else LAYOUTS.get(type(engine).__name__)
    return {
        "size": tuple(float(v) for v in figure.get_size_inches()),
        "dpi": float(figure.get_dpi()),
        "named_texts": {name: _text(t) for name, t in named.items() if t is not None},
        "texts": [_text(t) for t in figure.texts if not any(t is n for n in named.values())],
        "legends": [_legend(legend) for legend in figure.legends],
        "subplotpars": {name: getattr(figure.subplotpars, name) for name in artists.GRID_PARAMS},
        "layout": layout,
        "grids": [artists.grid(g) for g in grids],
        "axes": placed,
        "settings": settings.figure(figure, axes),
        "current": current,
    }


def _set_text(target, data):
    if len(data.get("fontfamily", ())) > MAX_COUNT:  # each name is looked up in the font list
        raise ValueError("too many font families")
    target.set_text(data["text"])
    target.set_position(data["position"])
    target.set(**{name: data[name] for name in TEXT_PROPS if name in data})
    settings.set_text(target, data)


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
    from matplotlib.transforms import IdentityTransform

    texts = data["texts"]
    proxies = {
        "line": (lambda: Line2D([], []), LINE_PROPS),
        "patch": (lambda: Rectangle((0, 0), 1, 1), PATCH_PROPS),
        "collection": (
            lambda: PathCollection([matplotlib.markers.MarkerStyle("o").get_path()]),
            COLLECTION_PROPS,
        ),
    }
    kinds = [h["kind"] for h in data["handles"]] + ["line"] * (len(texts) - len(data["handles"]))
    anchor = {}
    if data["anchor"] is not None:  # in pixels: the figure has the same size and dpi
        box, pixels = data["anchor"]
        anchor = {"bbox_to_anchor": box, "bbox_transform": IdentityTransform() if pixels else None}
    for name in ("numpoints", "scatterpoints"):
        artists.in_range(data["params"][name], MAX_COUNT)
    legend = owner.legend(
        [proxies[kind][0]() for kind in kinds],
        [t["text"] for t in texts],
        title=data["title"]["text"],
        loc=data["loc"],
        ncols=artists.in_range(data["ncols"], MAX_COUNT),
        frameon=data["frame_on"],
        **anchor,
        **artists.only(data["params"], LEGEND_PARAMS),
        **extra.legend_kwargs(data["layout"]),
    )
    legend.get_frame().set(**artists.only(data["frame"], FRAME_PROPS))
    for made, handle in zip(legend.legend_handles, data["handles"], strict=False):
        if made is not None:
            made.set(**artists.only(handle["props"], proxies[handle["kind"]][1]))
    for target, text in zip(legend.get_texts(), texts, strict=False):
        _set_text(target, text)
    _set_text(legend.get_title(), data["title"])
    legend.set_visible(data["visible"])
    legend.set_ncols(data["ncols"])  # `ncol=2` with one entry: `legend()` makes it 1


def _add_text(owner, data):
    if "xy" in data and hasattr(owner, "annotate"):  # a figure has no `annotate`
        kwargs = extra.annotate_kwargs(owner, data["annotation"])
        made = owner.annotate(data["text"], data["xy"], xytext=data["position"], **kwargs)
    else:
        made = threed.add_text(owner, data)
    _set_text(made, data)


def _make_axes(figure, data, grids):
    """The axes with its artists; what its ticks, labels, limits and legend show comes after sharing."""
    from matplotlib.lines import Line2D

    ax = artists.make_axes(figure, data, grids)
    if callable(ax.set_frame_on):
        ax.set_frame_on(data["frame_on"])
    ax.set_facecolor(data["facecolor"])
    ax.set_visible(data["visible"])
    ax.set_axis_on() if data["axison"] else ax.set_axis_off()
    for axis, visible in zip((ax.xaxis, ax.yaxis), data["axis_visible"], strict=True):
        axis.set_visible(visible)
    for name, spine in data["spines"].items():
        if name in ax.spines:
            ax.spines[name].set(**artists.only(spine, ("visible", "edgecolor", "linewidth")))
    _set_text(ax.title, data["title"])
    artists.set_scale(ax, "x", data["scales"][0])
    artists.set_scale(ax, "y", data["scales"][1])
    if data["colorbar"] is not None:  # its artists are the colorbar's, drawn again when it is made
        return ax
    for line in data["lines"]:
        kept = artists.only(line["props"], LINE_PROPS)
        if line["kind"] == "axline":
            made = ax.axline(line["xy1"], line["xy2"], slope=line["slope"])
            made.set(**kept)
        else:
            xy = line["xy"]
            made = ax.add_line(Line2D(xy[:, 0] if len(xy) else [], xy[:, 1] if len(xy) else [], **kept))
            threed.set_line(made, line)
    for patch in data["patches"]:
        ax.add_patch(threed.make_patch(patch))
    for collection in data["collections"]:
        extra.add_collection(ax, collection)
    for image in data["images"]:
        extra.add_image(ax, image)
    artists.add_containers(ax, data["containers"])
    for text in data["texts"]:
        _add_text(ax, text)
    return ax


def _finish_axes(ax, data):
    extra.finish_axes(ax, data, _set_text)
    settings.finish_axes(ax, data, _set_text)
    ax.set_aspect(data["aspect"])  # after the images: `imshow` sets it
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
    threed.finish_axes(ax, data, _set_text, _set_ticks)


def rebuild(summary):
    """Close every figure and rebuild the summarized one as the current figure (nothing for None)."""
    import matplotlib.pyplot as plt

    plt.close("all")
    if summary is None:
        return
    figure = plt.figure(figsize=summary["size"], dpi=summary["dpi"])
    figure.subplots_adjust(**artists.only(summary["subplotpars"], artists.GRID_PARAMS))
    grids = artists.make_grids(figure, summary["grids"])
    axes = [_make_axes(figure, data, grids) for data in summary["axes"]]
    artists.link_axes(figure, axes, summary["axes"])
    settings.set_figure(figure, axes, summary["settings"])
    for ax, data in zip(axes, summary["axes"], strict=True):
        _finish_axes(ax, data)
    for name, text in summary["named_texts"].items():
        _set_text(getattr(figure, name)(text["text"]), text)
    for text in summary["texts"]:
        _add_text(figure, text)
    for legend in summary["legends"]:
        _set_legend(figure, legend)
    if summary["layout"] is not None:
        figure.set_layout_engine(
            artists.pick(summary["layout"], ("tight", "constrained", "compressed"), "layout")
        )
    if summary["current"] is not None:
        figure.sca(axes[summary["current"]])
