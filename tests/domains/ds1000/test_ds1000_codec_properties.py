"""Round-trip properties of the DS-1000 result codec, run where the codec runs: in the pinned DS-1000
environment, with this project's Hypothesis (and only it) put on that interpreter's path."""

import importlib.metadata
import os
import subprocess
import sys
from pathlib import Path

from recreate.domains.ds1000.env import MPL_CACHE, env_python
from recreate.domains.ds1000.judge import CHECKS_DIR

PROPERTIES = Path(__file__).with_name("ds1000_codec_properties.py")


def _link_distributions(folder: Path, names: tuple[str, ...]) -> None:
    """Link the top-level modules of these installed distributions into `folder`."""
    for name in names:
        distribution = importlib.metadata.distribution(name)
        tops = {Path(f).parts[0] for f in distribution.files or () if not str(f).startswith("..")}
        for top in tops - {"__pycache__"}:
            if not top.endswith(".dist-info"):
                (folder / top).symlink_to(distribution.locate_file(top))


def test_codec_round_trips_every_kind(ds1000_env, tmp_path):
    _link_distributions(tmp_path, ("hypothesis", "sortedcontainers"))
    done = subprocess.run(
        [str(env_python(ds1000_env)), str(PROPERTIES)],
        cwd=tmp_path,
        env={
            **os.environ,
            "PYTHONPATH": f"{CHECKS_DIR}{os.pathsep}{tmp_path}",
            "MPLBACKEND": "Agg",
            "MPLCONFIGDIR": str(ds1000_env / MPL_CACHE),
        },
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, (done.stdout + done.stderr)[-5000:]


NEW_KINDS = """
import collections, decimal, enum, fractions, json
import numpy as np, scipy.sparse, scipy.stats
from ds1000_data import DecodeError, dumps, loads

def back(value):
    return loads(*dumps(value))

x, y = [1.0, 2.0, 4.0, 7.0], [2.0, 3.5, 5.0, 9.0]
for result in (scipy.stats.ttest_ind(x, y), scipy.stats.ks_2samp(x, y)):
    got = back(result)
    assert got == result and got.pvalue == result.pvalue and got[1] == result[1], (got, result)
    assert np.allclose(got, result) and got._fields == result._fields
    assert repr(got).startswith(type(result).__name__ + "("), got
assert back(scipy.stats.ttest_ind(x, y)).df == scipy.stats.ttest_ind(x, y).df
assert back(scipy.stats.ks_2samp(x, y)).statistic_sign == scipy.stats.ks_2samp(x, y).statistic_sign
class Color(enum.IntEnum):
    RED = 2
values = [range(3, -9, -2), fractions.Fraction(-7, 3), decimal.Decimal("-1.50"), Color.RED, {1: 2}.items()]
got = back(values)
assert got == [range(3, -9, -2), fractions.Fraction(-7, 3), decimal.Decimal("-1.50"), 2, [(1, 2)]], got
assert [type(v) for v in got] == [range, fractions.Fraction, decimal.Decimal, int, list], got
got = back(scipy.sparse.csr_array(np.eye(3)))
assert type(got) is scipy.sparse.csr_array and (got.toarray() == np.eye(3)).all(), got
assert type(back(scipy.sparse.csr_matrix(np.eye(3)))) is scipy.sparse.csr_matrix

_, npz = dumps(None)
def record(fields, n=None, extra=(), name="R"):
    n = len(fields) if n is None else n
    node = {"t": "record", "name": name, "fields": fields, "v": [None] * n, "extra": list(extra)}
    return json.dumps({**node, "xv": [None] * len(extra)})
for text in (
    record(["__class__"]), record(["_x"]), record(["import os"]), record(["a", "a"]), record(["a"], 2),
    record(["a=__import__('os').system('exit 3')"]), record(["a"], extra=["__eq__"]), record(["def"]),
    record([f"f{i}" for i in range(10**6)]), record(["a"], name="__import__('os')"),
):
    try:
        got = loads(text, npz)
    except DecodeError:
        continue
    raise AssertionError(f"decoded {text[:100]} to {got!r}")
print("ok")
"""


def test_new_kinds_with_this_projects_numpy_and_scipy():
    """Named tuples and SciPy results, range, Fraction, Decimal, IntEnum, dict views and sparse arrays
    cross with their attributes, and hostile record nodes are a DecodeError: here, without the DS-1000
    environment (so this runs offline too)."""
    done = subprocess.run(
        [sys.executable, "-c", NEW_KINDS],
        env={**os.environ, "PYTHONPATH": str(CHECKS_DIR)},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0 and done.stdout.strip() == "ok", (done.stdout + done.stderr)[-5000:]
