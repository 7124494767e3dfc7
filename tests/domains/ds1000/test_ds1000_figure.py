"""A plot solution's figure crosses to the checker as data (checks/ds1000_figure.py): what the DS-1000
plot checks read comes back on real matplotlib objects, through the no-code codec."""

import subprocess
import textwrap

import pytest

from recreate.domains.ds1000.env import env_python
from recreate.domains.ds1000.judge import CHECKS_DIR

ROUNDTRIP = """
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
from matplotlib.lines import AxLine
from matplotlib.patches import Polygon
from ds1000_data import dumps, loads
from ds1000_figure import rebuild, summarize

x = np.arange(10)
plt.figure(figsize=(5, 4))
plt.plot(x, x**2, marker="d", linestyle="--", markeredgecolor=(1, 0, 0, 1), markeredgewidth=7, label="sq")
plt.axline((0, 0), slope=1)
plt.axvspan(2, 4, color="red")
plt.scatter(x, x, edgecolors="k")
plt.imshow(np.zeros((3, 3)), cmap="gray")
plt.legend(title="T", fontsize=20)
plt.xticks(rotation=45)
plt.minorticks_on()
plt.gca().tick_params(axis="x", which="minor", bottom=False)
plt.gca().invert_yaxis()
plt.xlabel("X")
plt.title("a\\nb")
plt.savefig("out.png")
limits = plt.gca().get_xlim(), plt.gca().get_ylim()
summary = loads(*dumps(summarize()))
plt.close("all")
rebuild(summary)

ax = plt.gca()
line, axline = ax.lines
assert line.get_marker() == "d" and line.get_linestyle() == "--" and line.get_markeredgewidth() == 7
assert line.get_markeredgecolor() == (1, 0, 0, 1)
np.testing.assert_allclose(line.get_xydata()[:, 1], x**2)
assert isinstance(axline, AxLine)
assert isinstance(ax.patches[0], Polygon) and ax.patches[0].get_xy().min(axis=0)[0] == 2
assert ax.patches[0].get_facecolor()[0] > 0.9
assert len(ax.collections) == 1 and ax.collections[0].get_edgecolors().shape[0] == 1
assert len(ax.images) == 1 and ax.images[0].cmap.name == "gray"
legend = ax.get_legend()
assert legend.get_texts()[0].get_text() == "sq" and legend.get_texts()[0].get_fontsize() == 20
assert legend.get_title().get_text() == "T"
assert all(label.get_rotation() == 45 for label in ax.get_xticklabels())
assert len(ax.xaxis.get_minor_ticks()) > 0 and not ax.xaxis.get_minor_ticks()[0].tick1line.get_visible()
assert ax.yaxis.get_minor_ticks()[0].tick1line.get_visible()
assert (ax.get_xlim(), ax.get_ylim()) == limits
assert ax.xaxis.get_label().get_text() == "X" and ax.get_title() == "a\\nb"
assert tuple(plt.gcf().get_size_inches()) == (5, 4)
rebuild(None)
assert plt.get_fignums() == []
print("figure ok")
"""

