"""The DS-1000 result codec (checks/ds1000_data.py) in the pinned DS-1000 environment: values come back
with their types, dtypes and structure, and data that is not what it writes fails to load, running
nothing."""

import subprocess
import textwrap

import pytest

from recreate.domains.ds1000.env import env_python
from recreate.domains.ds1000.judge import CHECKS_DIR

ROUNDTRIP = """
import datetime, math
import numpy as np, pandas as pd, scipy.sparse, scipy.stats
import pandas.testing as pdt
from ds1000_data import dumps, loads

def back(value):
    return loads(*dumps(value))

frame = pd.DataFrame(
    {"a": [1, 2, 3], "b": ["x", None, "z"], "c": pd.Categorical(["u", "v", "u"], ordered=True),
     "d": pd.date_range("2024-01-01", periods=3, tz="Europe/Paris"),
     "e": pd.array([1, None, 3], dtype="Int64"),
     "f": [1.5, float("nan"), -0.0]},
    index=pd.MultiIndex.from_tuples([("p", 1), ("p", 2), ("q", 1)], names=["k", "n"]),
)
frame.columns = ["a", "b", "c", "d", "a", "f"]  # duplicate names survive
pdt.assert_frame_equal(back(frame), frame)
series = pd.Series([1.0, 2.0], index=pd.date_range("2024-01-01", periods=2, freq="D"), name=("t", 1))
pdt.assert_series_equal(back(series), series)
pdt.assert_index_equal(back(pd.RangeIndex(2, 10, 3, name="r")), pd.RangeIndex(2, 10, 3, name="r"))
pdt.assert_index_equal(back(pd.Index([1, "a"], dtype=object)), pd.Index([1, "a"], dtype=object))
for value in (np.float32(1.5), np.int64(-3), np.bool_(True), np.datetime64("2024-01-02")):
    got = back(value)
    assert type(got) is type(value) and got == value, (value, got)
array = np.arange(12, dtype=np.int16).reshape(3, 4)
got = back(array)
assert got.dtype == array.dtype and (got == array).all()
objects = np.array([[1, "a"], [None, (2, 3)]], dtype=object)
got = back(objects)
assert got.dtype == object and got.shape == (2, 2) and got[1, 1] == (2, 3)
csr = scipy.sparse.random(5, 4, density=0.4, format="csr", random_state=0)
got = back(csr)
assert got.format == "csr" and (got != csr).nnz == 0
assert back(scipy.sparse.lil_matrix((2, 2))).format == "lil"
plain = [1, 2.5, (3, [4]), {"k": {5, 6}}, None, True, "s", b"b", 1 + 2j, 10**30, datetime.date(2024, 1, 2)]
assert back(plain) == plain and type(back(plain)[2]) is tuple
assert math.isnan(back(float("nan"))) and back(float("-inf")) == float("-inf")
assert back(pd.Timestamp("2024-01-01 10:00", tz="UTC")) == pd.Timestamp("2024-01-01 10:00", tz="UTC")
assert back(pd.NaT) is pd.NaT and back(pd.Timedelta("1h")) == pd.Timedelta("1h")
for dtype in ("float64", "bool", "<M8[ns]", "m8[D]", "U5", "S3", "c16", "O"):  # result = a.dtype
    assert back(np.dtype(dtype)) == np.dtype(dtype) and type(back(np.dtype(dtype))) is type(np.dtype(dtype))
stat = back(scipy.stats.kstest([0.1, 0.5, 0.9], "uniform"))
assert isinstance(stat, tuple) and len(stat) == 2

class Anything:
    def __eq__(self, other):
        return True
got = back(Anything())
assert got != got and not (got == 0) and "Anything" in repr(got)
print("roundtrip ok")
"""

HOSTILE = """
import io, json, os
import numpy as np
from ds1000_data import DecodeError, dumps, loads

text, arrays = dumps([1, 2])
def rejected(text, npz):
    try:
        loads(text, npz)
    except DecodeError as exc:
        return str(exc)
    raise AssertionError("loaded")

buffer = io.BytesIO()
np.savez(buffer, a0=np.array([os.system], dtype=object))  # a pickle inside the npz
assert "pickle" in rejected(json.dumps({"t": "ndarray", "k": "a0"}), buffer.getvalue())
assert "unknown kind" in rejected(json.dumps({"t": "__reduce__", "v": "os.system"}), arrays)
for kind in ("_values", "values", "items", "array", "decode"):  # the decoder's own methods are no kinds
    assert "unknown kind" in rejected(json.dumps({"t": kind, "v": []}), arrays)
assert rejected(json.dumps({"passed": True}), arrays)
assert rejected("not json", arrays) and rejected(text, b"not an npz")
deep = {"t": "list", "v": []}
for _ in range(100):
    deep = {"t": "list", "v": [deep]}
assert "deep" in rejected(json.dumps(deep), arrays)
assert "sparse" in rejected(json.dumps({"t": "sparse", "format": "x", "shape": [1], "coo": []}), arrays)
for dtype in ("f8,i4", "<f8; import os", "[('x', '<i4')]", 5, "<f8[" + "x" * 50 + "]"):  # plain dtypes only
    assert rejected(json.dumps({"t": "npdtype", "v": dtype}), arrays)
print("hostile ok")
"""


@pytest.mark.parametrize("script", [ROUNDTRIP, HOSTILE], ids=["roundtrip", "hostile"])
def test_codec_in_the_ds1000_environment(ds1000_env, script):
    done = subprocess.run(
        [str(env_python(ds1000_env)), "-c", textwrap.dedent(script)],
        cwd=CHECKS_DIR,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
