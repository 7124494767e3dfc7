"""Axes- and figure-level settings of a plot solution's figure (checks/ds1000_figure_axes.py) cross to the
checker: left and right titles, spine positions, polar settings, twins and adjustable, the figure's
colours, text boxes, collections' line styles, open polygons and artists drawn in the axes' or figure's
transforms. Each kept value comes back as it was, two figures that differ in it come back different (a
wrong solution cannot pass a check of it), and a hostile summary is an error, never code run."""

import pytest

from tests.domains.ds1000.test_ds1000_figure import run_with_the_checks
from tests.domains.ds1000.test_ds1000_figure_artists import DIFFER_LOOP, HEADER, HOSTILE_LOOP

ROUNDTRIP = """
fig = plt.figure(facecolor="yellow", edgecolor="red", linewidth=2)
a = fig.add_subplot(1, 3, 1)
a.plot([1, 2])
a.set_title("L", loc="left", fontsize=7)
a.set_title("R", loc="right")
a.set_title("C")
a.spines["left"].set_position("zero")
a.spines["bottom"].set_position(("data", 1.5))
a.spines["right"].set_position(("axes", 0.5))
box = dict(boxstyle="round,pad=0.5", facecolor="wheat", alpha=0.5)
a.text(0.5, 0.5, "mid", transform=a.transAxes, bbox=box)
a.text(1, 1, "plain", bbox=dict(facecolor="red"))
a.axhline(1.2)
a.axvline(0.5, color="k")
a.plot([0, 1], [0, 1], transform=a.transAxes)
a.add_patch(patches.Rectangle((0, 0), 0.5, 0.5, transform=fig.transFigure))
a.vlines([1, 2], 0, 1, linestyles="dashed", linewidth=2)
a.hlines([1], 0, 1, linestyles=[(0, (1, 2))])
a.add_collection(collections.LineCollection([[(0, 0), (1, 1)], [(0, 1), (1, 0)]], linestyles=["-", ":"]))
a.hist(np.arange(10.0), histtype="step")
a.plot([1], label="one")
a.legend(ncol=2)
b = fig.add_subplot(1, 3, 2, projection="polar")
b.plot([0, 1], [1, 2])
b.set_theta_zero_location("N")
b.set_theta_direction(-1)
b.set_rlabel_position(100)
b.set_rorigin(-1)
c = fig.add_subplot(1, 3, 3)
c.plot([1, 2])
d = c.twinx()
d.plot([2, 1])
e = c.twiny()
styles = [c.get_linestyle() for c in a.collections]
summary = loads(*dumps(summarize()))
plt.close("all")
rebuild(summary)

fig = plt.gcf()
a, b, c, d, e = fig.axes
assert matplotlib.colors.to_hex(fig.get_facecolor()) == "#ffff00" and fig.get_edgecolor() == (1, 0, 0, 1)
assert fig.get_linewidth() == 2
assert (a.get_title(loc="left"), a.get_title(loc="right"), a.get_title()) == ("L", "R", "C")
assert a._left_title.get_fontsize() == 7
assert a.spines["left"].get_position() == "zero" and a.spines["bottom"].get_position() == ("data", 1.5)
assert a.spines["right"].get_position() == ("axes", 0.5) and a.spines["top"].get_position() == ("outward", 0)
mid, plain = a.texts
assert mid.get_transform() is a.transAxes and plain.get_transform() is a.transData
box = mid.get_bbox_patch()
assert type(box.get_boxstyle()).__name__ == "Round" and box.get_boxstyle().pad == 0.5
assert box.get_alpha() == 0.5 and matplotlib.colors.to_hex(box.get_facecolor()) == "#f5deb3"
assert type(plain.get_bbox_patch().get_boxstyle()).__name__ == "Square"
assert plain.get_bbox_patch().get_boxstyle().pad == 0.4
first, hline, vline, diagonal, last = a.lines
assert hline.get_transform() is a.get_yaxis_transform() and vline.get_transform() is a.get_xaxis_transform()
assert diagonal.get_transform() is a.transAxes
assert first.get_transform() is last.get_transform() is a.transData
assert matplotlib.artist.Artist.get_transform(a.patches[0]) is fig.transFigure
dashed, dotted, mixed = a.collections
assert dashed.get_linestyle() == [(0.0, [7.4, 3.2])] and dashed.get_linewidth()[0] == 2
assert [c.get_linestyle() for c in a.collections] == styles and len(mixed.get_linestyle()) == 2
step = a.patches[1]
assert not step.get_closed() and len(step.get_xy()) == 22
assert a.get_legend()._ncols == 2
assert b.get_theta_offset() == np.pi / 2 and b.get_theta_direction() == -1
assert b.get_rlabel_position() == 100 and b.get_rorigin() == -1
assert c._twinned_axes.joined(c, d) and c._twinned_axes.joined(c, e) and not a._twinned_axes.joined(a, c)
assert c.get_adjustable() == "datalim" and d.get_adjustable() == "datalim" and a.get_adjustable() == "box"
assert not d.patch.get_visible() and c.patch.get_visible()
fig.canvas.draw()  # the rebuilt figure draws
print("roundtrip ok")
"""

