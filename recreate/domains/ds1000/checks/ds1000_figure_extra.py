"""Runs INSIDE DS-1000 sandboxes: more of ds1000_figure's summary, each as data and back: colour
normalisations (of images, collections and colorbars: `LogNorm`, `BoundaryNorm`... by class, with their
settings), contour sets (`contour`, `contourf`: levels, paths, colours, and which texts are their
`clabel`s), `pcolor`'s meshes (`PolyQuadMesh`), tables (`plt.table`: cells, labels, location, box, font
size), the legend's layout (mode, alignment, marker side, box style) and annotation coordinates given as
an (x, y) pair, an axes' or figure's transform or another artist.

Rebuilding reads a summary sent from a solution's sandbox: as in ds1000_figure_artists, every kind, name
and index in it is checked against what this module writes (an unknown one is a ValueError) and sizes are
bounded, so a hostile summary is an error, never code run or a hang.
"""

import ds1000_figure_3d as more
import ds1000_figure_artists as artists
from ds1000_figure_artists import COLLECTION_PROPS, in_range, only, pick, props

NORMS = {  # class name (of matplotlib.colors): the settings kept
    "Normalize": ("vmin", "vmax", "clip"),
    "LogNorm": ("vmin", "vmax", "clip"),
    "NoNorm": ("vmin", "vmax", "clip"),
    "SymLogNorm": ("linthresh", "linscale", "base", "vmin", "vmax", "clip"),
    "AsinhNorm": ("linear_width", "vmin", "vmax", "clip"),
    "PowerNorm": ("gamma", "vmin", "vmax", "clip"),
    "TwoSlopeNorm": ("vcenter", "vmin", "vmax"),
    "CenteredNorm": ("vcenter", "halfrange", "clip"),
    "BoundaryNorm": ("boundaries", "ncolors", "clip", "extend", "vmin", "vmax"),
    "FuncNorm": ("vmin", "vmax", "clip"),  # its functions were code: identity ones stand for them
}
NORM_ATTRIBUTES = {"ncolors": "Ncmap"}
EXTENDS = ("neither", "both", "min", "max")
MAX_LEVELS = 4096  # of a contour set or a BoundaryNorm, and of a contour set's labels
MAX_CELLS = 4096  # of an axes' tables, all together
MAX_COLORS = 1 << 16
CONTOUR_PROPS = ("alpha", "zorder", "label", "clip_on", "visible")
TABLE_PROPS = ("zorder", "label", "visible")
CELL_PROPS = ("facecolor", "edgecolor", "linewidth", "linestyle", "fill", "alpha", "visible")
LEGEND_LAYOUT = {"mode": (None, "expand"), "alignment": ("center", "left", "right")}
LEGEND_LAYOUT |= {"markerfirst": (True, False), "fancybox": (True, False)}
TRANSFORMS = ("data", "axes", "xaxis", "yaxis", "figure")
REFERABLE = ("lines", "patches", "collections", "images", "texts")  # all made before the annotations


def _plain(value):
    return value.item() if hasattr(value, "item") and getattr(value, "ndim", 1) == 0 else value


def norm(n):
    """(class name, settings) of a mappable's norm; another class keeps its limits as a `Normalize`."""
    from matplotlib import colors

    kind = type(n).__name__
    kind = kind if kind in NORMS and getattr(colors, kind, None) is type(n) else "Normalize"
    kept = {}
    for name in NORMS[kind]:
        attribute = NORM_ATTRIBUTES.get(name, name)
        owner = n if hasattr(n, attribute) else getattr(n, "_scale", None)  # SymLogNorm's linscale, base
        kept[name] = _plain(getattr(owner, attribute, None))
    return {"kind": kind, "params": kept}


def make_norm(data):
    import numpy as np
    from matplotlib import colors

    kind = pick(data["kind"], NORMS, "norm")
    kept = dict(only(data["params"], NORMS[kind]))
    for name, value in kept.items():
        if name == "boundaries":
            kept[name] = value = np.asarray(value)
            if value.dtype.kind not in "iuf" or value.ndim != 1 or not 2 <= value.size <= MAX_LEVELS:
                raise ValueError("norm boundaries that are not a bounded list")
        elif name == "ncolors":
            in_range(value, MAX_COLORS)
        elif name == "extend":
            pick(value, EXTENDS, "extend")
        elif value is not None and not isinstance(value, (int, float)):  # a bool is an int
            raise ValueError(f"a norm setting that is not a number: {name}")
    limits = {name: kept.pop(name) for name in ("vmin", "vmax") if name in kept}
    if kind == "FuncNorm":
        kept["functions"] = (lambda v: v, lambda v: v)
    made = getattr(colors, kind)(**kept)
    for name, value in limits.items():  # after: TwoSlopeNorm's constructor refuses some it keeps
        setattr(made, name, None)  # first: the setter skips a value equal to the one held (4.0 for 4)
        setattr(made, name, value)
    return made


