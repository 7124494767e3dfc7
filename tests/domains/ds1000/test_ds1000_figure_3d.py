"""3D axes, quivers and the artists' order of a plot solution's figure (checks/ds1000_figure_3d.py) cross
to the checker: the rebuilt 3D figure draws and its artists are 3D ones with the same 3D data, a quiver
comes back as a `Quiver` (with its key), `ax.get_children()` keeps the order the artists were added in.
Each kept value comes back as it was, two figures that differ in it come back different (a wrong solution
cannot pass a check of it), and a hostile summary is an error, never code run."""

import pytest

from tests.domains.ds1000.test_ds1000_figure import run_with_the_checks
from tests.domains.ds1000.test_ds1000_figure_artists import DIFFER_LOOP, HEADER, HOSTILE_LOOP

HEADER += """
from matplotlib import quiver
from mpl_toolkits.mplot3d import art3d
"""

ROUNDTRIP = """
x = np.arange(3.0)
X, Y = np.meshgrid(x, x)
fig = plt.figure()
ax = fig.add_subplot(121, projection="3d")
ax.scatter([1, 2, 3], [4, 5, 6], [7, 8, 9], s=[10, 20, 30], c="r", depthshade=False)
ax.plot_surface(X, Y, X * Y, cmap="viridis")
ax.plot([0, 1], [1, 2], [2, 3], "g--")
ax.plot_wireframe(X, Y, X + Y)
ax.bar3d([0], [0], [0], 1, 1, 2, color="c")
ax.plot_trisurf([0, 1, 0, 1], [0, 0, 1, 1], [0, 1, 1, 2])
ax.add_collection3d(collections.PolyCollection([[(0, 0), (1, 0), (1, 1)]]), zs=[2], zdir="y")
ax.contour(X, Y, X * Y, levels=3)
ax.bar([1, 2], [3, 4], zs=1, zdir="y")
ax.text(1, 1, 1, "hi", zdir="x")
ax.set_zlabel("depth")
ax.set_zticks([0, 4, 8], ["lo", "mid", "hi"])
ax.set_zlim(-1, 9)
ax.view_init(30, 40, 10)
ax.set_box_aspect((1, 2, 3))
ax.set_proj_type("persp", focal_length=0.5)
ax.grid(False)
scatter3d = np.asarray(ax.collections[0]._offsets3d, float).tolist()
surface = ax.collections[1]._vec.tolist()
b = fig.add_subplot(122)
arrows = b.quiver([0, 1], [0, 1], [1, 2], [2, 1], [3, 4], scale=5, pivot="mid", units="xy", width=0.1)
b.quiverkey(arrows, 0.5, 0.9, 1, "1 m/s", labelpos="E", coordinates="figure")
b.plot([1, 2])
b.streamplot(x, x, np.ones((3, 3)), np.ones((3, 3)))
b.scatter([1], [1])
order = [type(a).__name__ for a in b.get_children()]
fig.canvas.draw()  # drawn first: the summary reads the 3D data, not the projected one
summary = loads(*dumps(summarize()))
plt.close("all")
rebuild(summary)

fig = plt.gcf()
ax, b = fig.axes
kinds = [type(c).__name__ for c in ax.collections]
assert kinds == ["Path3DCollection", "Poly3DCollection", "Line3DCollection", "Poly3DCollection",
                 "Poly3DCollection", "Poly3DCollection", "ContourSet3D"], kinds
points = ax.collections[0]
assert np.asarray(points._offsets3d, float).tolist() == scatter3d == [[1, 2, 3], [4, 5, 6], [7, 8, 9]]
assert points._sizes3d.tolist() == [10, 20, 30] and not points.get_depthshade()
assert matplotlib.colors.to_hex(collections.Collection.get_facecolor(points)[0]) == "#ff0000"
assert ax.collections[1]._vec.tolist() == surface and ax.collections[1].cmap.name == "viridis"
assert [np.asarray(v, float).tolist() for v in ax.lines[0].get_data_3d()] == [[0, 1], [1, 2], [2, 3]]
assert isinstance(ax.lines[0], art3d.Line3D) and ax.lines[0].get_linestyle() == "--"
assert all(isinstance(p, art3d.Patch3D) for p in ax.patches) and len(ax.patches) == 2
assert [tuple(v) for v in ax.patches[0]._segment3d][:2] == [(0.6, 1, 0), (1.4, 1, 0)]
assert np.asarray(ax.collections[2]._segments3d[0]).shape == (3, 3)
text = ax.texts[0]
assert isinstance(text, art3d.Text3D) and text.get_position_3d() == (1, 1, 1)
assert text._dir_vec.tolist() == [1, 0, 0]
assert ax.get_zlabel() == "depth" and ax.get_zlim() == (-1, 9) and ax.get_zticks().tolist() == [0, 4, 8]
assert [t.get_text() for t in ax.get_zticklabels()] == ["lo", "mid", "hi"]
assert (ax.elev, ax.azim, ax.roll, ax._focal_length, ax._draw_grid) == (30, 40, 10, 0.5, False)
assert np.allclose(ax._box_aspect / ax._box_aspect[0], [1, 2, 3])
(arrows,) = b.collections[:1]
assert isinstance(arrows, quiver.Quiver) and arrows.U.tolist() == [1, 2] and arrows.V.tolist() == [2, 1]
assert arrows.get_array().tolist() == [3, 4]
assert (arrows.scale, arrows.pivot, arrows.units) == (5, "middle", "xy")
assert arrows.width == 0.1 and arrows.XY.tolist() == [[0, 0], [1, 1]]
(key,) = [a for a in b.get_children() if isinstance(a, quiver.QuiverKey)]
assert key.Q is arrows and (key.U, key.label, key.labelpos, key.coord) == (1, "1 m/s", "E", "figure")
rebuilt = [type(a).__name__ for a in b.get_children()]
assert rebuilt == [name.replace("FancyArrowPatch", "PathPatch") for name in order], (order, rebuilt)
fig.canvas.draw()  # the rebuilt 3D figure draws
fig.savefig("rebuilt.png")
print("roundtrip ok")
"""