# (what a check reads, how the figure is drawn from a value, the values): each value's figure comes back
# with what the check reads on the original, and the values' rebuilt figures read differently
DIFFER = """
ax = plt.gca
def spine(v):
    plt.plot([1, 2])
    ax().spines["left"].set_position(v)
def polar(v):
    a = plt.subplot(projection="polar")
    a.plot([0, 1], [1, 2])
    getattr(a, v[0])(v[1])
def polar_of():
    a = ax()
    return a.get_theta_offset(), a.get_theta_direction(), a.get_rlabel_position(), a.get_rorigin()
def twin(v):
    plt.plot([1, 2])
    if v:
        getattr(ax(), v)()
def twin_of():
    a, *others = plt.gcf().axes
    joined = [(a._twinned_axes.joined(a, o), a._shared_axes["x"].joined(a, o)) for o in others]
    return joined, [o.get_adjustable() for o in (a, *others)]
def boxed(v):
    plt.plot([1, 2])
    plt.text(1, 1.5, "t", bbox=v)
def box_of():
    p = ax().texts[0].get_bbox_patch()
    if p is None:
        return None
    style = p.get_boxstyle()
    colours = [[float(v) for v in c] for c in (p.get_facecolor(), p.get_edgecolor())]
    return type(style).__name__, vars(style), colours, p.get_alpha()
def placed(v):
    plt.plot([1, 2])
    plt.text(0.5, 0.5, "t", transform=getattr(ax(), v) if isinstance(v, str) else v(ax()))
    plt.plot([0, 1], transform=getattr(ax(), v) if isinstance(v, str) else v(ax()))
def placed_of():
    a = ax()
    named = {id(a.transData): "data", id(a.transAxes): "axes", id(a.get_xaxis_transform()): "x",
             id(a.get_yaxis_transform()): "y", id(plt.gcf().transFigure): "figure"}
    return [named.get(id(t.get_transform()), "other") for t in (a.texts[0], a.lines[-1])]
CASES = [
    (lambda: (ax().get_title(loc="left"), ax().get_title(loc="right")),
     lambda v: plt.title(v[0], loc=v[1]), [("L", "left"), ("L", "right"), ("M", "left")]),
    (lambda: ax().spines["left"].get_position(), spine,
     ["zero", "center", ("data", 0), ("data", 1), ("axes", 0.5), ("outward", 10), ("outward", 0)]),
    (lambda: ax().collections[0].get_linestyle(), lambda v: plt.vlines([1, 2], 0, 1, linestyles=v),
     ["solid", "dashed", "dotted", "dashdot", (0, (1, 5)), (2, (1, 5))]),
    (lambda: ax().collections[0].get_linestyle(), lambda v: plt.hlines([1, 2], 0, 1, linestyles=v),
     [["-", "--"], ["--", "-"]]),
    (box_of, boxed, [None, dict(facecolor="wheat"), dict(facecolor="red"), dict(boxstyle="round"),
                     dict(boxstyle="round,pad=1"), dict(boxstyle="sawtooth"), dict(facecolor="w", alpha=0.5),
                     dict(facecolor="w", edgecolor="b")]),
    (lambda: ax().get_legend()._ncols, lambda v: (plt.plot([1], label="a"), plt.legend(ncol=v)), [1, 2, 3]),
    (lambda: [[float(v) for v in c] for c in (plt.gcf().get_facecolor(), plt.gcf().get_edgecolor())],
     lambda v: plt.figure(facecolor=v[0], edgecolor=v[1]), [("w", "w"), ("yellow", "w"), ("w", "red")]),
    (polar_of, polar, [("set_theta_zero_location", "E"), ("set_theta_zero_location", "N"),
                       ("set_theta_direction", -1), ("set_rlabel_position", 45), ("set_rorigin", -2)]),
    (twin_of, twin, [None, "twinx", "twiny"]),
    (lambda: (ax().patches[0].get_closed(), len(ax().patches[0].get_xy())),
     lambda v: plt.hist(np.arange(10.0), histtype=v), ["step", "stepfilled"]),
    (placed_of, placed, ["transData", "transAxes", lambda a: a.get_xaxis_transform(),
                         lambda a: a.get_yaxis_transform(), lambda a: plt.gcf().transFigure]),
    (lambda: [line.get_transform() is ax().get_yaxis_transform() for line in ax().lines],
     lambda v: getattr(plt, v)(0.5), ["axhline", "axvline"]),
]
"""
DIFFER += DIFFER_LOOP

