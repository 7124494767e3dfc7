"""The less plain parts of a plot solution's figure (checks/ds1000_figure_artists.py) cross to the checker:
legend anchors and fonts, containers, subplot grids and shared axes, scale settings, image values,
colorbars, arrows, ellipses, collection classes. Each kept value comes back as it was, two figures that
differ in it come back different (a wrong solution cannot pass a check of it), and a hostile summary is
an error, never code run."""

import pytest

from tests.domains.ds1000.test_ds1000_figure import run_with_the_checks

HEADER = """
import copy, os, time
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
from matplotlib import collections, container, patches
from ds1000_data import dumps, loads
from ds1000_figure import rebuild, summarize

def summary_of(draw, value):
    plt.close("all")
    draw(value)
    return loads(*dumps(summarize()))
"""

ROUNDTRIP = """
x = np.arange(4)
fig, axs = plt.subplots(2, 2, sharex=True, gridspec_kw={"width_ratios": [1, 2]})
fig.subplots_adjust(wspace=0.05, hspace=0.4)
a, b, c, d = axs.ravel()
a.bar(x, x + 1, yerr=0.5, label="bars")
a.errorbar(x, x, xerr=0.1, fmt="none", capsize=2)
a.stem(x, x * 2)
font = {"family": "serif", "style": "italic"}
a.legend(bbox_to_anchor=(0.5, 1.2), loc="upper center", frameon=False, labelcolor="red", prop=font)
a.set_title("T", fontfamily="monospace", fontstyle="oblique")
b.set_xscale("log", base=2)
b.set_yscale("symlog", linthresh=0.3)
values = np.arange(12.0).reshape(3, 4)
im = b.imshow(values, extent=(1, 5, 1, 4), interpolation="nearest", origin="lower", cmap="viridis", vmin=1,
              vmax=9)
fig.colorbar(im, ax=b).set_label("heat")
arrow = {"arrowstyle": "->", "color": "r"}
c.annotate("pt", (1, 1), xytext=(10, 10), textcoords="offset points", arrowprops=arrow)
c.arrow(0, 0, 1, 1, width=0.05, head_width=0.2)
c.add_patch(patches.Ellipse((1, 2), 3, 1, angle=30))
c.add_patch(patches.Circle((2, 2), 0.5))
fill = c.fill_between(x, x, x + 1).get_paths()[0].vertices
c.scatter(x, x)
d.pcolormesh(np.arange(6.0).reshape(2, 3), cmap="magma")
d.legend(["m"], bbox_to_anchor=(0.1, 0.2, 0.3, 0.4), bbox_transform=fig.transFigure)
anchor = d.get_legend().get_bbox_to_anchor().bounds
summary = loads(*dumps(summarize()))
plt.close("all")
rebuild(summary)

fig = plt.gcf()
a, b, c, d, cax = fig.axes
assert a.get_subplotspec().get_geometry() == (2, 2, 0, 0)
assert d.get_subplotspec().get_geometry() == (2, 2, 3, 3)
assert a.get_gridspec().get_width_ratios() == [1, 2] and a.get_gridspec() is c.get_gridspec()
assert fig.subplotpars.wspace == 0.05 and fig.subplotpars.hspace == 0.4
assert a.get_shared_x_axes().joined(a, d) and not a.get_shared_y_axes().joined(a, d) and c._sharex is a
kinds = [type(k).__name__ for k in a.containers]
assert kinds == ["ErrorbarContainer", "BarContainer", "ErrorbarContainer", "StemContainer"], kinds
bar = a.containers[1]
assert len(bar) == 4 and bar.errorbar is a.containers[0] and [p.get_height() for p in bar] == [1, 2, 3, 4]
assert all(p is q for p, q in zip(bar.patches, a.patches)) and bar.get_label() == "bars"
errorbar = a.containers[2]
assert errorbar.has_xerr and not errorbar.has_yerr
assert errorbar.lines[0] is None and len(errorbar.lines[1]) == 2
stem = a.containers[3]
assert stem.markerline in a.lines and isinstance(stem.stemlines, collections.LineCollection)
legend = a.get_legend()
assert legend._bbox_to_anchor._bbox.bounds == (0.5, 1.2, 0, 0)
assert legend._loc == 9 and not legend.get_frame_on()
text = legend.get_texts()[0]
assert matplotlib.colors.to_hex(text.get_color()) == "#ff0000"
assert text.get_fontfamily() == ["serif"] and text.get_fontstyle() == "italic"
assert a.title.get_fontfamily() == ["monospace"] and a.title.get_fontstyle() == "oblique"
np.testing.assert_allclose(d.get_legend().get_bbox_to_anchor().bounds, anchor)
assert b.get_xscale() == "log" and b.xaxis.get_transform().base == 2
assert b.get_yscale() == "symlog" and b.yaxis.get_transform().linthresh == 0.3
image = b.images[0]
np.testing.assert_array_equal(image.get_array(), values)
assert image.get_extent() == [1, 5, 1, 4] and image.get_clim() == (1, 9) and image.origin == "lower"
assert image.get_interpolation() == "nearest" and image.cmap.name == "viridis"
assert cax.get_label() == "<colorbar>"
assert cax._colorbar.mappable is image and image.colorbar is cax._colorbar
assert cax.get_ylabel() == "heat"
note = c.texts[0]
assert note.arrowprops == {"arrowstyle": "->", "color": "r"} and note.arrow_patch is not None
assert note.anncoords == "offset points" and note.get_position() == (10, 10)
arrow, ellipse, circle = c.patches
assert isinstance(arrow, patches.FancyArrow) and arrow._head_width == 0.2
assert type(ellipse) is patches.Ellipse and tuple(ellipse.get_center()) == (1, 2)
assert (ellipse.width, ellipse.height, ellipse.angle) == (3, 1, 30)
assert isinstance(circle, patches.Circle)
assert circle.get_radius() == 0.5 and tuple(circle.get_center()) == (2, 2)
fill_between, dots = c.collections
assert type(fill_between) is collections.PolyCollection and type(dots) is collections.PathCollection
np.testing.assert_array_equal(fill_between.get_paths()[0].vertices, fill)
mesh = d.collections[0]
assert isinstance(mesh, collections.QuadMesh)
assert mesh.get_array().shape == (2, 3) and mesh.cmap.name == "magma"
plt.close("all")
plt.imshow(np.zeros((2049, 2049)))  # values past the bound are not sent: the shape and settings are
summary = loads(*dumps(summarize()))
assert summary["axes"][0]["images"][0]["array"] is None
assert summary["axes"][0]["images"][0]["shape"] == (2049, 2049)
rebuild(summary)
assert plt.gca().images[0].get_array().shape == (1, 1)
print("roundtrip ok")
"""