def image(im):
    return {**artists.image(im), "norm": norm(im.norm)}


def add_image(ax, data):
    artists.add_image(ax, data)
    ax.images[-1].set_norm(make_norm(data["norm"]))


def collection(c):
    from matplotlib.collections import PolyQuadMesh
    from matplotlib.contour import ContourSet

    if isinstance(c, ContourSet):
        data = _contour(c)
    elif isinstance(c, PolyQuadMesh):  # pcolor: its full array (get_array drops the masked cells)
        data = {"kind": "polymesh", "mesh": c.get_coordinates(), "array": c._A, "clim": tuple(c.get_clim())}
        data |= {"cmap": c.cmap.name, "props": props(c, COLLECTION_PROPS)}
    else:
        data = artists.collection(c)
    return {**data, "norm": norm(c.norm), **more.collection(c)}  # a quiver's or a 3D one's own data


def add_collection(ax, data):
    import matplotlib
    import numpy as np
    from matplotlib.collections import PolyQuadMesh

    if data["kind"] == "contour":
        _add_contour(ax, data)
    elif data["kind"] == "polymesh":
        coordinates = data["mesh"]
        if not isinstance(coordinates, np.ndarray) or coordinates.size > artists.MAX_IMAGE_CELLS:
            raise ValueError("a mesh that is not a bounded array")
        made = ax.add_collection(PolyQuadMesh(coordinates))
        if data["cmap"] in matplotlib.colormaps:
            made.set_cmap(data["cmap"])
        if data["array"] is not None:
            made.set_array(data["array"])
            made.set_clim(*data["clim"])
        made.set(**only(data["props"], COLLECTION_PROPS))
    elif data["kind"] == "quiver":
        more.add_quiver(ax, data)
    else:
        artists.add_collection(ax, data)
    ax.collections[-1].set_norm(make_norm(data["norm"]))
    more.to_3d(ax.collections[-1], data)


def _contour(cs):
    import numpy as np
    from matplotlib.contour import QuadContourSet
    from matplotlib.tri import TriContourSet

    texts = list(cs.axes.texts) if cs.axes is not None else []
    labels = [next((i for i, t in enumerate(texts) if t is label), None) for label in cs.labelTexts]
    levels = np.asarray(getattr(cs, "labelLevelList", []), dtype=float)
    box = [tuple(float(v) for v in getattr(cs, name, (0, 0))) for name in ("_mins", "_maxs")]
    return {
        "kind": "contour",
        "class": next(
            (type(cs).__name__ for k in (QuadContourSet, TriContourSet) if type(cs) is k), "ContourSet"
        ),
        "levels": np.asarray(cs.levels, dtype=float),
        "filled": bool(cs.filled),
        "extend": cs.extend,
        "range": (float(cs.zmin), float(cs.zmax), *box),
        "paths": [(p.vertices, p.codes) for p in cs.get_paths()],
        "colors": cs.colors,
        "linewidths": None if cs.filled else cs.get_linewidths(),
        "linestyles": (cs._orig_linestyles, cs.negative_linestyles),
        "hatches": list(cs.hatches),
        "origin": cs.origin,
        "extent": cs.extent,
        "cmap": cs.cmap.name,
        "clim": tuple(cs.get_clim()),
        "props": props(cs, CONTOUR_PROPS),
        "labels": ([i for i in labels if i is not None], levels),
    }


def _bounded(values, what):
    if values is not None and (not isinstance(values, (list, tuple, str)) or len(values) > MAX_LEVELS):
        raise ValueError(f"{what} that are not a bounded list")
    return values


