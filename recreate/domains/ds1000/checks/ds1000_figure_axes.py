"""Runs INSIDE DS-1000 sandboxes: the axes- and figure-level settings of ds1000_figure's summary, each as
data and back:

- the figure: face and edge colours, edge width, frame, and which axes are twins (`twinx`, `twiny`: the
  link `ax._twinned_axes.joined(a, b)` reads);
- per axes: the left and right titles (`title(loc=...)`), spine positions (`set_position`: "center",
  "zero", ("outward" | "axes" | "data", amount)), the polar settings (theta offset and direction, radial
  label position, a set r origin), `get_adjustable()`, the background patch's visibility, the line styles
  of its collections (unscaled dash patterns, as `set_linestyle` takes them: vlines, hlines, line
  collections) and which lines, patches and texts are drawn in one of the axes' or figure's standard
  transforms (`transform=ax.transAxes`, `axhline`'s blended ones...: ds1000_figure_extra's names);
- a text's box (`bbox=`): style and its sizes (pad...), colours, line width and style, fill, alpha.

Rebuilding reads a summary sent from a solution's sandbox: as in ds1000_figure_artists, every kind, name
and index in it is checked against what this module writes (an unknown one is a ValueError) and sizes are
bounded, so a hostile summary is an error, never code run or a hang.
"""

import math

import ds1000_figure_extra as extra
from ds1000_figure_artists import in_range, only, pick, props

FIGURE_PROPS = ("facecolor", "edgecolor", "linewidth", "frameon")
SPINE_KINDS = ("outward", "axes", "data")
SPINE_NAMES = ("center", "zero")
DEFAULT_SPINE = ("outward", 0.0)
POLAR = ("theta_offset", "theta_direction", "rlabel_position", "rorigin")
ADJUSTABLE = ("box", "datalim")
BOX_PROPS = ("facecolor", "edgecolor", "linewidth", "linestyle", "fill", "alpha", "hatch", "visible")
BOX_SIZES = ("pad", "rounding_size", "tooth_size")
MAX_BOX_SIZE = 1000.0  # in font sizes: a larger box is not drawn in reasonable time or space
PLACED = ("lines", "patches", "texts")  # the artist lists whose transforms are kept
AXES_KEYS = ("titles", "spines", "polar", "adjustable", "patch_visible", "linestyles", "transforms")
MAX_STYLES = 1 << 16  # dash patterns of one collection (more are not kept)
MAX_DASHES = 64  # on-off lengths of one dash pattern
MIN_DASH_CYCLE = 0.01  # points (before scaling by the line width): shorter ones draw without end


def _number(value, bound=None):
    if type(value) not in (int, float) or not math.isfinite(value):
        raise ValueError(f"a setting that is not a finite number: {str(value)[:80]!r}")
    if bound is not None and abs(value) > bound:
        raise ValueError(f"a setting out of range: {value!r}")
    return value


def figure(fig, axes):
    """The figure's colours and frame, and for each axes the first other one it is twinned with."""
    twins = [
        next(
            (i for i, other in enumerate(axes) if other is not ax and ax._twinned_axes.joined(ax, other)),
            None,
        )
        for ax in axes
    ]
    return {"props": props(fig, FIGURE_PROPS), "twins": twins}


def set_figure(fig, axes, data):
    fig.set(**only(data["props"], FIGURE_PROPS))
    twins = data["twins"]
    if not isinstance(twins, list) or len(twins) > len(axes):
        raise ValueError("twin axes that are not a list of the axes")
    for ax, other in zip(axes, twins, strict=False):
        if other is not None:
            ax._twinned_axes.join(ax, axes[in_range(other, len(axes))])


def text(t):
    """A text's box ({} for none)."""
    from matplotlib.patches import BoxStyle

    patch = t.get_bbox_patch() if hasattr(t, "get_bbox_patch") else None
    if patch is None:
        return {}
    style = patch.get_boxstyle()
    name = next((n for n, kind in BoxStyle.get_styles().items() if type(style) is kind), None)
    if name is None:  # a style of the solution's own: drawn square
        return {}
    sizes = {k: None if v is None else float(v) for k, v in vars(style).items() if k in BOX_SIZES}
    return {"bbox": {"style": name, "sizes": sizes, "props": props(patch, BOX_PROPS)}}


def set_text(target, data):
    from matplotlib.patches import BoxStyle

    box = data.get("bbox")
    if box is None:
        return
    styles = BoxStyle.get_styles()
    sizes = only(box["sizes"], BOX_SIZES)
    sizes = {k: None if v is None else _number(v, MAX_BOX_SIZE) for k, v in sizes.items()}
    style = styles[pick(box["style"], styles, "box style")](**sizes)  # a size it does not take: TypeError
    target.set_bbox({"boxstyle": style, **only(box["props"], BOX_PROPS)})


