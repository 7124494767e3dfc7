"""Runs INSIDE DS-1000 sandboxes: the parts of ds1000_figure's summary for 3D axes, quivers and each
axes' draw order, each as data and back.

- 3D axes: the view (elevation, azimuth, roll, vertical axis, distance), projection type and focal
  length, box aspect, computed z-order, grid, and the z axis (label, limits, scale, tick settings, ticks);
- 3D artists keep their 3D data: scatter (`Path3DCollection`: 3D offsets, sizes, line widths, unshaded
  colours, depth shading), polygons (`Poly3DCollection` of `plot_surface`, `plot_trisurf`, `bar3d`,
  `add_collection3d`: 3D vertices and codes, colours, z-sorting), line collections (`Line3DCollection`
  of `plot_wireframe`, a 3D `quiver`: 3D segments), patches (`Patch3D`: 3D vertices), lines (`Line3D`:
  `get_data_3d()`) and texts (`Text3D`: z and direction). Each is summarized in 2D as on any axes
  (ds1000_figure_artists) and, rebuilt on a 3D axes, turned 3D as matplotlib's own `*_2d_to_3d` do and
  given the kept 3D data, so the rebuilt figure draws;
- quivers (`Quiver`: X, Y, U, V, C, scale, units, angles, pivot, width, head shape) and their keys;
- the order of each axes' artists in `ax._children` (add order: `get_children()` and drawing follow it).

Rebuilding reads a summary sent from a solution's sandbox: as in ds1000_figure_artists, every kind, name
and index in it is checked against what this module writes (an unknown one is a ValueError) and sizes are
bounded, so a hostile summary is an error, never code run or a hang.
"""

import sys

import ds1000_figure_artists as artists
from ds1000_figure_artists import COLLECTION_PROPS, MAX_IMAGE_CELLS, PATCH_PROPS, in_range, only, pick

ORDERED = ("lines", "patches", "collections", "images", "texts", "tables")  # the artist lists kept
QUIVER_CHOICES = {
    "units": ("width", "height", "dots", "inches", "x", "y", "xy"),
    "scale_units": (None, "width", "height", "dots", "inches", "x", "y", "xy"),
    "pivot": ("tail", "middle", "tip"),
}
QUIVER_NUMBERS = ("scale", "width", "headwidth", "headlength", "headaxislength", "minshaft", "minlength")
KEY_CHOICES = {"coord": ("axes", "figure", "data", "inches"), "labelpos": ("N", "S", "E", "W")}
ZSORTS = ("average", "min", "max")


def _art3d():
    """mplot3d's artists, None where it was never imported (then no artist is 3D): importing costs."""
    return sys.modules.get("mpl_toolkits.mplot3d.art3d")


def _floats(values):
    """Summarizing: `values` as a float array (None when they are no numbers: dates...)."""
    import numpy as np

    try:
        return np.asarray(values, dtype=float)
    except (TypeError, ValueError):
        return None


def _numbers(value, ndim=None, masked=False):
    """Rebuilding: a bounded numeric array of `ndim` dimensions from a summary, else a ValueError."""
    import numpy as np

    if (
        not isinstance(value, np.ndarray)
        or (isinstance(value, np.ma.MaskedArray) and not masked)
        or value.dtype.kind not in "biuf"
        or value.size > MAX_IMAGE_CELLS
        or (ndim is not None and value.ndim != ndim)
    ):
        raise ValueError("a value that is not a bounded numeric array")
    return value


def _number(value, positive=False):
    import math

    import numpy as np

    if not isinstance(value, (int, float, np.integer, np.floating)) or not math.isfinite(value):
        raise ValueError(f"a setting that is not a finite number: {str(value)[:80]!r}")
    if positive and value <= 0:
        raise ValueError(f"a setting that is not positive: {value!r}")
    return value if type(value) in (int, float) else float(value)