# (what a check reads, how the figure is drawn from a value, the values): each value's figure comes back
# with what the check reads on the original, and the values' rebuilt figures read differently
DIFFER = """
ax = plt.gca
def legend(**kw):
    plt.plot([1, 2], label="a")
    return plt.legend(**kw)
def anchor():
    box = ax().get_legend()._bbox_to_anchor
    return None if box is None else (box._bbox.bounds, ax().get_legend().get_bbox_to_anchor().bounds)
def legend_text():
    text = ax().get_legend().get_texts()[0]
    return matplotlib.colors.to_hex(text.get_color()), text.get_fontfamily(), text.get_fontname()
def image():
    im = ax().images[0]
    return im.get_array().tolist(), im.get_extent(), im.get_clim(), im.get_interpolation(), im.origin
def colorbar(on):
    plt.imshow(np.eye(2))
    if on:
        plt.colorbar(label="c")
def collection(kind):
    {"fill": lambda: plt.fill_between([0, 1], [1, 2]), "scatter": lambda: plt.scatter([0], [1]),
     "mesh": lambda: plt.pcolormesh(np.eye(2)), "lines": lambda: plt.vlines([1], 0, 1)}[kind]()
KINDS = (collections.PathCollection, collections.PolyCollection, collections.QuadMesh)
KINDS += (collections.LineCollection,)
def shape():
    (p,) = ax().patches
    return type(p).__name__, tuple(p.get_center()), float(p.width), float(p.height), float(p.angle)
CASES = [
    (anchor, lambda v: legend(bbox_to_anchor=v), [(1.05, 1), (0.5, 0.5, 0.2, 0.1), None]),
    (lambda: ax().get_legend().get_frame_on(), lambda v: legend(frameon=v), [True, False]),
    (legend_text, lambda v: legend(labelcolor=v[0], prop={"family": v[1]}),
     [("red", "serif"), ("b", "monospace")]),
    (lambda: len(ax().containers), lambda v: [plt.bar([1], [2]) for _ in range(v)], [1, 2]),
    (lambda: [p.get_height() for p in ax().containers[0]], lambda v: plt.bar([1, 2], v), [[3, 4], [3, 5]]),
    (lambda: [type(c).__name__ for c in ax().containers], lambda v: v([1, 2], [2, 3]),
     [plt.stem, plt.plot]),
    (lambda: (ax().containers[0].has_xerr, ax().containers[0].has_yerr),
     lambda v: plt.errorbar([1], [1], **{v: 0.5}), ["xerr", "yerr"]),
    (lambda: [a.get_subplotspec().get_geometry() for a in plt.gcf().axes],
     lambda v: plt.subplots(*v), [(1, 2), (2, 1)]),
    (lambda: [a.get_subplotspec() is None for a in plt.gcf().axes],
     lambda v: plt.gcf().add_axes((0.1, 0.1, 0.8, 0.8)) if v else plt.subplot(), [0, 1]),
    (lambda: plt.gcf().axes[0].get_shared_x_axes().joined(*plt.gcf().axes),
     lambda v: plt.subplots(2, sharex=v), [True, False]),
    (lambda: plt.gcf().subplotpars.wspace, lambda v: plt.subplots_adjust(wspace=v), [0.0, 0.5]),
    (lambda: plt.gcf().get_tight_layout(), lambda v: plt.figure(layout=v).add_subplot(),
     ["tight", None]),
    (lambda: ax().xaxis.get_transform().base, lambda v: plt.xscale("log", base=v), [2, 10]),
    (lambda: ax().yaxis.get_transform().linthresh, lambda v: plt.yscale("symlog", linthresh=v), [0.1, 1]),
    (image, lambda v: plt.imshow(np.arange(4.0).reshape(2, 2) * v, vmin=v), [1, 2]),
    (image, lambda v: plt.imshow(np.eye(2), extent=v), [(0, 1, 0, 1), (1, 5, 1, 4)]),
    (image, lambda v: plt.imshow(np.eye(2), interpolation=v[0], origin=v[1]),
     [("nearest", "upper"), ("bilinear", "lower")]),
    (lambda: [a.get_label() for a in plt.gcf().axes] + [plt.gcf().axes[-1].get_ylabel()], colorbar,
     [True, False]),
    (lambda: (ax().texts[0].arrow_patch is None, ax().texts[0].arrowprops),
     lambda v: plt.annotate("a", (0, 0), xytext=(1, 1), arrowprops=v),
     [None, {"arrowstyle": "->"}, {"color": "r"}]),
    (lambda: (ax().texts[0].anncoords, ax().texts[0].xycoords),
     lambda v: plt.annotate("a", (0, 0), xytext=(1, 1), xycoords=v, textcoords=v), ["data", "axes fraction"]),
    (lambda: (type(ax().patches[0]).__name__, ax().patches[0]._width),
     lambda v: plt.arrow(0, 0, 1, 1, width=v), [0.1, 0.2]),
    (shape, lambda v: ax().add_patch(patches.Ellipse((1, 2), 3, 1, angle=v)), [0, 30]),
    (shape, lambda v: ax().add_patch(patches.Circle((1, 2), v)), [1, 2]),
    (lambda: [isinstance(ax().collections[0], k) for k in KINDS], collection,
     ["fill", "scatter", "mesh", "lines"]),
    (lambda: ax().collections[0].get_array().tolist(), lambda v: plt.scatter([0, 1], [0, 1], c=v),
     [[0, 1], [1, 0]]),
    (lambda: (ax().title.get_fontfamily(), ax().title.get_fontstyle(), ax().title.get_fontname()),
     lambda v: plt.title("t", fontfamily=v[0], fontstyle=v[1]),
     [("serif", "italic"), ("monospace", "normal")]),
    (lambda: ax().get_xticklabels()[0].get_fontname(), lambda v: plt.xticks([1], ["a"], fontfamily=v),
     ["serif", "monospace"]),
    (lambda: [t.get_text() for t in ax().get_legend().get_texts()],  # markers given as Paths
     lambda v: plt.legend(*plt.scatter([1, 2], [1, 2], c=[0, v]).legend_elements()), [1, 2]),
]
"""
DIFFER_LOOP = """  # each case's values drawn, summarized, rebuilt: read back the same, apart
for number, (read, draw, values) in enumerate(CASES):
    rebuilt = []
    for value in values:
        summary = summary_of(draw, value)
        original = read()
        plt.close("all")
        rebuild(summary)
        rebuilt.append(read())
        assert repr(rebuilt[-1]) == repr(original), (number, value, original, rebuilt[-1])
    assert len({repr(r) for r in rebuilt}) == len(values), (number, rebuilt)
print("differ ok")
"""
DIFFER += DIFFER_LOOP

