"""Runs INSIDE DS-1000 sandboxes: the parts of ds1000_figure's summary that take more than a list of
properties (patches and collections by class, images, containers, scales, subplot grids, shared axes,
colorbars, annotation arrows), each as data and back. Norms, contour sets, `pcolor` meshes, tables,
legend layout and annotation coordinates other than names are ds1000_figure_extra's; axes and
figure settings, text boxes, collections' line styles and transforms ds1000_figure_axes'.

Rebuilding reads a summary sent from a solution's sandbox: every kind, name and index in it is checked
against what this module writes (an unknown one is a ValueError) and sizes are bounded, so a hostile
summary is an error, never code run or a hang.
"""

PATCH_PROPS = ("facecolor", "edgecolor", "hatch", "linewidth", "linestyle", "fill", "alpha", "zorder")
PATCH_PROPS += ("label", "visible")
COLLECTION_PROPS = ("facecolor", "edgecolor", "sizes", "linewidth", "hatch", "alpha", "zorder", "label")
COLLECTION_PROPS += ("clip_on", "visible")
IMAGE_PROPS = ("alpha", "zorder", "label", "visible")
MAX_IMAGE_CELLS = 1 << 22  # an image's values beyond this are not sent (its shape and settings are)
MAX_GRID = 64  # rows or columns of a subplot grid
GRID_PARAMS = ("left", "right", "bottom", "top", "wspace", "hspace")
ARROW_KWARGS = ("width", "length_includes_head", "head_width", "head_length", "shape", "overhang")
ARROW_KWARGS += ("head_starts_at_zero",)
SCALES = {  # name: the settings kept (their values, not functions: a function scale comes back as identity)
    "linear": (),
    "log": ("base", "subs", "nonpositive"),
    "symlog": ("base", "linthresh", "linscale", "subs"),
    "logit": ("nonpositive",),
    "asinh": ("linear_width",),
    "function": (),
}
ARROWPROPS = ("arrowstyle", "connectionstyle", "color", "facecolor", "edgecolor", "fc", "ec", "linewidth")
ARROWPROPS += ("lw", "linestyle", "ls", "alpha", "width", "headwidth", "headlength", "shrink", "shrinkA")
ARROWPROPS += ("shrinkB", "mutation_scale", "relpos", "fill", "hatch")
COORDS = ("data", "polar", "offset points", "offset pixels", "offset fontsize")
COORDS += tuple(f"{a} {b}" for a in ("axes", "figure", "subfigure") for b in ("fraction", "pixels", "points"))
ARTIST_LISTS = ("lines", "patches", "collections")
COLORBAR = {"orientation": ("vertical", "horizontal"), "extend": ("neither", "both", "min", "max")}


def props(artist, names):
    kept = {name: getattr(artist, f"get_{name}")() for name in names if hasattr(artist, f"get_{name}")}
    if type(kept.get("marker")).__name__ == "Path":  # `legend_elements()`, a star: as its vertices
        kept["marker"] = kept["marker"].vertices  # (a Path is no data the codec sends)
    return kept


def only(values, names):
    """The items of `values` (from a summary) named in `names`; ValueError for any other name."""
    if not isinstance(values, dict) or any(name not in names for name in values):
        raise ValueError(f"unexpected settings {str(values)[:200]!r}")
    return values


def pick(value, allowed, what):
    if value not in allowed:
        raise ValueError(f"unknown {what} {str(value)[:80]!r}")
    return value


def in_range(value, size):
    if type(value) is not int or not 0 <= value < size:
        raise ValueError(f"an index out of range: {str(value)[:80]!r}")
    return value


def patch(p):
    from matplotlib import patches

    kinds = (
        (patches.FancyArrow, "fancyarrow"),  # before Polygon, Arc and Circle before Ellipse
        (patches.Rectangle, "rectangle"),
        (patches.Polygon, "polygon"),
        (patches.Wedge, "wedge"),
        (patches.Arc, "arc"),
        (patches.Circle, "circle"),
        (patches.Ellipse, "ellipse"),
    )
    kind = next((name for cls, name in kinds if isinstance(p, cls)), "path")
    path = p.get_path()
    data = {"kind": kind, "props": props(p, PATCH_PROPS)}
    if kind in ("polygon", "fancyarrow"):
        data["vertices"], data["closed"] = p.get_xy(), p.get_closed()  # `hist(histtype="step")`: open
    else:  # in data coordinates
        data["vertices"], data["codes"] = p.get_patch_transform().transform(path.vertices), path.codes
    if kind == "rectangle":
        data["box"] = (tuple(p.get_xy()), p.get_width(), p.get_height(), p.get_angle())
    elif kind == "wedge":  # a pie's slice
        data["wedge"] = (tuple(p.center), p.r, p.theta1, p.theta2, p.width)
    elif kind == "fancyarrow":
        data["arrow"] = (p._x, p._y, p._dx, p._dy, {name: getattr(p, f"_{name}") for name in ARROW_KWARGS})
    elif kind in ("arc", "circle", "ellipse"):
        sizes = (p.radius,) if kind == "circle" else (p.width, p.height, p.angle)
        angles = (p.theta1, p.theta2) if kind == "arc" else ()
        data["ellipse"] = (tuple(p.get_center()), *sizes, *angles)
    return data


