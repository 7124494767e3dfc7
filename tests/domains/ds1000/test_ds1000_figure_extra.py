"""More of a plot solution's figure (checks/ds1000_figure_extra.py) crosses to the checker: colour
normalisations, contour sets and their labels, `pcolor` meshes, tables, the legend's layout and
annotation coordinates that are no names. Each kept value comes back as it was, two figures that differ
in it come back different (a wrong solution cannot pass a check of it), and a hostile summary is an
error, never code run."""

import pytest

from tests.domains.ds1000.test_ds1000_figure import run_with_the_checks
from tests.domains.ds1000.test_ds1000_figure_artists import DIFFER_LOOP, HEADER, HOSTILE_LOOP

HEADER += """
from matplotlib import colors, contour, table
"""

ROUNDTRIP = """
x = np.linspace(-2, 2, 9)
X, Y = np.meshgrid(x, x)
Z = X**2 - Y**2
fig, (a, b, c) = plt.subplots(1, 3)
filled = a.contourf(X, Y, Z, levels=5, cmap="RdBu", extend="both")
lines = a.contour(X, Y, Z, levels=[-1, 0, 1], colors="k", linestyles="dashed")
a.clabel(lines, fontsize=8)
fig.colorbar(filled, ax=a)
b.imshow(np.arange(1, 13.0).reshape(3, 4), norm=colors.LogNorm(vmin=1, vmax=12))
b.plot([1, 2])
layout = {"mode": "expand", "markerfirst": False, "fancybox": False, "alignment": "left"}
b.legend(["q"], bbox_to_anchor=(0, 1, 1, 0.1), **layout)
mesh = c.pcolor(np.ma.masked_less(np.arange(6.0).reshape(2, 3), 2), norm=colors.PowerNorm(0.5))
cells = c.table(cellText=[["1", "2"], ["3", "4"]], colLabels=["a", "b"], rowLabels=["r1", "r2"], loc="bottom",
                bbox=[0, 0, 1, 1], cellColours=[["r", "w"], ["w", "w"]])
cells.auto_set_font_size(False)
cells.set_fontsize(14)
c.annotate("t", (0.5, 0.5), xycoords=c.transAxes, textcoords=("data", "axes fraction"), xytext=(1, 0.2))
c.annotate("u", (0.5, 0.5), xycoords=c.texts[0], textcoords=c.get_xaxis_transform(), xytext=(0, 1))
fig.colorbar(matplotlib.cm.ScalarMappable(colors.TwoSlopeNorm(0, -1, 3), "viridis"), ax=c)
summary = loads(*dumps(summarize()))
plt.close("all")
rebuild(summary)

fig = plt.gcf()
a, b, c, acax, ccax = fig.axes
filled, lines = a.collections
assert type(filled) is contour.QuadContourSet and filled.filled and filled.extend == "both"
assert list(filled.levels) == [-3, -1.5, 0, 1.5, 3] and len(filled.get_paths()) == 6
assert filled.cmap.name == "RdBu" and acax._colorbar.mappable is filled
assert type(lines) is contour.QuadContourSet and not lines.filled and lines.colors == "k"
assert lines.get_linestyles()[0] == (0.0, [5.550000000000001, 2.4000000000000004])
assert [t.get_text() for t in lines.labelTexts] == ["−1", "−1", "0", "0", "1", "1"]
assert all(t in a.texts for t in lines.labelTexts) and list(lines.labelLevelList) == [-1, 0, 1]
norm = b.images[0].norm
assert type(norm) is colors.LogNorm and (norm.vmin, norm.vmax) == (1, 12)
legend = b.get_legend()
assert legend._mode == "expand" and legend._alignment == "left"
assert isinstance(legend.get_frame().get_boxstyle(), patches.BoxStyle.Square)
entry = legend._legend_handle_box.get_children()[0].get_children()[0].get_children()
assert type(entry[0]).__name__ == "TextArea"  # markerfirst=False
(mesh,) = c.collections
assert type(mesh) is collections.PolyQuadMesh
assert type(mesh.norm) is colors.PowerNorm and mesh.norm.gamma == 0.5
assert mesh._A.mask.tolist() == [[True, True, False], [False, False, False]] and len(mesh.get_paths()) == 4
(cells,) = c.tables
assert tuple(cells._bbox) == (0, 0, 1, 1) and cells._loc == table.Table.codes["bottom"]
assert c.get_children()[0] is not cells  # the annotations were made first here: tables come after texts
texts = {k: v.get_text().get_text() for k, v in cells.get_celld().items()}
assert texts == {(1, 0): "1", (1, 1): "2", (2, 0): "3", (2, 1): "4", (0, 0): "a", (0, 1): "b", (1, -1): "r1",
                 (2, -1): "r2"}
assert not cells._autoFontsize and cells[1, 1].get_text().get_fontsize() == 14
assert matplotlib.colors.to_hex(cells[1, 0].get_facecolor()) == "#ff0000"
first, second = c.texts
assert first.xycoords is c.transAxes and first.anncoords == ("data", "axes fraction")
assert second.xycoords is first and second.anncoords is c.get_xaxis_transform()
bar = ccax._colorbar
assert type(bar.norm) is colors.TwoSlopeNorm
assert (bar.norm.vmin, bar.norm.vcenter, bar.norm.vmax) == (-1, 0, 3)
fig.canvas.draw()  # the rebuilt figure draws
print("roundtrip ok")
"""