def _arrays(items, columns):
    """Rebuilding: a bounded list of (N, columns) numeric arrays (polygons, segments)."""
    if not isinstance(items, list) or len(items) > MAX_IMAGE_CELLS:
        raise ValueError("a list of arrays that is not bounded")
    arrays = [_numbers(item, 2) for item in items]
    if any(a.shape[1] != columns for a in arrays) or sum(a.size for a in arrays) > MAX_IMAGE_CELLS:
        raise ValueError("arrays of the wrong shape or too large")
    return arrays


def _codes(codes):
    import numpy as np
    from matplotlib.path import Path

    if codes is not None and not np.isin(_numbers(codes, 1), list(Path.NUM_VERTICES_FOR_CODE)).all():
        raise ValueError("unknown path codes")
    return codes


def _path_codes(codes):
    import numpy as np
    from matplotlib.path import Path

    return None if codes is None else np.asarray(codes, dtype=Path.code_type)


def _xyz(value):
    if not isinstance(value, tuple) or len(value) != 3:
        raise ValueError("3D data that is not three arrays")
    arrays = [_numbers(v, 1) for v in value]
    if len({len(a) for a in arrays}) != 1:
        raise ValueError("3D data of unequal lengths")
    return arrays


def line(artist):
    art3d = _art3d()
    if art3d is None or not isinstance(artist, art3d.Line3D):
        return {}
    xyz = tuple(_floats(v) for v in artist.get_data_3d())
    if any(v is None or v.ndim != 1 for v in xyz) or len({len(v) for v in xyz}) != 1:
        return {}  # no numbers (dates...) or not a line's: the rebuilt line stays flat
    return {"xyz": xyz}


def set_line(made, data):
    """Turn the rebuilt line 3D where the summary kept 3D data (and its axes is 3D)."""
    if "xyz" in data and made.axes.name == "3d":
        from mpl_toolkits.mplot3d import art3d

        art3d.line_2d_to_3d(made)
        made.set_data_3d(*_xyz(data["xyz"]))


def text(artist):
    art3d = _art3d()
    if art3d is None or not isinstance(artist, art3d.Text3D):
        return {}
    try:
        return {"z3d": (float(artist._z), tuple(float(v) for v in artist._dir_vec))}
    except (TypeError, ValueError):
        return {}


def add_text(owner, data):
    """A text on `owner` (a figure or an axes, 2D or 3D) at the kept position."""
    from matplotlib.axes import Axes

    (x, y), content = data["position"], data["text"]
    if "z3d" in data and getattr(owner, "name", None) == "3d":
        z, direction = data["z3d"]
        direction = tuple(_number(v) for v in direction)
        return owner.text(x, y, _number(z), content, zdir=direction if len(direction) == 3 else "z")
    return Axes.text(owner, x, y, content) if isinstance(owner, Axes) else owner.text(x, y, content)


def patch(p):
    """A patch's summary (ds1000_figure_artists' for the 2D kinds); a 3D one keeps its 3D vertices."""
    art3d = _art3d()
    if art3d is None or not isinstance(p, art3d.Patch3D):
        return artists.patch(p)
    kept = {"props": artists.props(p, PATCH_PROPS), "codes": getattr(p, "_code3d", None)}
    return {"kind": "patch3d", "xyz": _floats(p._segment3d), **kept}


def make_patch(data):
    if data["kind"] != "patch3d":
        return artists.make_patch(data)
    from matplotlib.patches import PathPatch
    from matplotlib.path import Path
    from mpl_toolkits.mplot3d import art3d

    xyz, codes = _numbers(data["xyz"], 2), _codes(data["codes"])
    if xyz.shape[1] != 3 or len(xyz) == 0:
        raise ValueError("3D patch vertices that are not (N, 3)")
    made = PathPatch(Path(xyz[:, :2], codes), **only(data["props"], PATCH_PROPS))
    art3d.pathpatch_2d_to_3d(made, z=xyz[:, 2])
    if codes is None:  # a plain Patch3D
        made.__class__ = art3d.Patch3D
    made._path2d = made._path  # until drawn: `add_patch` reads it
    return made


