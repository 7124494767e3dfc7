"""Round-trip properties of the DS-1000 result codec (checks/ds1000_data.py), run INSIDE the pinned DS-1000
environment (numpy 1.26, pandas 1.5.3, scipy 1.12, matplotlib 3.8) by test_ds1000_codec_properties.py,
with Hypothesis put on its path. For every value of the kinds DS-1000 solutions return, what crosses
comes back the same: same type, dtype, shape, index, items (object items one by one), bit for bit.
Figures: the summary of a figure rebuilt from a summary that crossed is that summary again."""

import collections
import decimal
import enum
import fractions
import json
import logging
import sys

import hypothesis.extra.numpy as hnp
import hypothesis.extra.pandas as hpd
import numpy as np
import pandas as pd
import pandas.testing as pdt
import scipy.sparse
import scipy.stats
from ds1000_data import DecodeError, dumps, loads
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

logging.getLogger("matplotlib").setLevel(logging.ERROR)  # "no artists with labels" for a bare legend()
SETTINGS = settings(
    max_examples=40,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=list(HealthCheck),
)


def back(value):
    return loads(*dumps(value))


def same(a, b):
    """Equal in type and value, NaN equal to NaN, -0.0 not equal to 0.0, object items one by one."""
    if isinstance(a, tuple) and type(a) is not tuple:  # a named tuple: a type made for it comes back
        same_record(a, b)
        return
    assert type(a) is type(b), (type(a), type(b), a, b)
    if scipy.sparse.issparse(a):  # first: a dok_matrix is a dict
        assert (a.format, a.shape, a.dtype) == (b.format, b.shape, b.dtype)
        same(a.toarray(), b.toarray())
    elif isinstance(a, np.ndarray):
        assert (a.dtype, a.shape) == (b.dtype, b.shape), (a.dtype, b.dtype, a.shape, b.shape)
        if a.dtype.hasobject:
            for x, y in zip(a.ravel(), b.ravel(), strict=True):
                same(x, y)
        else:
            assert a.tobytes() == b.tobytes(), (a, b)
    elif isinstance(a, np.generic):
        assert a.dtype == b.dtype and a.tobytes() == b.tobytes(), (a, b)
    elif isinstance(a, (float, complex, decimal.Decimal)):  # repr: Decimal's sNaN does not compare
        assert repr(a) == repr(b), (a, b)
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), (a, b)
        for x, y in zip(a, b, strict=True):
            same(x, y)
    elif isinstance(a, dict):
        same(list(a), list(b))
        for x, y in zip(a.values(), b.values(), strict=True):
            same(x, y)
    elif isinstance(a, pd.api.extensions.ExtensionArray):
        assert a.dtype == b.dtype, (a.dtype, b.dtype)
        pdt.assert_extension_array_equal(a, b)
    elif isinstance(a, (pd.Series, pd.Index)):
        same_pandas(a, b)
    elif isinstance(a, pd.DataFrame):
        same_pandas(a.columns, b.columns)
        same_pandas(a.index, b.index)
        for i in range(a.shape[1]):
            same_pandas(a.iloc[:, i], b.iloc[:, i])
    else:
        assert a == b or (a != a and b != b), (a, b)


def same_record(a, b):
    """What a check reads of a named tuple: its fields by name and place, its extra fields, its items."""
    assert isinstance(b, tuple) and type(b).__name__ == type(a).__name__, (type(a), type(b))
    assert type(b)._fields == type(a)._fields and b._fields == a._fields, (a, b)
    extra = tuple(getattr(type(a), "_extra_fields", ()))
    assert tuple(getattr(type(b), "_extra_fields", ())) == extra, (a, b)
    same(tuple(b), tuple(a))
    for i, name in enumerate(a._fields):
        same(getattr(b, name), getattr(a, name))
        same(b[i], a[i])
    for name in extra:
        same(getattr(b, name), getattr(a, name))