def _spine(spine):
    position = getattr(spine, "_position", None)  # `get_position()` would set it: a colorbar's refuses
    if position is None:
        return DEFAULT_SPINE
    if isinstance(position, str):
        return position
    kind, amount = position
    return str(kind), amount if type(amount) in (int, float) else float(amount)  # as given: 0 or 0.0


def _spine_back(value):
    if isinstance(value, str):
        return pick(value, SPINE_NAMES, "spine position")
    if not isinstance(value, tuple) or len(value) != 2:
        raise ValueError(f"a spine position that is not a name or a pair: {str(value)[:80]!r}")
    return pick(value[0], SPINE_KINDS, "spine position"), _number(value[1])


def _polar(ax):
    from matplotlib.projections.polar import PolarAxes

    if not isinstance(ax, PolarAxes):
        return None
    kept = {name: float(getattr(ax, f"get_{name}")()) for name in POLAR}
    if ax._originViewLim.locked_y0 is None:  # it follows the r limits
        kept["rorigin"] = None
    return kept


def _linestyles(c):
    from matplotlib.contour import ContourSet

    styles = getattr(c, "_us_linestyles", None)
    if isinstance(c, ContourSet) or styles is None or len(styles) > MAX_STYLES:
        return None  # a contour set keeps its own
    try:
        return [(float(o), None if d is None else [float(v) for v in d]) for o, d in styles]
    except (TypeError, ValueError):
        return None


def _linestyles_back(styles):
    if not isinstance(styles, list) or not 1 <= len(styles) <= MAX_STYLES:
        raise ValueError("collection line styles that are not a bounded list")
    for style in styles:
        if not isinstance(style, tuple) or len(style) != 2:
            raise ValueError("a dash pattern that is not (offset, lengths)")
        offset, dashes = style
        _number(offset)
        if dashes is None:
            continue
        if not isinstance(dashes, list) or not 1 <= len(dashes) <= MAX_DASHES:
            raise ValueError("dash lengths that are not a bounded list")
        if any(_number(d) < 0 for d in dashes) or sum(dashes) < MIN_DASH_CYCLE:
            raise ValueError("dash lengths that are negative or too short")
    return styles


def _placed(artist, named):
    from matplotlib.artist import Artist

    transform = Artist.get_transform(artist)  # a patch's own, not with its patch transform
    return next((name for name, t in named.items() if t is transform and name != "data"), None)


def axes(ax, text):
    """What `finish_axes` puts back; `text` is ds1000_figure's summary of a text."""
    named = extra.transforms(ax)
    return {
        "titles": {"left": text(ax._left_title), "right": text(ax._right_title)},
        "spines": {name: _spine(s) for name, s in ax.spines.items()},
        "polar": _polar(ax),
        "adjustable": ax.get_adjustable(),
        "patch_visible": ax.patch.get_visible(),
        "linestyles": [_linestyles(c) for c in ax.collections],
        "transforms": {name: [_placed(a, named) for a in getattr(ax, name)] for name in PLACED},
    }


def finish_axes(ax, data, set_text):
    """After the artists were made, before the ticks (a spine's position resets them) and the aspect."""
    from matplotlib.projections.polar import PolarAxes

    kept = only(data["settings"], AXES_KEYS)
    titles = only(kept["titles"], ("left", "right"))
    for side, title in titles.items():
        set_text(getattr(ax, f"_{side}_title"), title)
    for name, position in kept["spines"].items():
        position = _spine_back(position)
        default = position == DEFAULT_SPINE and type(position[1]) is float  # as a fresh spine reads
        if isinstance(name, str) and name in ax.spines and not default:
            ax.spines[name].set_position(position)
    polar = kept["polar"]
    if polar is not None and isinstance(ax, PolarAxes):
        for name, value in only(polar, POLAR).items():
            if value is not None:
                getattr(ax, f"set_{name}")(_number(value))
    ax.set_adjustable(pick(kept["adjustable"], ADJUSTABLE, "adjustable"))
    ax.patch.set_visible(bool(kept["patch_visible"]))
    if data["colorbar"] is not None:  # its artists are the colorbar's
        return
    styles = kept["linestyles"]
    if not isinstance(styles, list):
        raise ValueError("collection line styles that are not a list")
    for made, style in zip(ax.collections, styles, strict=False):
        if style is not None:
            made.set_linestyle(_linestyles_back(style))
    named = extra.transforms(ax)
    for name, places in only(kept["transforms"], PLACED).items():
        if not isinstance(places, list):
            raise ValueError("transforms that are not a list")
        for made, place in zip(getattr(ax, name), places, strict=False):
            if place is not None:
                made.set_transform(named[pick(place, extra.TRANSFORMS, "transform")])