def _add_contour(ax, data):
    import matplotlib
    import numpy as np
    from matplotlib.contour import ContourSet, QuadContourSet
    from matplotlib.path import Path
    from matplotlib.tri import TriContourSet

    levels = np.asarray(data["levels"], dtype=float)
    if levels.ndim != 1 or levels.size > MAX_LEVELS or len(data["paths"]) > MAX_LEVELS + 2:
        raise ValueError("contour levels or paths that are not bounded lists")
    paths = []
    for vertices, codes in data["paths"]:
        if codes is not None and not np.isin(codes, list(Path.NUM_VERTICES_FOR_CODE)).all():
            raise ValueError("unknown path codes")
        paths.append(Path(vertices, codes))
    extent = data["extent"] if data["extent"] is None else [float(v) for v in data["extent"]]
    kw = {
        "levels": levels,
        "filled": bool(data["filled"]),
        "extend": pick(data["extend"], EXTENDS, "extend"),
        "extent": extent,
    }
    kw["origin"] = pick(data["origin"], (None, "lower", "upper"), "origin")
    kw["hatches"] = [
        pick(h, (None,), "hatch") if not isinstance(h, str) else h
        for h in _bounded(data["hatches"], "hatches")
    ]
    kw["linestyles"], kw["negative_linestyles"] = (_bounded(v, "linestyles") for v in data["linestyles"])
    kw["norm"] = make_norm(data["norm"])
    if data["colors"] is not None:
        matplotlib.colors.to_rgba_array(_bounded(data["colors"], "colours"))  # a ValueError if not colours
        kw["colors"] = data["colors"]
    elif data["cmap"] in matplotlib.colormaps:
        kw["cmap"] = data["cmap"]
    if data["linewidths"] is not None and not kw["filled"]:
        kw["linewidths"] = [float(v) for v in _bounded(list(data["linewidths"]), "line widths")]
    kind = pick(data["class"], ("QuadContourSet", "TriContourSet", "ContourSet"), "contour set")
    if kind != "ContourSet":  # made on a few points spanning the data's range, then given the kept paths
        zmin, zmax, (x0, y0), (x1, y1) = data["range"]
        if kind == "QuadContourSet":
            made = QuadContourSet(
                ax, [[x0, x1]] * 2, [[y0, y0], [y1, y1]], [[zmin, zmax], [zmax, zmin]], **kw
            )
        else:
            made = TriContourSet(ax, [x0, x1, x0, x1], [y0, y0, y1, y1], [zmin, zmax, zmax, zmin], **kw)
        if len(made._paths) != len(paths):
            raise ValueError("contour paths that do not match the levels")
        made._paths = paths
    else:
        segments = ([[p.vertices] for p in paths], [[p.codes] for p in paths])
        made = ContourSet(ax, kw.pop("levels"), *segments, **kw)
    made.set_clim(*data["clim"])
    made.set(**only(data["props"], CONTOUR_PROPS))


def axes(ax, text):
    """What of an axes `finish_axes` puts back: tables, the norm of a colorbar drawn for no artist."""
    bar = getattr(ax, "_colorbar", None)
    return {
        "tables": [_table(t, text) for t in ax.tables],
        "bar_norm": None if bar is None else norm(bar.mappable.norm),
    }


def finish_axes(ax, data, set_text):
    """After the colorbars, before the ticks (a colorbar's norm resets them) and after the texts."""
    import numpy as np
    from matplotlib.contour import ContourSet

    more = data["extra"]
    bar = data["colorbar"]
    if bar is not None and bar["mappable"] is None and more["bar_norm"] is not None:
        ax._colorbar.mappable.set_norm(make_norm(more["bar_norm"]))
    for made, item in zip(ax.collections, data["collections"], strict=False):
        if isinstance(made, ContourSet) and item["kind"] == "contour":
            indexes, levels = item["labels"]
            levels = np.asarray(levels, dtype=float)
            if levels.ndim != 1 or len(levels) > MAX_LEVELS:
                raise ValueError("contour label levels that are not a bounded list")
            made.labelTexts = [ax.texts[in_range(i, len(ax.texts))] for i in indexes]
            made.labelLevelList = levels
    if sum(len(t["cells"]) for t in more["tables"]) > MAX_CELLS:
        raise ValueError("too many table cells")
    for table in more["tables"]:
        _add_table(ax, table, set_text)


def _table(t, text):
    from matplotlib.transforms import Bbox

    box = t._bbox
    if box is not None:  # as given: a Bbox or a list (checks compare `tuple(table._bbox)`)
        box = ("box", list(box.bounds)) if isinstance(box, Bbox) else ("list", [_plain(v) for v in box])
    cells = [
        {
            "at": (int(row), int(col)),
            "xy": tuple(float(v) for v in cell.get_xy()),
            "size": (float(cell.get_width()), float(cell.get_height())),
            "loc": cell._loc,
            "edges": cell.visible_edges,
            "props": props(cell, CELL_PROPS),
            "text": text(cell.get_text()),
        }
        for (row, col), cell in t.get_celld().items()
    ]
    settings = {"loc": t._loc, "bbox": box, "edges": t.edges, "auto_font": bool(t._autoFontsize)}
    columns = [int(c) for c in t._autoColumns]
    return {**settings, "auto_columns": columns, "props": props(t, TABLE_PROPS), "cells": cells}