def same_pandas(a, b):
    assert type(a) is type(b) and a.dtype == b.dtype and len(a) == len(b), (a, b)
    same(a.name, b.name) if not isinstance(a, pd.MultiIndex) else same(list(a.names), list(b.names))
    assert getattr(a, "freq", None) == getattr(b, "freq", None)
    if isinstance(a, pd.Series):
        same_pandas(a.index, b.index)
    if a.dtype == object:
        same(list(a), list(b))
    elif isinstance(a, pd.Series):
        pdt.assert_series_equal(a, b, check_exact=True, check_freq=True)
    else:
        pdt.assert_index_equal(a, b, exact=True, check_exact=True)


# plain Python values, as mixed-type lists, tuples and dicts hold them
hashable = st.one_of(st.integers(), st.text(max_size=4), st.booleans())
atoms = st.one_of(
    st.none(),
    hashable,
    st.floats(),
    st.complex_numbers(),
    st.binary(max_size=4),
    st.dates(),
    st.datetimes(),
    st.timedeltas(),
    st.integers(-(10**30), 10**30),
)
nested = st.recursive(
    atoms,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.lists(inner, max_size=4).map(tuple),
        st.dictionaries(hashable, inner, max_size=3),
        st.frozensets(hashable, max_size=3),
        st.lists(inner, min_size=1, max_size=3).map(lambda items: _record("Pair", items)),
    ),
    max_leaves=8,
)
plain_dtypes = st.one_of(
    hnp.scalar_dtypes(),
    hnp.integer_dtypes(endianness="?"),
    hnp.byte_string_dtypes(max_len=4),
    hnp.unicode_string_dtypes(max_len=4),
    hnp.array_dtypes(max_size=3),
)
shapes = hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=4)
object_arrays = st.lists(nested, max_size=6).map(lambda items: _object_array(items))


def _record(name, items):
    return collections.namedtuple(name, [f"f{i}" for i in range(len(items))])(*items)


def _object_array(items):
    out = np.empty(len(items), dtype=object)
    for i, item in enumerate(items):
        out[i] = item
    return out


@SETTINGS
@given(st.one_of(nested, st.lists(nested, max_size=5), st.lists(nested, max_size=5).map(tuple)))
def plain_values(value):
    same(back(value), value)


@SETTINGS
@given(st.one_of(hnp.arrays(plain_dtypes, shapes), object_arrays))
def numpy_arrays(array):
    same(back(array), array)
    same(back([array, (array,)]), [array, (array,)])


@SETTINGS
@given(hnp.arrays(hnp.scalar_dtypes(), hnp.array_shapes(min_dims=1, max_dims=2, min_side=0)), st.data())
def numpy_subclasses(array, data):
    masked = np.ma.MaskedArray(array, mask=data.draw(hnp.arrays(bool, array.shape)))
    got = back(masked)
    assert type(got) is np.ma.MaskedArray and (got.mask == masked.mask).all()
    same(got.data, masked.data)
    same(got.fill_value, masked.fill_value)
    matrix = np.asmatrix(np.atleast_2d(array))
    got = back(matrix)
    assert type(got) is np.matrix
    same(np.asarray(got), np.asarray(matrix))


@SETTINGS
@given(hnp.arrays(st.one_of(hnp.scalar_dtypes(), hnp.unicode_string_dtypes(min_len=1)), ()))
def numpy_scalars(array):
    same(back(array[()]), array[()])


