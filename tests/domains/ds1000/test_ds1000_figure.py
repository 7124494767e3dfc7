"""A plot solution's figure crosses to the checker as data (checks/ds1000_figure.py): what the DS-1000
plot checks read comes back on real matplotlib objects, through the no-code codec."""

import subprocess
import textwrap

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


def test_a_figure_summary_rebuilds_what_the_plot_checks_read(ds1000_env, tmp_path):
    done = subprocess.run(
        [str(env_python(ds1000_env)), "-c", textwrap.dedent(ROUNDTRIP)],
        cwd=tmp_path,
        env={"PYTHONPATH": str(CHECKS_DIR), "MPLCONFIGDIR": str(tmp_path / "mpl"), "OMP_NUM_THREADS": "1"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