HOSTILE = """
def draw(_):
    fig = plt.figure(facecolor="yellow")
    a = fig.add_subplot(1, 3, 1)
    a.plot([1, 2])
    a.set_title("L", loc="left")
    a.spines["left"].set_position(("data", 0))
    a.text(0.5, 0.5, "t", transform=a.transAxes, bbox=dict(boxstyle="round", facecolor="wheat"))
    a.vlines([1], 0, 1, linestyles="dashed")
    b = fig.add_subplot(1, 3, 2, projection="polar")
    b.plot([0, 1], [1, 2])
    b.set_theta_direction(-1)
    fig.add_subplot(1, 3, 3).twinx()

base = summary_of(draw, None)
plt.close("all")
rebuild(base)  # the untouched summary rebuilds
assert plt.gcf().axes[0].get_title(loc="left") == "L"
evil = "__import__('os').system('touch pwned')"
a = lambda s: s["axes"][0]["settings"]
box = lambda s: s["axes"][0]["texts"][0]["bbox"]
CASES = [
    (lambda s: s["settings"], "props", {"canvas": evil}),
    (lambda s: s["settings"]["props"], "facecolor", evil),
    (lambda s: s["settings"], "twins", [10**9, None, None, None]),
    (lambda s: s["settings"], "twins", [evil, None, None, None]),
    (lambda s: s["settings"], "twins", [None] * 10**5),
    (lambda s: s["settings"], "twins", evil),
    (lambda s: s["axes"][0], "settings", {"figure": evil}),
    (a, "titles", {"center": {"text": evil}}),
    (lambda s: a(s)["titles"]["left"], "fontfamily", ["serif"] * 10**5),
    (lambda s: a(s)["spines"], "left", evil),
    (lambda s: a(s)["spines"], "left", ("data", evil)),
    (lambda s: a(s)["spines"], "left", (evil, 0)),
    (lambda s: a(s)["spines"], "left", ("data", float("nan"))),
    (lambda s: a(s)["spines"], "left", ("data", 0, 1)),
    (lambda s: s["axes"][1]["settings"], "polar", {"theta_zero_location": evil}),
    (lambda s: s["axes"][1]["settings"]["polar"], "theta_direction", 5.0),
    (lambda s: s["axes"][1]["settings"]["polar"], "theta_offset", evil),
    (lambda s: s["axes"][1]["settings"]["polar"], "rorigin", float("inf")),
    (a, "adjustable", evil),
    (a, "linestyles", evil),
    (a, "linestyles", [[evil]]),
    (a, "linestyles", [[(0.0, [1e-9, 1e-9])]]),
    (a, "linestyles", [[(0.0, [-1.0, 2.0])]]),
    (a, "linestyles", [[(0.0, [1.0] * 10**5)]]),
    (a, "linestyles", [[(0.0, None)] * 10**6]),
    (a, "linestyles", [[(evil, None)]]),
    (a, "linestyles", [[]]),
    (a, "transforms", {"collections": [evil]}),
    (lambda s: a(s)["transforms"], "texts", [evil]),
    (lambda s: a(s)["transforms"], "texts", ["__class__"]),
    (lambda s: a(s)["transforms"], "lines", evil),
    (box, "style", evil),
    (box, "style", "__init__"),
    (box, "sizes", {"pad": evil}),
    (box, "sizes", {"pad": 1e300}),
    (box, "sizes", {"tooth_size": 1.0}),
    (box, "sizes", {"transform": 1.0}),
    (box, "props", {"transform": evil}),
    (lambda s: box(s)["props"], "facecolor", evil),
]
"""
HOSTILE += HOSTILE_LOOP


@pytest.mark.parametrize("script", [ROUNDTRIP, DIFFER, HOSTILE], ids=["roundtrip", "differ", "hostile"])
def test_axes_and_figure_settings_cross(ds1000_env, tmp_path, script):
    run_with_the_checks(ds1000_env, tmp_path, HEADER + script, timeout=300)