index_values = st.one_of(
    st.integers(-5, 5),
    st.text(max_size=3),
    st.sampled_from(list(pd.date_range("2020-01-01", periods=5, freq="D"))),
)
indexes = st.one_of(
    hpd.range_indexes(max_size=5),
    hpd.indexes(elements=st.integers(-100, 100), max_size=5),
    hpd.indexes(elements=st.text(max_size=3), max_size=5),
    hpd.indexes(elements=st.one_of(st.integers(-9, 9), st.text(max_size=2)), max_size=5),  # mixed object
    st.integers(0, 5).map(lambda n: pd.date_range("2021-03-01", periods=n, freq="h", name="when")),
    st.integers(0, 5).map(lambda n: pd.period_range("2021-01", periods=n, freq="M")),
    st.integers(0, 5).map(lambda n: pd.CategoricalIndex(list("abcab")[:n], name="c")),
    st.lists(st.tuples(index_values, st.integers(0, 3)), max_size=5).map(
        lambda pairs: pd.MultiIndex.from_tuples(pairs, names=["k", None]) if pairs else pd.RangeIndex(0)
    ),
)


def column(n):
    """A strategy for one column of n rows, of every kind a DS-1000 frame holds."""
    numeric = st.sampled_from(["int64", "float64", "bool", "datetime64[ns]", "timedelta64[ns]", "uint8"])
    return st.one_of(
        numeric.flatmap(lambda dt: hnp.arrays(np.dtype(dt), n)),
        st.lists(nested, min_size=n, max_size=n).map(_object_array),
        st.lists(st.sampled_from(["x", "y", "z"]), min_size=n, max_size=n).map(
            lambda v: pd.Categorical(v, categories=["z", "y", "x"], ordered=len(v) % 2 == 0)
        ),
        st.lists(st.one_of(st.none(), st.integers(-9, 9)), min_size=n, max_size=n).map(
            lambda v: pd.array(v, dtype="Int64")
        ),
        st.lists(st.one_of(st.none(), st.text(max_size=3)), min_size=n, max_size=n).map(
            lambda v: pd.array(v, dtype="string")
        ),
        st.just(pd.date_range("2022-10-30", periods=n, freq="7h", tz="Europe/Paris").array),
        st.just(pd.period_range("2020-01", periods=n, freq="Q").array),
        st.just(pd.interval_range(0, n, periods=n).array if n else pd.arrays.IntervalArray([])),
    )


@SETTINGS
@given(indexes, st.data())
def pandas_series(index, data):
    series = pd.Series(data.draw(column(len(index))), index=index, name=data.draw(st.one_of(atoms, hashable)))
    same(back(series), series)
    if not isinstance(series.dtype, np.dtype):  # an extension array on its own, as .unique() returns
        same(back(series.array), series.array)
    same(back(index), index)


@SETTINGS
@given(indexes, st.data())
def pandas_frames(index, data):
    width = data.draw(st.integers(0, 4))
    frame = pd.DataFrame({i: data.draw(column(len(index))) for i in range(width)}, index=index)
    labels = data.draw(st.lists(st.sampled_from(["a", "b", 3]), min_size=width, max_size=width))
    if data.draw(st.booleans()):
        frame.columns = pd.MultiIndex.from_arrays([labels, list(range(width))]) if width else frame.columns
    else:
        frame.columns = pd.Index(labels, dtype=object)  # duplicates and mixed types included
    same(back(frame), frame)
    same(
        back({"frame": frame, "parts": (frame.index, list(frame.columns))}),
        {"frame": frame, "parts": (frame.index, list(frame.columns))},
    )


@SETTINGS
@given(
    st.sampled_from(["csr", "csc", "coo", "lil", "dok", "dia", "bsr"]),
    st.integers(0, 6),
    st.integers(0, 6),
    st.floats(0, 1),
    st.sampled_from(["float64", "int64", "float32", "bool", "complex128"]),
)
def sparse_matrices(fmt, rows, cols, density, dtype):
    dense = (np.random.default_rng(rows * 7 + cols).random((rows, cols)) < density) * 3
    matrix = scipy.sparse.coo_matrix(dense.astype(dtype)).asformat(fmt)
    same(back(matrix), matrix)