def make_patch(data):
    from matplotlib import patches
    from matplotlib.path import Path

    kind, kw = data["kind"], only(data["props"], PATCH_PROPS)
    if kind == "rectangle":
        xy, width, height, angle = data["box"]
        return patches.Rectangle(xy, width, height, angle=angle, **kw)
    if kind == "polygon":
        return patches.Polygon(data["vertices"], closed=bool(data["closed"]), **kw)
    if kind == "wedge":
        center, r, theta1, theta2, width = data["wedge"]
        return patches.Wedge(center, r, theta1, theta2, width=width, **kw)
    if kind == "fancyarrow":
        x, y, dx, dy, arrow = data["arrow"]
        return patches.FancyArrow(x, y, dx, dy, **only(arrow, ARROW_KWARGS), **kw)
    if kind == "circle":
        center, radius = data["ellipse"]
        return patches.Circle(center, radius, **kw)
    if kind == "ellipse":
        center, width, height, angle = data["ellipse"]
        return patches.Ellipse(center, width, height, angle=angle, **kw)
    if kind == "arc":
        center, width, height, angle, theta1, theta2 = data["ellipse"]
        return patches.Arc(center, width, height, angle=angle, theta1=theta1, theta2=theta2, **kw)
    pick(kind, ("path",), "patch kind")
    return patches.PathPatch(Path(data["vertices"], data["codes"]), **kw)


def collection(c):
    from matplotlib.collections import LineCollection, PolyCollection, QuadMesh

    kinds = ((LineCollection, "lines"), (PolyCollection, "polygons"), (QuadMesh, "mesh"))
    kind = next((name for cls, name in kinds if isinstance(c, cls)), "paths")
    return {
        "kind": kind,  # a mesh's cells come from its coordinates
        "paths": [] if kind == "mesh" else [(path.vertices, path.codes) for path in c.get_paths()],
        "mesh": (c.get_coordinates(), c._shading) if kind == "mesh" else None,
        "offsets": c.get_offsets(),
        "props": props(c, COLLECTION_PROPS),
        "cmap": c.cmap.name,
        "array": c.get_array(),
        "clim": tuple(c.get_clim()),
    }


def add_collection(ax, data):
    import matplotlib
    from matplotlib.collections import LineCollection, PolyCollection, QuadMesh
    from matplotlib.path import Path

    kind, paths = pick(data["kind"], ("lines", "polygons", "mesh", "paths"), "collection kind"), data["paths"]
    if kind == "lines":  # vlines, hlines, error bars...
        made = ax.add_collection(LineCollection([vertices for vertices, _ in paths]))
    elif kind == "polygons":  # fill_between, hexbin, pcolor...
        made = PolyCollection([])
        made.set_verts_and_codes([vertices for vertices, _ in paths], [codes for _, codes in paths])
        ax.add_collection(made)
    elif kind == "mesh":  # pcolormesh
        coordinates, shading = data["mesh"]
        made = ax.add_collection(QuadMesh(coordinates, shading=pick(shading, ("flat", "gouraud"), "shading")))
    else:
        made = ax.scatter([], [])
        made.set_paths([Path(vertices, codes) for vertices, codes in paths])
    made.set_offsets(data["offsets"])
    if data["cmap"] in matplotlib.colormaps:
        made.set_cmap(data["cmap"])
    if data["array"] is not None:
        made.set_array(data["array"] if kind == "mesh" else data["array"].ravel())  # a scatter maps 1D
        made.set_clim(*data["clim"])
    made.set(**only(data["props"], COLLECTION_PROPS))