# (what a check reads, how the figure is drawn from a value, the values): each value's figure comes back
# with what the check reads on the original, and the values' rebuilt figures read differently
DIFFER = """
ax = plt.gca
Z = np.add.outer(np.arange(5.0), np.arange(5.0))
def norm_of(mappable):
    n = mappable.norm
    names = ("vmin", "vmax", "clip", "gamma", "vcenter", "halfrange", "linthresh", "boundaries", "Ncmap")
    return type(n).__name__, [(k, np.asarray(getattr(n, k)).tolist()) for k in names if hasattr(n, k)]
NORMS = [colors.Normalize(1, 3), colors.LogNorm(), colors.PowerNorm(2), colors.SymLogNorm(1), colors.NoNorm(),
         colors.TwoSlopeNorm(4), colors.CenteredNorm(), colors.BoundaryNorm([0, 1, 9], 256),
         colors.AsinhNorm(), colors.FuncNorm((np.exp, np.log))]
def contour_of():
    cs = ax().collections[0]
    shape = len(cs.get_paths()), len(cs.labelTexts)
    return type(cs).__name__, cs.filled, cs.levels.tolist(), cs.colors, shape
def contours(v):
    cs = getattr(plt, v[0])(Z, levels=v[1], colors=v[2])
    if v[3]:
        plt.clabel(cs)
def legend(**kw):
    plt.plot([1, 2], label="a")
    plt.legend(bbox_to_anchor=(0, 1, 1, 0.1), loc="lower left", **kw)
def legend_layout():
    lg = ax().get_legend()
    entry = lg._legend_handle_box.get_children()[0].get_children()[0].get_children()
    return lg._mode, lg._alignment, type(lg.get_frame().get_boxstyle()).__name__, type(entry[0]).__name__
def table_of():
    (t,) = ax().tables
    texts = {k: c.get_text() for k, c in t.get_celld().items()}
    cells = sorted((k, text.get_text(), text.get_fontsize()) for k, text in texts.items())
    return t._loc, t._bbox, t._autoFontsize, cells
def a_table(v):
    t = plt.table(cellText=[[v[0]]], colLabels=v[1], loc=v[2], bbox=v[3])
    if v[4]:
        t.auto_set_font_size(False)
        t.set_fontsize(v[4])
def coords():
    t = ax().texts[-1]
    named = {id(ax().transAxes): "axes", id(ax().transData): "data", id(ax().texts[0]): "text"}
    return [named.get(id(c), c) for c in (t.xycoords, t.anncoords)]
def annotate(v):
    plt.text(0, 0, "a")
    named = {"text": ax().texts[0], "axes": ax().transAxes}
    plt.annotate("b", (0, 0), xytext=(1, 1), xycoords=named.get(v, v))
CASES = [
    (lambda: norm_of(ax().images[0]), lambda v: plt.imshow(Z, norm=v), NORMS),
    (lambda: norm_of(ax().images[0]), lambda v: plt.imshow(Z, norm=colors.PowerNorm(v)), [0.5, 2]),
    (lambda: norm_of(ax().images[0]), lambda v: plt.imshow(Z, norm=colors.SymLogNorm(v)), [0.1, 1]),
    (lambda: norm_of(ax().images[0]), lambda v: plt.imshow(Z, norm=colors.TwoSlopeNorm(v)), [2, 5]),
    (lambda: norm_of(ax().images[0]), lambda v: plt.imshow(Z, norm=colors.CenteredNorm(halfrange=v)), [1, 3]),
    (lambda: norm_of(ax().images[0]), lambda v: plt.imshow(Z, norm=colors.BoundaryNorm(v, 256)),
     [[0, 1, 9], [0, 2, 9]]),
    (lambda: norm_of(ax().collections[0]), lambda v: plt.scatter([0, 1], [0, 1], c=[1, 2], norm=v),
     [colors.Normalize(0, 3), colors.LogNorm(0.5, 3)]),
    (lambda: norm_of(ax().collections[0]), lambda v: plt.pcolormesh(Z, norm=v), NORMS[:3]),
    (lambda: norm_of(plt.gcf().axes[-1]._colorbar),
     lambda v: plt.colorbar(matplotlib.cm.ScalarMappable(v), ax=ax()),
     [colors.Normalize(1, 2), colors.LogNorm(1, 2)]),
    (contour_of, contours, [("contour", [2, 4], None, False), ("contourf", [2, 4], None, False),
                            ("contour", [2, 5], None, False), ("contour", [2, 4], "k", False),
                            ("contour", [2, 4], None, True)]),
    (lambda: [type(c).__name__ for c in ax().collections] + [ax().collections[0].get_array().shape],
     lambda v: v(np.eye(3)), [plt.pcolor, plt.pcolormesh]),
    (lambda: ax().collections[0]._A.tolist(), lambda v: plt.pcolor(np.ma.masked_equal(np.eye(2), v)), [0, 1]),
    (legend_layout, lambda v: legend(mode=v), [None, "expand"]),
    (legend_layout, lambda v: legend(alignment=v), ["left", "right"]),
    (legend_layout, lambda v: legend(markerfirst=v), [True, False]),
    (legend_layout, lambda v: legend(fancybox=v), [True, False]),
    (table_of, a_table, [("1", None, "bottom", None, 0), ("2", None, "bottom", None, 0),
                         ("1", ["c"], "bottom", None, 0), ("1", None, "top", None, 0),
                         ("1", None, "bottom", [0, 0, 1, 1], 0), ("1", None, "bottom", None, 14)]),
    (lambda: len(ax().tables), lambda v: [plt.table([["1"]]) for _ in range(v)], [0, 1]),
    (coords, annotate, ["data", "axes fraction", ("data", "axes fraction"), "axes", "text"]),
]
"""