@SETTINGS
@given(
    st.sampled_from(["csr", "csc", "coo", "lil", "dok", "dia", "bsr"]),
    st.integers(0, 6),
    st.integers(0, 6),
    st.sampled_from(["float64", "int64", "bool"]),
)
def sparse_arrays(fmt, rows, cols, dtype):
    dense = (np.random.default_rng(rows * 5 + cols).random((rows, cols)) < 0.4) * 2
    array = scipy.sparse.coo_array(dense.astype(dtype)).asformat(fmt)
    got = back(array)
    assert type(got).__name__ == f"{fmt}_array", type(got)
    same(got, array)
    same(back([array, scipy.sparse.csr_matrix(dense)]), [array, scipy.sparse.csr_matrix(dense)])


names = st.from_regex(r"[a-z][a-z0-9_]{0,6}", fullmatch=True).filter(
    lambda n: n not in ("if", "in", "is", "or")
)


@SETTINGS
@given(
    st.lists(names, min_size=0, max_size=5, unique=True).flatmap(
        lambda fields: st.tuples(
            st.just(fields), st.lists(nested, min_size=len(fields), max_size=len(fields))
        )
    ),
    hnp.arrays(np.float64, st.integers(2, 8), elements=st.floats(-100, 100)),
    hnp.arrays(np.float64, st.integers(2, 8), elements=st.floats(-100, 100)),
)
def records(fields_items, x, y):
    fields, items = fields_items
    record = collections.namedtuple("Drawn", fields)(*items)
    same(back(record), record)
    same(back([record, (record,)]), [record, (record,)])
    for result in (
        scipy.stats.ttest_ind(x, y),
        scipy.stats.ks_2samp(x, y),
        scipy.stats.linregress(np.arange(len(x)), x),
    ):
        got = back(result)
        same(got, result)
        if not np.isnan(np.asarray(result, dtype=float)).any():  # NaN: equal only to itself
            assert got == result and tuple(got) == tuple(result) and got == tuple(result), (got, result)
        assert np.allclose(got, result, equal_nan=True) and got.pvalue is not None
        assert repr(got).startswith(type(result).__name__ + "(")
    got = back(scipy.stats.ttest_ind(x, y))
    assert got.df == scipy.stats.ttest_ind(x, y).df and got[1] is got.pvalue
    got = back(scipy.stats.ks_2samp(x, y))
    assert got.statistic_location == scipy.stats.ks_2samp(x, y).statistic_location


class Color(enum.IntEnum):
    RED = 1
    BLUE = -(10**20)


class Perm(enum.IntFlag):
    R = 4
    W = 2


@SETTINGS
@given(
    st.integers(-(10**20), 10**20),
    st.integers(-(10**20), 10**20),
    st.integers(-50, 50).filter(bool),
    st.fractions(),
    st.decimals(),
    st.dictionaries(hashable, nested, max_size=4),
)
def python_kinds(start, stop, step, fraction, number, mapping):
    same(back(range(start, stop, step)), range(start, stop, step))
    same(back((fraction, [fractions.Fraction(-(10**40), 3)])), (fraction, [fractions.Fraction(-(10**40), 3)]))
    same(
        back([number, decimal.Decimal("-0.000"), decimal.Decimal("1E+999")]),
        [number, decimal.Decimal("-0.000"), decimal.Decimal("1E+999")],
    )
    same(back([Color.RED, Color.BLUE, Perm.R | Perm.W]), [1, -(10**20), 6])  # sent as the int they are
    same(back([mapping.keys(), mapping.values()]), [list(mapping), list(mapping.values())])
    same(back(mapping.items()), [tuple(kv) for kv in mapping.items()])