def image(im):
    values = im.get_array()
    return {
        "shape": () if values is None else tuple(values.shape),
        "array": values if values is not None and values.size <= MAX_IMAGE_CELLS else None,
        "cmap": im.cmap.name,
        "clim": tuple(im.get_clim()),
        "extent": tuple(im.get_extent()),
        "interpolation": im.get_interpolation(),
        "origin": im.origin,
        "props": props(im, IMAGE_PROPS),
    }


def add_image(ax, data):
    import matplotlib
    import numpy as np

    values = np.zeros((1, 1)) if data["array"] is None else data["array"]  # too large to have been sent
    if not isinstance(values, np.ndarray) or values.size > MAX_IMAGE_CELLS:
        raise ValueError("an image that is not a bounded array")
    made = ax.imshow(
        values,
        cmap=data["cmap"] if data["cmap"] in matplotlib.colormaps else None,
        extent=data["extent"],
        origin=pick(data["origin"], ("upper", "lower"), "image origin"),
        interpolation=data["interpolation"],
    )
    made.set_clim(*data["clim"])
    made.set(**only(data["props"], IMAGE_PROPS))


def containers(ax):
    """`ax.containers` (bars, error bars, stems), each artist as (list name, index) in the axes."""
    from matplotlib.container import BarContainer, ErrorbarContainer, StemContainer

    where = {id(a): (name, i) for name in ARTIST_LISTS for i, a in enumerate(getattr(ax, name))}
    kept = []
    for c in ax.containers:
        item = {"kind": "container", "label": c.get_label()}
        if isinstance(c, BarContainer):
            errorbar = next((i for i, e in enumerate(ax.containers) if e is c.errorbar), None)
            refs = [where.get(id(p)) for p in c.patches]
            item |= {
                "kind": "bar",
                "errorbar": errorbar,
                "datavalues": c.datavalues,
                "orientation": c.orientation,
            }
        elif isinstance(c, ErrorbarContainer):
            line, caps, bars = c.lines
            refs = [where.get(id(line)), [where.get(id(a)) for a in caps], [where.get(id(a)) for a in bars]]
            item |= {"kind": "errorbar", "has_err": (c.has_xerr, c.has_yerr)}
        elif isinstance(c, StemContainer):
            refs = [where.get(id(a)) for a in (c.markerline, c.stemlines, c.baseline)]
            item["kind"] = "stem"
        else:
            refs = [where.get(id(a)) for a in c]
        kept.append({**item, "artists": refs})
    return kept


def add_containers(ax, items):
    from matplotlib.container import BarContainer, Container, ErrorbarContainer, StemContainer

    def artist(ref):
        if ref is None:
            return None
        name, i = ref
        artists = getattr(ax, pick(name, ARTIST_LISTS, "artist list"))
        return artists[in_range(i, len(artists))]

    made = []
    for item in items:
        kind = pick(item["kind"], ("bar", "errorbar", "stem", "container"), "container kind")
        refs = item["artists"]
        if kind == "bar":
            errorbar = None if item["errorbar"] is None else made[in_range(item["errorbar"], len(made))]
            orientation = pick(item["orientation"], (None, "vertical", "horizontal"), "orientation")
            c = BarContainer(
                [artist(r) for r in refs], errorbar, datavalues=item["datavalues"], orientation=orientation
            )
        elif kind == "errorbar":
            line, caps, bars = refs
            lines = (artist(line), tuple(map(artist, caps)), tuple(map(artist, bars)))
            c = ErrorbarContainer(lines, has_xerr=bool(item["has_err"][0]), has_yerr=bool(item["has_err"][1]))
        elif kind == "stem":
            c = StemContainer(tuple(map(artist, refs)))
        else:
            c = Container([artist(r) for r in refs])
        made.append(ax.add_container(c))
        c.set_label(item["label"])  # after: `add_container` names one without a label


def scale(axis):
    """(name, settings) of an axis' scale."""
    s = axis._scale
    name = s.name if s.name in SCALES else "linear"
    kept = {key: getattr(s, key) for key in SCALES[name] if key != "nonpositive" and hasattr(s, key)}
    if "nonpositive" in SCALES[name]:
        clip = getattr(s.get_transform(), "_clip", None)
        kept["nonpositive"] = getattr(s.get_transform(), "_nonpositive", "clip" if clip else "mask")
    return name, kept


def set_scale(ax, which, data):
    name, kept = data
    kept = dict(only(kept, SCALES[pick(name, SCALES, "scale")]))
    if name == "function":  # its functions were code: identity ones stand for them
        kept["functions"] = (lambda v: v, lambda v: v)
    getattr(ax, f"set_{which}scale")(name, **kept)