DIFFER += DIFFER_LOOP

HOSTILE = """
def draw(_):
    fig, (a, b, c) = plt.subplots(1, 3)
    x = np.linspace(-2, 2, 9)
    X, Y = np.meshgrid(x, x)
    a.contourf(X, Y, X * Y, levels=4)
    a.clabel(a.contour(X, Y, X * Y, levels=[-1, 0, 1], colors="k"))
    a.pcolor(np.ma.masked_less(np.eye(3), 0.5))
    b.imshow(np.eye(3) + 1, norm=colors.BoundaryNorm([0, 1, 2], 256))
    b.legend(["x"], mode="expand", loc="lower left", bbox_to_anchor=(0, 1, 1, 0.1))
    b.annotate("t", (0.5, 0.5), xycoords=b.transAxes, textcoords=("data", "axes fraction"), xytext=(0, 0.5))
    c.table(cellText=[["1", "2"]], colLabels=["a", "b"], loc="top", bbox=[0, 0, 1, 1])
    fig.colorbar(matplotlib.cm.ScalarMappable(colors.LogNorm(1, 2)), ax=c)

base = summary_of(draw, None)
plt.close("all")
rebuild(base)  # the untouched summary rebuilds
assert type(plt.gcf().axes[0].collections[0]).__name__ == "QuadContourSet"
evil = "__import__('os').system('touch pwned')"
big = np.zeros(1 << 24)
filled = lambda s: s["axes"][0]["collections"][0]
lines = lambda s: s["axes"][0]["collections"][1]
mesh = lambda s: s["axes"][0]["collections"][2]
image = lambda s: s["axes"][1]["images"][0]
note = lambda s: s["axes"][1]["texts"][0]["annotation"]
chart = lambda s: s["axes"][2]["extra"]["tables"][0]
cell = lambda s: chart(s)["cells"][0]
CASES = [
    (lambda s: image(s)["norm"], "kind", evil),
    (lambda s: image(s)["norm"], "kind", "Colormap"),
    (lambda s: image(s)["norm"]["params"], "callbacks", evil),
    (lambda s: image(s)["norm"]["params"], "boundaries", big),
    (lambda s: image(s)["norm"]["params"], "boundaries", np.array([evil, evil])),
    (lambda s: image(s)["norm"]["params"], "ncolors", 10**12),
    (lambda s: image(s)["norm"]["params"], "vmin", evil),
    (lambda s: image(s)["norm"]["params"], "extend", evil),
    (lambda s: mesh(s)["norm"]["params"], "vmin", [1] * 10),
    (lambda s: s["axes"][3]["extra"]["bar_norm"], "kind", evil),
    (lambda s: s["axes"][3]["extra"]["bar_norm"]["params"], "vmin", evil),
    (filled, "class", evil),
    (filled, "class", "ClabelText"),
    (filled, "levels", big),
    (filled, "levels", [evil]),
    (filled, "paths", [(np.zeros((2, 2)), np.array([1, 99], dtype=np.uint8))] * 5),
    (filled, "paths", [(np.zeros((2, 2)), None)] * 10**4),
    (filled, "paths", [(np.zeros((2, 2)), None)] * 2),
    (filled, "extend", evil),
    (filled, "origin", evil),
    (filled, "hatches", [{"a": 1}]),
    (filled, "hatches", ["/"] * 10**5),
    (filled, "range", (0, 1, evil, (1, 1))),
    (lines, "colors", evil),
    (lines, "colors", [evil] * 10**5),
    (lines, "linestyles", (evil, None)),
    (lines, "linestyles", ([1] * 10**6, None)),
    (lines, "linewidths", [evil]),
    (lines, "labels", ([10**9], [0.0])),
    (lines, "labels", ([0], big)),
    (lines, "props", {"transform": evil}),
    (mesh, "mesh", np.zeros((0,), dtype=object)),
    (mesh, "mesh", big),
    (mesh, "array", np.zeros((7, 7))),
    (mesh, "props", {"picker": evil}),
    (lambda s: s["axes"][1]["legend"]["layout"], "mode", evil),
    (lambda s: s["axes"][1]["legend"]["layout"], "markerfirst", "yes"),
    (lambda s: s["axes"][1]["legend"]["layout"], "handler_map", evil),
    (note, "xycoords", evil),
    (note, "xycoords", {"transform": evil}),
    (note, "xycoords", {"transform": "data", "x": 1}),
    (note, "xycoords", {"artist": ("__dict__", 0)}),
    (note, "xycoords", {"artist": ("texts", 10**9)}),
    (note, "textcoords", (("data", "data"), "data")),
    (note, "textcoords", ("data", "data", "data")),
    (chart, "loc", evil),
    (chart, "loc", 99),
    (chart, "bbox", (evil, [0, 0, 1, 1])),
    (chart, "bbox", ("list", [evil] * 4)),
    (chart, "edges", evil),
    (chart, "cells", [{}] * 10**5),
    (chart, "auto_columns", [0] * 10**5),
    (chart, "auto_columns", [evil]),
    (chart, "props", {"figure": evil}),
    (cell, "at", (10**9, 0)),
    (cell, "at", ("0", 0)),
    (cell, "loc", evil),
    (cell, "edges", evil),
    (cell, "props", {"transform": evil}),
    (cell, "text", {"text": evil}),
]
"""
HOSTILE += HOSTILE_LOOP


@pytest.mark.parametrize("script", [ROUNDTRIP, DIFFER, HOSTILE], ids=["roundtrip", "differ", "hostile"])
def test_norms_contours_tables_legend_layout_and_coordinates_cross(ds1000_env, tmp_path, script):
    run_with_the_checks(ds1000_env, tmp_path, HEADER + script, timeout=300)