def collection(c):
    """What a quiver or a 3D collection keeps beyond ds1000_figure_artists' summary ({} for others)."""
    from matplotlib.quiver import Quiver

    if isinstance(c, Quiver):
        settings = {name: getattr(c, name) for name in (*QUIVER_CHOICES, *QUIVER_NUMBERS)}
        settings["angles"] = c.angles if isinstance(c.angles, str) else _floats(c.angles)
        arrays = {name: getattr(c, name) for name in ("X", "Y", "U", "V")}
        return {"kind": "quiver", "quiver": {**arrays, "C": c.get_array(), "settings": settings}}
    art3d = _art3d()
    try:  # 3D data that is no numbers (dates...) is not kept: the rebuilt collection stays flat
        return {} if art3d is None else _collection_3d(c, art3d)
    except (TypeError, ValueError, AttributeError, IndexError):
        return {}


def _collection_3d(c, art3d):
    import numpy as np
    from matplotlib.collections import Collection

    colors = {"face": Collection.get_facecolor(c), "edge": Collection.get_edgecolor(c)}  # unshaded, unsorted
    if isinstance(c, (art3d.Path3DCollection, art3d.Patch3DCollection)):
        xyz = tuple(np.array(v).ravel() for v in np.broadcast_arrays(*(_floats(v) for v in c._offsets3d)))
        sizes = tuple(np.atleast_1d(_floats(v)) for v in (c._sizes3d, c._linewidths3d))
        points = {"xyz": xyz, "depthshade": bool(c._depthshade), "sizes": sizes}
        return {"3d": {"kind": "points", **points, **colors}}
    if isinstance(c, art3d.Poly3DCollection):
        verts = [c._vec[:3, s].T.copy() for s in c._segslices]
        zsort = next((k for k, f in c._zsort_functions.items() if f is c._zsortfunc), "average")
        sort = None if c._sort_zpos is None else float(c._sort_zpos)
        colors = {"face": c._facecolor3d, "edge": c._edgecolor3d}
        mapped = (bool(c._face_is_mapped), bool(c._edge_is_mapped))
        codes = None if c._codes3d is None else [_path_codes(k) for k in c._codes3d]  # lists of ints too
        polygons = {"verts": verts, "codes": codes, "closed": bool(c._closed), "zsort": (zsort, sort)}
        return {"3d": {"kind": "polygons", **polygons, **colors, "mapped": mapped}}
    if isinstance(c, art3d.Line3DCollection):
        return {"3d": {"kind": "lines", "segments": [_floats(s).reshape(-1, 3) for s in c._segments3d]}}
    if isinstance(c, getattr(art3d, "Collection3D", ())):  # a 3D contour set...
        paths = [(_floats(v).reshape(-1, 3), _path_codes(k)) for v, k in c._3dverts_codes]
        return {"3d": {"kind": "paths", "paths": paths}}
    return {}


def add_quiver(ax, data):
    import matplotlib

    q = data["quiver"]
    arrays = [_numbers(q[name], 1, masked=True) for name in ("X", "Y", "U", "V")]
    if q["C"] is not None:
        arrays.append(_numbers(q["C"], 1, masked=True))
    settings = dict(only(q["settings"], (*QUIVER_CHOICES, *QUIVER_NUMBERS, "angles")))
    for name, allowed in QUIVER_CHOICES.items():
        pick(settings[name], allowed, name)
    for name in QUIVER_NUMBERS:
        if settings[name] is not None:
            _number(settings[name])
    if isinstance(settings["angles"], str):
        pick(settings["angles"], ("uv", "xy"), "angles")
    else:
        _numbers(settings["angles"], 1)
    made = ax.quiver(*arrays, **settings)
    if data["cmap"] in matplotlib.colormaps:
        made.set_cmap(data["cmap"])
    if q["C"] is not None:
        made.set_clim(*data["clim"])
    made.set(**only(data["props"], COLLECTION_PROPS))