def layout(ax, axes, grids):
    """Where the axes sits: its subplot (a grid of `grids`, filled here), shared axes, colorbar."""
    spec = ax.get_subplotspec() if hasattr(ax, "get_subplotspec") else None
    subplot = None
    if spec is not None:
        grid = spec.get_gridspec()
        if not any(grid is g for g in grids):
            grids.append(grid)
        index = next(i for i, g in enumerate(grids) if g is grid)
        subplot = (index, spec.rowspan.start, spec.rowspan.stop, spec.colspan.start, spec.colspan.stop)
    shared = [next((i for i, a in enumerate(axes) if a is getattr(ax, f"_share{n}")), None) for n in "xy"]
    bar = getattr(ax, "_colorbar", None)
    if bar is not None:
        source = bar.mappable
        mappable = next(
            ((i, name, j) for i, a in enumerate(axes) for name in ("images", "collections")
             for j, m in enumerate(getattr(a, name)) if m is source),
            None,
        )  # fmt: skip
        settings = {"orientation": bar.orientation, "extend": bar.extend}
        bar = {"mappable": mappable, "cmap": source.cmap.name, "clim": tuple(source.get_clim()), **settings}
    return {"label": ax.get_label(), "subplot": subplot, "share": shared, "colorbar": bar}


def grid(g):
    values = {name: getattr(g, name, getattr(g, f"_{name}", None)) for name in GRID_PARAMS}
    ratios = (list(g.get_height_ratios()), list(g.get_width_ratios()))
    return {"shape": g.get_geometry(), "ratios": ratios, "params": values}


def make_grids(figure, items):
    from matplotlib.gridspec import GridSpec

    made = []
    for item in items:
        rows, cols = (in_range(n, MAX_GRID + 1) for n in item["shape"])
        heights, widths = item["ratios"]
        params = only(item["params"], GRID_PARAMS)
        made.append(GridSpec(rows, cols, figure, height_ratios=heights, width_ratios=widths, **params))
    return made


def make_axes(figure, data, grids):
    kw = {"projection": data["projection"], "label": data["label"]}
    if data["subplot"] is None:
        return figure.add_axes(data["position"], **kw)
    index, row, row_end, col, col_end = data["subplot"]
    ax = figure.add_subplot(grids[in_range(index, len(grids))][row:row_end, col:col_end], **kw)
    ax.set_position(data["position"])
    return ax


def link_axes(figure, axes, items):
    """Share the axes that shared, then draw the colorbars on their axes."""
    import matplotlib
    from matplotlib.cm import ScalarMappable
    from matplotlib.colors import Normalize

    for ax, data in zip(axes, items, strict=True):
        for name, other in zip("xy", data["share"], strict=True):
            if other is not None and in_range(other, len(axes)) != axes.index(ax):
                getattr(ax, f"share{name}")(axes[other])
    for ax, data in zip(axes, items, strict=True):
        bar = data["colorbar"]
        if bar is None:
            continue
        if bar["mappable"] is None:
            cmap = bar["cmap"] if bar["cmap"] in matplotlib.colormaps else None
            mappable = ScalarMappable(Normalize(*bar["clim"]), cmap)
        else:
            i, name, j = bar["mappable"]
            artists = getattr(axes[in_range(i, len(axes))], pick(name, ("images", "collections"), "mappable"))
            mappable = artists[in_range(j, len(artists))]
        settings = {key: pick(bar[key], values, key) for key, values in COLORBAR.items()}
        figure.colorbar(mappable, cax=ax, **settings)


def annotation(text):
    """How an annotation places its text and draws its arrow (coordinates by name: ds1000_figure_extra
    keeps the others)."""
    arrow = text.arrowprops
    if arrow is not None:
        arrow = {
            k: v for k, v in arrow.items() if k in ARROWPROPS and isinstance(v, (str, int, float, tuple))
        }
    coords = [c if isinstance(c, str) and c in COORDS else "data" for c in (text.xycoords, text.anncoords)]
    return {"xycoords": coords[0], "textcoords": coords[1], "arrowprops": arrow}


def annotate_kwargs(data):
    arrow = data["arrowprops"]
    return {
        "xycoords": pick(data["xycoords"], COORDS, "coordinates"),
        "textcoords": pick(data["textcoords"], COORDS, "coordinates"),
        "arrowprops": None if arrow is None else dict(only(arrow, ARROWPROPS)),
    }