def record_fallbacks():
    """A named tuple whose names the decoder would refuse still crosses: as a tuple, or under a plain name."""
    hidden = collections.namedtuple("_Hidden", ["a", "b"])(1, [2.5])
    got = back(hidden)
    assert (
        type(got).__name__ == "Hidden" and got._fields == ("a", "b") and got.b == [2.5] and got == (1, [2.5])
    )
    renamed = collections.namedtuple("T", ["a", "def", "a"], rename=True)(1, 2, 3)  # fields a, _1, _2
    same(back(renamed), (1, 2, 3))
    rows = list(pd.DataFrame({"my col": [1.5], "ok": ["x"]}).itertuples())  # Pandas(Index, _1, ok)
    same(back(rows), [(0, 1.5, "x")])
    rows = list(pd.DataFrame({"a": [1], "b": [2.0]}).itertuples(name="Row"))
    got = back(rows)[0]
    assert (got.Index, got.a, got.b, type(got).__name__) == (0, 1, 2.0, "Row"), got


def record_node(fields, items=None, extra=(), name="R"):
    items = [None] * len(fields) if items is None else items
    node = {"t": "record", "name": name, "fields": fields, "v": items, "extra": list(extra)}
    return json.dumps({**node, "xv": [None] * len(extra)})


HOSTILE = (
    record_node(["__class__"]),
    record_node(["_x"]),
    record_node(["import os"]),
    record_node(["a=__import__('os').system('touch /tmp/ds1000-pwned')"]),
    record_node(["a", "a"]),
    record_node(["a"], extra=["a"]),
    record_node(["a"], extra=["__init__"]),
    record_node(["class"]),
    record_node([""]),
    record_node([1]),
    record_node(["a"], name="__import__('os')"),
    record_node(["a"], name="_R"),
    record_node(["a"], name=None),
    record_node([f"f{i}" for i in range(10**6)]),
    record_node(["a", "b"], items=[None]),
    record_node(["a"], items=[None, None]),
    record_node(["a"], items="ab"),
    json.dumps({"t": "record", "name": "R", "fields": ["a"], "v": [None], "extra": ["df"], "xv": []}),
    json.dumps({"t": "record", "name": "R", "fields": "ab", "v": [None, None], "extra": [], "xv": []}),
    json.dumps({"t": "record", "name": "R", "fields": ["a"], "v": [None]}),
    json.dumps({"t": "range", "v": ["0", "1", "0"]}),
    json.dumps({"t": "range", "v": ["__import__('os')", "1", "1"]}),
    json.dumps({"t": "Fraction", "v": ["1", "0"]}),
    json.dumps({"t": "Fraction", "v": ["1/2", "1"]}),
    json.dumps({"t": "Decimal", "v": "1+os.system"}),
    json.dumps({"t": "Decimal", "v": 1.5}),
)


def hostile_nodes():
    """Malformed or hostile nodes of the new kinds: a DecodeError each, never a crash or code run."""
    _, npz = dumps(np.array([0.5]))
    for text in HOSTILE:
        try:
            got = loads(text, npz)
        except DecodeError:
            continue
        raise AssertionError(f"decoded {text[:120]!r} to {got!r}")


@SETTINGS
@given(st.lists(st.text(max_size=6), max_size=4), st.text(max_size=6))
def drawn_record_names(fields, name):
    """Any names at all: a record with exactly those names, or a DecodeError."""
    try:
        got = loads(record_node(fields, name=name), dumps(None)[1])
    except DecodeError:
        return
    assert type(got).__name__ == name and got._fields == tuple(fields) and tuple(got) == (None,) * len(fields)