def to_3d(made, data):
    """Turn a rebuilt collection 3D with its kept 3D data (on a 3D axes)."""
    if data.get("3d") is None or made.axes.name != "3d":
        return
    import numpy as np
    from matplotlib.collections import LineCollection, PolyCollection
    from mpl_toolkits.mplot3d import art3d

    more = data["3d"]
    kind = pick(more["kind"], ("points", "polygons", "lines", "paths"), "3D collection kind")
    wanted = {"points": art3d.Path3DCollection, "polygons": PolyCollection, "lines": LineCollection}
    if type(made) is not wanted.get(kind, type(made)) or hasattr(made, "_3dverts_codes"):
        raise ValueError("3D data for another kind of collection")
    if kind == "points":
        xs, ys, zs = _xyz(more["xyz"])
        sizes, widths = (_numbers(v, 1) for v in more["sizes"])
        made.set_offsets(np.column_stack([xs, ys]))
        made.set(facecolor=more["face"], edgecolor=more["edge"], sizes=sizes, linewidth=widths)
        made.set_depthshade(bool(more["depthshade"]))
        made.set_3d_properties(zs, "z")
    elif kind == "polygons":
        art3d.poly_collection_2d_to_3d(made)
        verts, codes = _arrays(more["verts"], 3), more["codes"]
        if codes is None:
            made.set_verts(verts, closed=bool(more["closed"]))
            made._codes3d = None  # as a Poly3DCollection made with no codes
        elif not isinstance(codes, list) or len(codes) != len(verts):
            raise ValueError("3D polygon codes that do not match the polygons")
        else:
            made.set_verts_and_codes(verts, [_codes(c) for c in codes])
        zsort, sort = more["zsort"]
        made.set_zsort(pick(zsort, ZSORTS, "z-sort"))
        made.set_sort_zpos(None if sort is None else _number(sort))
        face_mapped, edge_mapped = more["mapped"]
        if not face_mapped:
            made.set_facecolor(more["face"])
        if not edge_mapped:
            made.set_edgecolor(more["edge"])
    elif kind == "lines":
        art3d.line_collection_2d_to_3d(made)
        made.set_segments(_arrays(more["segments"], 3))
    else:
        paths = more["paths"]
        if not isinstance(paths, list) or len(paths) > MAX_IMAGE_CELLS:
            raise ValueError("3D paths that are not a bounded list")
        verts = _arrays([v for v, _ in paths], 3)
        art3d.collection_2d_to_3d(made)
        made._3dverts_codes = [(v, _codes(c)) for v, (_, c) in zip(verts, paths, strict=True)]


def axes(ax, text, axis):
    """A 3D axes' view and z axis, the quiver keys and the order of the artists of an axes."""

    lists = _lists(ax)
    where = {id(a): (name, i) for name, items in lists.items() for i, a in enumerate(items)}
    order = [where[id(a)] for a in ax._children if id(a) in where]
    keys = [
        {
            "quiver": next((i for i, c in enumerate(ax.collections) if c is k.Q), None),
            "at": (k.X, k.Y, k.U, k.angle, k._labelsep_inches),
            "label": k.label,
            "settings": {"coord": k.coord, "labelpos": k.labelpos},
            "colors": (k.color, k.labelcolor),
        }
        for k in lists["quiverkeys"]
    ]
    view = None
    if ax.name == "3d":
        for each in (ax.xaxis, ax.yaxis, ax.zaxis):  # a 3D axes labels its ticks when drawn: as then
            each._update_ticks()
        view = {
            "view": (ax.elev, ax.azim, ax.roll, "xyz"[ax._vertical_axis]),
            "camera": (ax._dist, ax._focal_length, tuple(float(v) for v in ax._box_aspect)),
            "flags": (bool(ax.computed_zorder), bool(ax._draw_grid)),
            "label": text(ax.zaxis.get_label()),
            "limits": tuple(ax.get_zlim()),
            "scale": artists.scale(ax.zaxis),
            "tick_kw": (dict(ax.zaxis._major_tick_kw), dict(ax.zaxis._minor_tick_kw)),
            "ticks": {which: axis(ax.zaxis, which) for which in ("major", "minor")},
        }
    return {"three_d": view, "quiverkeys": keys, "order": order}