MORE = """
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
from ds1000_data import dumps, loads
from ds1000_figure import rebuild, summarize

x = np.arange(10)
fig, (ax, ax2) = plt.subplots(1, 2, dpi=50)
fig.suptitle("Figure", fontweight="bold")
fig.supxlabel("under all")
fig.text(0.1, 0.1, "note", color="green")
ax.plot(x, x, drawstyle="steps", markevery=2, marker="o", fillstyle="none", clip_on=False, label="line")
ax.scatter(x, x, s=100, linewidths=3, alpha=0.5, hatch="|||", marker="*", c=x, cmap="plasma", label="s")
ax.collections[0].set_clip_on(False)
star = ax.collections[0].get_paths()[0].vertices.copy()
ax.bar([1, 2], [3, 4], hatch="//", linewidth=2.5, linestyle="--", alpha=0.7, fill=False, label="bars")
ax.text(1, 2, "hi", fontsize=15, color="red", fontweight="bold", ha="right", alpha=0.4, visible=False)
ax.annotate("pt", (3, 4), xytext=(5, 6))
ax.set_title("T", fontweight="bold", color="blue")
ax.set_xlabel("X", color="red")
ax.xaxis.set_label_position("top")
ax.xaxis.tick_top()
ax.yaxis.set_label_position("right")
ax.tick_params(axis="y", labelcolor="orange", labelsize=7)
ax.grid(color="b", linestyle="--")
ax.set_aspect(2)
ax.margins(x=0, y=0.3)
ax.set_facecolor("pink")
ax.spines["left"].set_color("red")
ax.legend(ncols=2, loc="lower right", frameon=False, numpoints=2, handlelength=0.3, handletextpad=0.1)
for label in ax.get_xticklabels():
    label.set_ha("left")
fig.legend([ax2.plot(x, x, "r:")[0]], ["in figure"], loc="upper left")
ax2.pie([1, 2], wedgeprops={"width": 0.4})
ax2.vlines([1, 2], 0, 1, colors="r")
cube = fig.add_subplot(2, 2, 4, projection="3d")
cube.view_init(elev=100, azim=50)
cube.set_zlabel("Z")
plt.sca(ax)
summary = loads(*dumps(summarize()))
plt.close("all")
rebuild(summary)

fig, ax = plt.gcf(), plt.gca()
assert fig.dpi == 50 and fig._suptitle.get_text() == "Figure" and fig._suptitle.get_fontweight() == "bold"
assert fig._supxlabel.get_text() == "under all"
assert [t.get_text() for t in fig.texts] == ["Figure", "under all", "note"]
assert fig.texts[2].get_color() == "green" and fig.texts[2].get_position() == (0.1, 0.1)
assert fig.legends[0].get_texts()[0].get_text() == "in figure" and fig.legends[0]._loc == 2
line = ax.lines[0]
assert line.get_drawstyle() == "steps" and line.get_markevery() == 2 and line.get_fillstyle() == "none"
assert not line.get_clip_on()
dots = ax.collections[0]
assert dots.get_sizes()[0] == 100 and dots.get_linewidths()[0] == 3 and dots.get_alpha() == 0.5
assert dots.get_hatch() == "|||" and dots.cmap.name == "plasma" and not dots.get_clip_on()
np.testing.assert_array_equal(dots.get_array(), x)
assert dots.get_label() == "s"
bar = ax.patches[0]
assert bar.get_hatch() == "//" and bar.get_linewidth() == 2.5 and bar.get_linestyle() == "--"
assert bar.get_alpha() == 0.7 and not bar.get_fill()
text, note = ax.texts
assert text.get_text() == "hi" and text.get_fontsize() == 15 and text.get_color() == "red"
assert text.get_fontweight() == "bold" and text.get_ha() == "right" and text.get_alpha() == 0.4
assert not text.get_visible() and text.get_position() == (1, 2)
assert note.xy == (3, 4) and note.get_position() == (5, 6)
assert ax.title.get_fontweight() == "bold" and ax.title.get_color() == "blue"
assert ax.xaxis.label.get_color() == "red"
assert ax.xaxis.get_label_position() == "top" and ax.yaxis.get_label_position() == "right"
assert ax.xaxis.get_ticks_position() == "top" and ax.xaxis._major_tick_kw["label2On"]
assert not ax.xaxis._major_tick_kw["tick1On"]
assert ax.get_yticklabels()[0].get_color() == "orange"
assert ax.get_xticklabels()[0].get_ha() == "left"
assert ax.get_xgridlines()[0].get_linestyle() == "--"
assert ax.get_aspect() == 2 and ax.margins() == (0, 0.3)
assert ax.get_facecolor() == matplotlib.colors.to_rgba("pink")
assert ax.spines["left"].get_edgecolor() == (1, 0, 0, 1)
legend = ax.get_legend()
assert legend._ncols == 2 and legend._loc == 4 and not legend.get_frame_on()
assert legend.numpoints == 2 and legend.handlelength == 0.3 and legend.handletextpad == 0.1
handles = legend.legend_handles
assert handles[0].get_marker() == "o" and handles[0].get_fillstyle() == "none"
assert handles[1].get_sizes()[0] == 100 and handles[2].get_hatch() == "//"
np.testing.assert_array_equal(dots.get_paths()[0].vertices, star)
wedge, vlines = fig.axes[1].patches[0], fig.axes[1].collections[0]
assert isinstance(wedge, matplotlib.patches.Wedge) and wedge.width == 0.4 and round(wedge.theta2) == 120
assert isinstance(vlines, matplotlib.collections.LineCollection) and len(vlines.get_segments()) == 2
np.testing.assert_array_equal(vlines.get_segments()[1], [[2, 0], [2, 1]])
cube = fig.axes[2]
assert cube.name == "3d" and (cube.elev, cube.azim) == (100, 50) and cube.get_zlabel() == "Z"
print("more ok")
"""


def run_with_the_checks(env, tmp_path, script, timeout=120):
    """Run `script` on the DS-1000 environment's Python, the checks folder on its path; fail on an error."""
    done = subprocess.run(
        [str(env_python(env)), "-c", textwrap.dedent(script)],
        cwd=tmp_path,
        env={"PYTHONPATH": str(CHECKS_DIR), "MPLCONFIGDIR": str(tmp_path / "mpl"), "OMP_NUM_THREADS": "1"},
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert done.returncode == 0, done.stderr[-3000:]


@pytest.mark.parametrize("script", [ROUNDTRIP, MORE], ids=["basics", "styles"])
def test_a_figure_summary_rebuilds_what_the_plot_checks_read(ds1000_env, tmp_path, script):
    run_with_the_checks(ds1000_env, tmp_path, script)