# (what a check reads, how the figure is drawn from a value, the values): each value's figure comes back
# with what the check reads on the original, and the values' rebuilt figures read differently
DIFFER = """
ax = plt.gca
def ax3():
    return plt.figure().add_subplot(projection="3d")
X, Y = np.meshgrid(np.arange(3.0), np.arange(3.0))
def floats(values):
    return np.asarray(values, float).tolist()
def first(): return ax().collections[0]
def children():
    return [type(a).__name__ for a in ax().get_children()[:3]]
def ordered(v):
    for kind in v:
        {"line": lambda: plt.plot([1, 2]), "dots": lambda: plt.scatter([1], [2]),
         "bar": lambda: plt.bar([1], [2]), "text": lambda: plt.text(0, 0, "t"),
         "image": lambda: plt.imshow(np.eye(2))}[kind]()
def quiver_of():
    q = first()
    return type(q).__name__, q.U.tolist(), q.V.tolist(), q.scale, q.units, q.angles, q.pivot, q.width, \
        q.get_facecolor().tolist()
def arrows(**kw):
    plt.quiver([0, 1], [0, 1], [1, 1], [1, 2], **kw)
def keyed(v):
    q = plt.quiver([0, 1], [0, 1], [1, 1], [1, 2])
    plt.quiverkey(q, 0.5, 0.5, v[0], v[1], labelpos=v[2])
def key_of():
    (k,) = [a for a in ax().get_children() if isinstance(a, quiver.QuiverKey)]
    return k.U, k.label, k.labelpos, k.Q is first()
CASES = [
    (lambda: floats(first()._offsets3d), lambda v: ax3().scatter(*v), [([0, 1], [0, 1], [0, 1]),
                                                                       ([0, 1], [0, 1], [0, 2])]),
    (lambda: floats(first()._sizes3d), lambda v: ax3().scatter([0, 1], [0, 1], [0, 1], s=v),
     [[1, 2], [1, 3]]),
    (lambda: first().get_depthshade(), lambda v: ax3().scatter([0], [0], [0], depthshade=v), [True, False]),
    (lambda: collections.Collection.get_facecolor(first()).tolist(),
     lambda v: ax3().scatter([0, 1], [0, 1], [0, 1], c=v), ["r", "b"]),
    (lambda: [floats(v) for v in ax().lines[0].get_data_3d()], lambda v: ax3().plot([0, 1], [0, 1], v),
     [[0, 1], [0, 2]]),
    (lambda: (type(first()).__name__, first()._vec.tolist()), lambda v: ax3().plot_surface(X, Y, X * v),
     [1, 2]),
    (lambda: first()._facecolor3d.tolist(), lambda v: ax3().plot_surface(X, Y, X, color=v), ["r", "b"]),
    (lambda: first()._vec.tolist(), lambda v: ax3().bar3d([0], [0], [0], 1, 1, v), [1, 2]),
    (lambda: [floats(s) for s in first()._segments3d], lambda v: ax3().plot_wireframe(X, Y, X * v), [1, 2]),
    (lambda: [floats(s) for s in first()._segments3d], lambda v: ax3().quiver([0], [0], [0], [1], [1], v),
     [1, 2]),
    (lambda: floats(ax().patches[0]._segment3d), lambda v: ax3().bar([1], [2], zs=v, zdir="y"), [0, 1]),
    (lambda: (floats(ax().texts[0].get_position_3d()), floats(ax().texts[0]._dir_vec)),
     lambda v: ax3().text(0, 0, v[0], "t", zdir=v[1]), [(1, "x"), (2, "x"), (1, None)]),
    (lambda: (ax().elev, ax().azim, ax().roll, ax()._vertical_axis), lambda v: ax3().view_init(*v),
     [(10, 20, 0, "z"), (10, 30, 0, "z"), (10, 20, 5, "z"), (10, 20, 0, "y")]),
    (lambda: ax()._focal_length, lambda v: ax3().set_proj_type(*v),
     [("persp", 1), ("persp", 0.5), ("ortho",)]),
    (lambda: floats(ax()._box_aspect), lambda v: ax3().set_box_aspect(v), [(1, 1, 1), (1, 1, 2)]),
    (lambda: (ax()._draw_grid, ax().computed_zorder),
     lambda v: plt.figure().add_subplot(projection="3d", computed_zorder=v[1]).grid(v[0]),
     [(True, True), (False, True), (True, False)]),
    (lambda: (ax().get_zlabel(), ax().get_zlim()), lambda v: ax3().set(zlabel=v[0], zlim=v[1]),
     [("a", (0, 1)), ("b", (0, 1)), ("a", (0, 2))]),
    (lambda: (floats(ax().get_zticks()), [t.get_text() for t in ax().get_zticklabels()]),
     lambda v: ax3().set_zticks(*v), [([0, 1],), ([0, 2],), ([0, 1], ["a", "b"])]),
    (quiver_of, lambda v: arrows(**v), [{}, {"scale": 2}, {"units": "xy"}, {"angles": "xy"}, {"pivot": "tip"},
                                        {"width": 0.1}, {"color": "r"}]),
    (lambda: [first().U.tolist(), first().get_array().tolist()],
     lambda v: plt.quiver([0, 1], [0, 1], v, [1, 1], [v[0], 5]), [[1, 2], [3, 2]]),
    (key_of, keyed, [(1, "a", "N"), (2, "a", "N"), (1, "b", "N"), (1, "a", "E")]),
    (children, ordered, [["line", "dots"], ["dots", "line"], ["bar", "text", "line"], ["image", "dots"]]),
]
"""
DIFFER += DIFFER_LOOP