HOSTILE = """
def draw(_):
    fig, (a, b) = plt.subplots(1, 2, sharex=True)
    a.bar([1, 2], [3, 4], yerr=1)
    a.annotate("a", (0, 0), xytext=(1, 1), arrowprops={"arrowstyle": "->"})
    a.add_patch(patches.Circle((0, 0), 1))
    a.arrow(0, 0, 1, 1)
    a.fill_between([0, 1], [1, 2])
    a.pcolormesh(np.eye(2))
    a.legend(["x"], bbox_to_anchor=(1, 1))
    a.set_xscale("log")
    fig.colorbar(b.imshow(np.eye(2)), ax=b)
    fig.set_layout_engine("tight")

base = summary_of(draw, None)
plt.close("all")
rebuild(base)  # the untouched summary rebuilds
a = lambda s: s["axes"][0]
evil = "__import__('os').system('touch pwned')"
CASES = [
    (lambda s: a(s)["patches"][0], "kind", evil),
    (lambda s: a(s)["patches"][0]["props"], "transform", 1),
    (lambda s: a(s)["patches"][-1]["arrow"][-1], "__class__", 1),
    (lambda s: a(s)["collections"][0], "kind", "os.system"),
    (lambda s: a(s)["collections"][-1], "mesh", (np.zeros((2, 2, 2)), evil)),
    (lambda s: a(s)["collections"][0]["props"], "picker", evil),
    (lambda s: s["axes"][1]["images"][0], "array", np.zeros((1 << 23,))),
    (lambda s: s["axes"][1]["images"][0], "array", np.zeros((0,), dtype=object)),
    (lambda s: s["axes"][1]["images"][0], "origin", evil),
    (lambda s: s["axes"][1]["images"][0]["props"], "agg_filter", evil),
    (lambda s: a(s)["containers"][0], "kind", evil),
    (lambda s: a(s)["containers"][1], "errorbar", 5),
    (lambda s: a(s)["containers"][1], "orientation", evil),
    (lambda s: a(s)["containers"][1]["artists"], 0, ("__dict__", 0)),
    (lambda s: a(s)["containers"][1]["artists"], 0, ("patches", 10**9)),
    (lambda s: a(s)["containers"][1]["artists"], 0, ("patches", True)),
    (a, "scales", (("function", {"functions": evil}), ("linear", {}))),
    (a, "scales", ((evil, {}), ("linear", {}))),
    (a, "scales", (("log", {"base": 1}), ("linear", {}))),
    (lambda s: s["grids"][0], "shape", (10**9, 10**9)),
    (lambda s: s["grids"][0]["params"], "figure", evil),
    (a, "subplot", (7, 0, 1, 0, 1)),
    (a, "share", (10**9, None)),
    (lambda s: s["axes"][-1]["colorbar"], "mappable", (0, "__class__", 0)),
    (lambda s: s["axes"][-1]["colorbar"], "mappable", (0, "images", 3)),
    (lambda s: s["axes"][-1]["colorbar"], "orientation", evil),
    (lambda s: a(s)["texts"][0]["annotation"], "xycoords", evil),
    (lambda s: a(s)["texts"][0]["annotation"]["arrowprops"], "patchA", evil),
    (lambda s: a(s)["legend"], "anchor", (evil, False)),
    (lambda s: a(s)["legend"]["frame"], "figure", evil),
    (lambda s: a(s)["legend"]["params"], "handler_map", evil),
    (lambda s: a(s)["legend"]["handles"][0]["props"], "transform", evil),
    (lambda s: a(s)["legend"], "ncols", 10**9),
    (lambda s: a(s)["legend"]["params"], "numpoints", 10**9),
    (lambda s: a(s)["title"], "fontfamily", ["serif"] * 10**5),
    (lambda s: s, "layout", evil),
    (lambda s: s["subplotpars"], "figure", evil),
]
"""
HOSTILE_LOOP = """  # each case: `base` with one value replaced must not rebuild, quickly
for number, (where, key, value) in enumerate(CASES):
    summary = copy.deepcopy(base)
    where(summary)[key] = value
    start = time.monotonic()
    try:
        rebuild(summary)
    except Exception:
        pass
    else:
        raise AssertionError(f"case {number} rebuilt")
    assert time.monotonic() - start < 20, number
assert not os.path.exists("pwned")
print("hostile ok")
"""
HOSTILE += HOSTILE_LOOP


@pytest.mark.parametrize("script", [ROUNDTRIP, DIFFER, HOSTILE], ids=["roundtrip", "differ", "hostile"])
def test_the_less_plain_artists_cross_and_a_hostile_summary_is_an_error(ds1000_env, tmp_path, script):
    run_with_the_checks(ds1000_env, tmp_path, HEADER + script, timeout=300)