def draw_figure(steps):
    """A figure from drawn steps: (kind, visible, which) each; kinds cover every artist a summary keeps."""
    import matplotlib.pyplot as plt

    plt.close("all")
    fig, ax = plt.subplots(figsize=(4, 3))
    for kind, visible, which in steps:
        if kind == "line":
            (artist,) = ax.plot([0, 1, 2], [which, 2, 1], marker="o", label=f"l{which}")
        elif kind == "bar":
            artist = ax.bar([0, 1], [1, which + 1])[which % 2]
        elif kind == "scatter":
            artist = ax.scatter([0, 1], [which, 1])
        elif kind == "image":
            artist = ax.imshow(np.ones((2, 3)), cmap="gray")
        elif kind == "fill":
            (artist,) = ax.fill([0, 1, 1], [0, 0, which + 1])
        elif kind == "legend":
            artist = ax.legend(title="T")
        elif kind == "spine":
            artist = ax.spines[("top", "right", "bottom", "left")[which % 4]]
        elif kind == "axis":
            artist = (ax.xaxis, ax.yaxis)[which % 2]
        elif kind == "grid":
            ax.grid(visible, which=("major", "minor", "both")[which % 3], axis=("x", "y", "both")[which % 3])
            continue
        elif kind == "minor":
            ax.minorticks_on()
            continue
        elif kind == "ticks":
            ax.tick_params(top=visible, labelbottom=not visible, right=which % 2 == 0)
            continue
        elif kind == "off":
            ax.axis("off" if visible else "on")
            continue
        else:  # the title, an axis label
            artist = (ax.title, ax.xaxis.label, ax.yaxis.label)[which % 3]
            artist.set_text(f"{kind} {which}")
        artist.set_visible(visible)
    return fig


def visibility(fig):
    """What `get_visible()` (and `axison`) says of every artist of the figure a summary keeps."""
    shown = []
    for ax in fig.axes:
        shown.append(("axes", ax.get_visible(), ax.axison, ax.title.get_visible()))
        shown += [("spine", name, spine.get_visible()) for name, spine in ax.spines.items()]
        for name in ("lines", "patches", "collections", "images"):
            shown.append((name, [a.get_visible() for a in getattr(ax, name)]))
        legend = ax.get_legend()
        shown.append(("legend", legend is not None and legend.get_visible()))
        for axis in (ax.xaxis, ax.yaxis):
            shown.append(("axis", axis.get_visible(), axis.label.get_visible()))
            for minor in (False, True):
                locs = axis.get_minorticklocs() if minor else axis.get_majorticklocs()
                ticks = (axis.get_minor_ticks if minor else axis.get_major_ticks)(len(locs))
                lines = ("tick1line", "tick2line", "gridline", "label1")
                shown.append([tuple(getattr(t, n).get_visible() for n in lines) for t in ticks])
    return shown


steps = st.lists(
    st.tuples(
        st.sampled_from(
            ["line", "bar", "scatter", "image", "fill", "legend", "spine", "axis", "grid"]
            + ["minor", "ticks", "off", "title"]
        ),
        st.booleans(),
        st.integers(0, 5),
    ),
    max_size=8,
)


@settings(SETTINGS, max_examples=25)
@given(steps)
def figures(steps):
    import matplotlib.pyplot as plt
    from ds1000_figure import rebuild, summarize

    fig = draw_figure(steps)
    fig.canvas.draw()
    before, summary = visibility(fig), back(summarize())
    rebuild(summary)
    rebuilt = plt.gcf()
    assert visibility(rebuilt) == before, (steps, visibility(rebuilt), before)
    same_summary(back(summarize()), summary)


def same_summary(a, b):
    """Summaries equal: numbers as numbers (a rebuilt figure may hold an int where it held a float)."""
    if isinstance(a, dict):
        assert list(a) == list(b), (a, b)
        for key in a:
            same_summary(a[key], b[key])
    elif isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        assert len(a) == len(b), (a, b)
        for x, y in zip(a, b, strict=True):
            same_summary(x, y)
    else:
        nan = np.asarray(a).dtype.kind in "fc"
        assert np.array_equal(np.asarray(a), np.asarray(b), equal_nan=nan), (a, b)


PROPERTIES = (
    plain_values,
    numpy_arrays,
    numpy_subclasses,
    numpy_scalars,
    pandas_series,
    pandas_frames,
    sparse_matrices,
    sparse_arrays,
    records,
    python_kinds,
    record_fallbacks,
    hostile_nodes,
    drawn_record_names,
    figures,
)


def main():
    for prop in PROPERTIES:
        prop()
        print(f"{prop.__name__}: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