HOSTILE = """
def draw(_):
    fig = plt.figure()
    a = fig.add_subplot(121, projection="3d")
    X, Y = np.meshgrid(np.arange(3.0), np.arange(3.0))
    a.scatter([0, 1], [0, 1], [0, 1])
    a.plot_surface(X, Y, X * Y)
    a.plot_wireframe(X, Y, X)
    a.contour(X, Y, X * Y, levels=2)
    a.plot([0, 1], [0, 1], [0, 1])
    a.bar([1], [2], zs=1, zdir="y")
    a.text(0, 0, 0, "t")
    b = fig.add_subplot(122)
    b.quiverkey(b.quiver([0, 1], [0, 1], [1, 1], [1, 2]), 0.5, 0.5, 1, "k")

base = summary_of(draw, None)
plt.close("all")
rebuild(base)  # the untouched summary rebuilds and draws
plt.gcf().canvas.draw()
evil = "__import__('os').system('touch pwned')"
big = np.zeros(1 << 23)
a = lambda s: s["axes"][0]
view = lambda s: a(s)["more"]["three_d"]
col = lambda i: lambda s: a(s)["collections"][i]["3d"]
arrows = lambda s: s["axes"][1]["collections"][0]
key = lambda s: s["axes"][1]["more"]["quiverkeys"][0]
CASES = [
    (view, "view", (10, 20, 0, evil)),
    (view, "camera", (10, 1, (1, 1, evil))),
    (view, "camera", (10, 1, (1, 1))),
    (view, "camera", (-1, 1, (1, 1, 1))),
    (view, "camera", (10, float("nan"), (1, 1, 1))),
    (view, "camera", (10, evil, (1, 1, 1))),
    (view, "scale", (evil, {})),
    (view, "flags", evil),
    (view, "tick_kw", ({"transform": evil}, {})),
    (view, "ticks", {"major": None, "minor": None}),
    (col(0), "kind", evil),
    (col(0), "kind", "polygons"),
    (col(0), "xyz", (np.zeros(2), np.zeros(2), np.array([evil, evil]))),
    (col(0), "xyz", (np.zeros(2), np.zeros(2), np.zeros(3))),
    (col(0), "xyz", (big, big, big)),
    (col(0), "sizes", (np.zeros(0, dtype=object), np.zeros(1))),
    (col(0), "face", evil),
    (col(1), "verts", [np.zeros((3, 2))]),
    (col(1), "verts", [np.zeros((1, 3))] * (1 << 23)),
    (col(1), "verts", np.zeros((2, 3, 3))),
    (col(1), "codes", [np.array([1, 99, 2], dtype=np.uint8)] * 9),
    (col(1), "codes", [None]),
    (col(1), "zsort", (evil, None)),
    (col(1), "zsort", ("average", evil)),
    (col(1), "edge", evil),
    (col(2), "segments", [np.array([[evil, evil, evil]])]),
    (col(2), "segments", evil),
    (col(3), "paths", [(np.zeros((2, 3)), np.array([1, 99], dtype=np.uint8))]),
    (col(3), "paths", [(np.zeros((2, 2)), None)]),
    (lambda s: a(s)["lines"][0], "xyz", (np.zeros(2), np.zeros(2), np.zeros(3))),
    (lambda s: a(s)["lines"][0], "xyz", (np.zeros(2), np.zeros(2))),
    (lambda s: a(s)["lines"][0], "xyz", (np.zeros(2), np.zeros(2), np.array([evil, evil]))),
    (lambda s: a(s)["patches"][0], "xyz", np.zeros((4, 2))),
    (lambda s: a(s)["patches"][0], "xyz", np.zeros((0, 3))),
    (lambda s: a(s)["patches"][0], "codes", np.array([1, 99, 99, 99], dtype=np.uint8)),
    (lambda s: a(s)["patches"][0], "kind", evil),
    (lambda s: a(s)["patches"][0]["props"], "transform", evil),
    (lambda s: a(s)["texts"][0], "z3d", (evil, (0, 0, 1))),
    (lambda s: a(s)["texts"][0], "z3d", (0, (0, evil, 1))),
    (lambda s: a(s)["more"], "order", [("__dict__", 0)]),
    (lambda s: a(s)["more"], "order", [("lines", -1)]),
    (lambda s: a(s)["more"], "order", [("lines", 0)] * 10**7),
    (lambda s: a(s)["more"], "order", [("lines", True)]),
    (lambda s: a(s)["more"], "order", evil),
    (arrows, "kind", evil),
    (lambda s: arrows(s)["quiver"], "X", big),
    (lambda s: arrows(s)["quiver"], "U", np.array([evil, evil])),
    (lambda s: arrows(s)["quiver"], "C", np.zeros((2, 2))),
    (lambda s: arrows(s)["quiver"]["settings"], "pivot", evil),
    (lambda s: arrows(s)["quiver"]["settings"], "units", evil),
    (lambda s: arrows(s)["quiver"]["settings"], "angles", evil),
    (lambda s: arrows(s)["quiver"]["settings"], "angles", big),
    (lambda s: arrows(s)["quiver"]["settings"], "scale", evil),
    (lambda s: arrows(s)["quiver"]["settings"], "transform", evil),
    (lambda s: arrows(s), "props", {"picker": evil}),
    (key, "quiver", 10**9),
    (key, "quiver", None),
    (key, "label", ["not text"]),
    (key, "at", (evil, 0, 1, 0, 0.1)),
    (key, "settings", {"coord": evil, "labelpos": "N"}),
    (key, "settings", {"coord": "axes", "labelpos": "N", "fontproperties": evil}),
    (key, "colors", (evil, None)),
]
"""
HOSTILE += HOSTILE_LOOP


@pytest.mark.parametrize("script", [ROUNDTRIP, DIFFER, HOSTILE], ids=["roundtrip", "differ", "hostile"])
def test_3d_axes_quivers_and_the_artists_order_cross(ds1000_env, tmp_path, script):
    run_with_the_checks(ds1000_env, tmp_path, HEADER + script, timeout=300)