def finish_axes(ax, data, set_text, set_ticks):
    """Last: the 3D view and z axis, the quiver keys, then the artists put back in their order."""
    import math

    import matplotlib.colors
    import numpy as np
    from matplotlib.quiver import Quiver

    more, view = data["more"], data["more"]["three_d"]
    if view is not None and ax.name == "3d":
        elev, azim, roll, vertical = view["view"]
        ax.view_init(elev, azim, roll, vertical_axis=pick(vertical, ("x", "y", "z"), "vertical axis"))
        dist, focal, box = view["camera"]
        if not isinstance(box, tuple) or len(box) != 3:
            raise ValueError("a box aspect that is not three numbers")
        ax._box_aspect = np.array([_number(v, positive=True) for v in box])
        ax._dist = _number(dist, positive=True)
        focal = float("inf") if focal == math.inf else _number(focal, positive=True)
        ax.set_proj_type("ortho" if focal == math.inf else "persp", None if focal == math.inf else focal)
        ax.computed_zorder, grid = (bool(v) for v in view["flags"])
        ax.grid(grid)
        artists.set_scale(ax, "z", view["scale"])
        ax.zaxis._major_tick_kw, ax.zaxis._minor_tick_kw = (dict(kw) for kw in view["tick_kw"])
        ax.zaxis.reset_ticks()
        for which in ("major", "minor"):
            set_ticks(ax.zaxis, which, view["ticks"][which])
        set_text(ax.zaxis.get_label(), view["label"])
        ax.set_zlim(view["limits"])
    if data["colorbar"] is not None:  # its artists are the colorbar's
        return
    for key in more["quiverkeys"]:
        quiver = ax.collections[in_range(key["quiver"], len(ax.collections))]
        x, y, u, angle, labelsep = (_number(v) for v in key["at"])
        settings = only(key["settings"], KEY_CHOICES)
        settings = {name: pick(v, KEY_CHOICES[name], name) for name, v in settings.items()}
        color, labelcolor = (None if c is None else matplotlib.colors.to_rgba(c) for c in key["colors"])
        if not isinstance(quiver, Quiver) or not isinstance(key["label"], str):
            raise ValueError("a quiver key without its quiver or label")
        place = {"coordinates": settings["coord"], "labelpos": settings["labelpos"], "labelsep": labelsep}
        ax.quiverkey(quiver, x, y, u, key["label"], angle=angle, color=color, labelcolor=labelcolor, **place)
    set_order(ax, more["order"])


def set_order(ax, order):
    """Put the axes' artists back in the kept order (the ones it does not name after them; an index past
    the rebuilt ones is passed over)."""
    if not isinstance(order, list) or len(order) > MAX_IMAGE_CELLS:
        raise ValueError("an artist order that is not a bounded list")
    lists = _lists(ax)
    placed, seen = [], set()
    for name, i in order:
        items = lists[pick(name, lists, "artist list")]
        if in_range(i, MAX_IMAGE_CELLS) < len(items) and id(items[i]) not in seen:
            seen.add(id(items[i]))
            placed.append(items[i])
    ax._children = placed + [a for a in ax._children if id(a) not in seen]


def _lists(ax):
    from matplotlib.quiver import QuiverKey

    lists = {name: list(getattr(ax, name)) for name in ORDERED}
    return lists | {"quiverkeys": [a for a in ax._children if isinstance(a, QuiverKey)]}