def _add_table(ax, data, set_text):
    from matplotlib.table import Cell, Table
    from matplotlib.transforms import Bbox

    def index(value):  # of a row or column: -1 for the row labels
        if type(value) is not int or not -MAX_CELLS <= value < MAX_CELLS:
            raise ValueError(f"a table index out of range: {str(value)[:80]!r}")
        return value

    box = data["bbox"]
    if box is not None:
        kind, bounds = pick(box[0], ("box", "list"), "table box"), list(box[1])
        if len(bounds) != 4 or not all(isinstance(v, (int, float)) for v in bounds):
            raise ValueError("a table box that is not four numbers")
        box = Bbox.from_bounds(*bounds) if kind == "box" else bounds
    table = Table(ax, loc=pick(data["loc"], tuple(Table.codes.values()), "table location"), bbox=box)
    table.edges = Cell((0, 0), 1, 1, visible_edges=data["edges"]).visible_edges  # checked by a Cell
    for cell in data["cells"]:
        width, height = (float(v) for v in cell["size"])
        loc = pick(cell["loc"], ("left", "center", "right"), "cell text location")
        made = table.add_cell(index(cell["at"][0]), index(cell["at"][1]), width, height, loc=loc)
        made.set_xy(tuple(float(v) for v in cell["xy"]))
        made.visible_edges = cell["edges"]
        made.set(**only(cell["props"], CELL_PROPS))
        set_text(made.get_text(), cell["text"])
    table._autoFontsize = bool(data["auto_font"])
    if len(data["auto_columns"]) > MAX_CELLS:
        raise ValueError("too many table columns")
    table._autoColumns = [index(c) for c in data["auto_columns"]]
    table.set(**only(data["props"], TABLE_PROPS))
    ax.add_table(table)


def legend(lg):
    """How the legend lays its entries out: mode, alignment, marker side, rounded box."""
    from matplotlib.offsetbox import TextArea
    from matplotlib.patches import BoxStyle

    entries = [box for column in lg._legend_handle_box.get_children() for box in column.get_children()]
    first = entries[0].get_children() if entries else []
    return {
        "mode": lg._mode,
        "alignment": lg._alignment,
        "markerfirst": not first or not isinstance(first[0], TextArea),
        "fancybox": isinstance(lg.get_frame().get_boxstyle(), BoxStyle.Round),
    }


def legend_kwargs(data):
    return {name: pick(value, LEGEND_LAYOUT[name], name) for name, value in only(data, LEGEND_LAYOUT).items()}


def transforms(ax):
    named = (ax.transData, ax.transAxes, ax.get_xaxis_transform(), ax.get_yaxis_transform())
    return dict(zip(TRANSFORMS, (*named, ax.figure.transFigure), strict=True))


def _coords(value, text, pair=True):
    """Coordinates as data: a name, an (x, y) pair of them, {"transform": name} or {"artist": where}."""
    if isinstance(value, str):
        return value if value in artists.COORDS else "data"
    if pair and isinstance(value, tuple) and len(value) == 2:
        return tuple(_coords(v, text, False) for v in value)
    ax = text.axes
    if ax is None:
        return "data"
    named = next((name for name, t in transforms(ax).items() if value is t), None)
    if named is not None:
        return {"transform": named}
    for name in REFERABLE:
        items = list(getattr(ax, name))
        if name == "texts":  # only the ones made before it
            items = items[: next((i for i, t in enumerate(items) if t is text), 0)]
        found = next((i for i, a in enumerate(items) if a is value), None)
        if found is not None:
            return {"artist": (name, found)}
    return "data"


def _coords_back(ax, value, pair=True):
    if isinstance(value, str):
        return pick(value, artists.COORDS, "coordinates")
    if pair and isinstance(value, tuple) and len(value) == 2:
        return tuple(_coords_back(ax, v, False) for v in value)
    if isinstance(value, dict) and list(value) == ["transform"]:
        return transforms(ax)[pick(value["transform"], TRANSFORMS, "transform")]
    if isinstance(value, dict) and list(value) == ["artist"]:
        name, i = value["artist"]
        items = getattr(ax, pick(name, REFERABLE, "artist list"))
        return items[in_range(i, len(items))]
    raise ValueError(f"unknown coordinates {str(value)[:80]!r}")


def annotation(text):
    data = artists.annotation(text)
    return {**data, "xycoords": _coords(text.xycoords, text), "textcoords": _coords(text.anncoords, text)}


def annotate_kwargs(ax, data):
    kwargs = artists.annotate_kwargs({**data, "xycoords": "data", "textcoords": "data"})
    coords = {name: _coords_back(ax, data[name]) for name in ("xycoords", "textcoords")}
    return {**kwargs, **coords}
