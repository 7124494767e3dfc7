"""Runs INSIDE DS-1000 sandboxes: a value <-> data codec that cannot execute code when loaded.

What a solution produced crosses from the sandbox it ran in to the checker as a JSON tree plus one
`.npz` of plain arrays (read with `allow_pickle=False`). The tree is tagged (`{"t": kind, ...}`) so
tuples stay tuples, floats stay exact (repr) and NumPy/pandas/SciPy values come back with their dtypes,
index and structure; nothing in it names a class to import or a function to call. A value of another
kind is sent as a placeholder that equals nothing, so a check on it fails instead of trusting it.
"""

import base64
import datetime
import io
import json

MAX_DEPTH = 64
SPARSE_FORMATS = ("csr", "csc", "coo", "lil", "dok", "dia", "bsr")
# every kind of node the encoder writes; the decoder knows no other
KINDS = frozenset(
    ("int", "float", "complex", "bytes", "list", "tuple", "set", "frozenset", "dict", "datetime", "date")
    + ("time", "timedelta", "unsupported", "ndarray", "objarray", "npscalar", "sparse", "DataFrame", "Series")
    + ("MultiIndex", "RangeIndex", "Index", "NaT", "NA", "Timestamp", "Timedelta", "Period", "Interval")
)


class DecodeError(ValueError):
    """The data is not a value this codec writes."""


class Unsupported:
    """Stands for a value that is not data (a model object, a function): equal to nothing."""

    def __init__(self, type_name, text):
        self.type_name, self.text = type_name, text

    def __eq__(self, other):
        return False

    __hash__ = None

    def __repr__(self):
        return f"<{self.type_name} that cannot be sent as data: {self.text}>"


class Encoder:
    def __init__(self):
        self.arrays = {}

    def array(self, values):
        key = f"a{len(self.arrays)}"
        self.arrays[key] = values
        return key

    def encode(self, value, depth=0):
        if depth > MAX_DEPTH:
            raise ValueError("the value is nested too deeply")
        down = depth + 1
        if value is None or isinstance(value, (bool, str)):
            return value
        if type(value) is int:
            return {"t": "int", "v": str(value)}
        if type(value) is float:
            return {"t": "float", "v": repr(value)}
        if type(value) is complex:
            return {"t": "complex", "v": [repr(value.real), repr(value.imag)]}
        if isinstance(value, bytes):
            return {"t": "bytes", "v": base64.b64encode(value).decode()}
        if isinstance(value, (list, tuple, set, frozenset)):
            kind = next(k for k in (list, tuple, set, frozenset) if isinstance(value, k)).__name__
            items = sorted(value, key=repr) if kind in ("set", "frozenset") else value
            return {"t": kind, "v": [self.encode(x, down) for x in items]}
        if isinstance(value, dict):
            return {
                "t": "dict",
                "v": [[self.encode(k, down), self.encode(v, down)] for k, v in value.items()],
            }
        if isinstance(value, (datetime.datetime, datetime.date, datetime.time)) and not _is_pandas(value):
            return {"t": type(value).__name__, "v": value.isoformat()}
        if isinstance(value, datetime.timedelta) and not _is_pandas(value):
            return {"t": "timedelta", "v": [value.days, value.seconds, value.microseconds]}
        module = type(value).__module__.split(".")[0]
        if module == "numpy":
            return self._numpy(value, down)
        if module == "pandas":
            return self._pandas(value, down)
        if module == "scipy" and hasattr(value, "tocoo") and getattr(value, "format", None) in SPARSE_FORMATS:
            coo = value.tocoo()
            keys = [self.array(coo.row), self.array(coo.col), self.array(coo.data)]
            return {"t": "sparse", "format": value.format, "shape": list(value.shape), "coo": keys}
        return {"t": "unsupported", "type": _type_name(value), "v": repr(value)[:300]}

    def _numpy(self, value, depth):
        import numpy as np

        if isinstance(value, np.ndarray):
            if value.dtype.hasobject:
                return {
                    "t": "objarray",
                    "shape": list(value.shape),
                    "v": [self.encode(x, depth) for x in value.ravel()],
                }
            return {"t": "ndarray", "k": self.array(value)}
        if isinstance(value, np.generic) and not value.dtype.hasobject:
            return {"t": "npscalar", "k": self.array(np.asarray(value))}
        return {"t": "unsupported", "type": _type_name(value), "v": repr(value)[:300]}

    def _values(self, values, depth):
        """The values of a Series/Index column, kept with their (extension) dtype."""
        import numpy as np
        import pandas as pd

        dtype = values.dtype
        if isinstance(dtype, pd.CategoricalDtype):
            cats = self.encode(pd.Index(dtype.categories), depth)
            return {
                "t": "categorical",
                "codes": self.array(np.asarray(values.codes)),
                "cats": cats,
                "ordered": bool(dtype.ordered),
            }
        if isinstance(dtype, pd.DatetimeTZDtype):
            return {
                "t": "datetimetz",
                "k": self.array(np.asarray(values.asi8)),
                "tz": str(dtype.tz),
                "unit": dtype.unit,
            }
        if isinstance(dtype, np.dtype):
            return self.encode(np.asarray(values), depth)
        return {"t": "extension", "dtype": str(dtype), "v": [self.encode(x, depth) for x in values]}

    def _pandas(self, value, depth):
        import pandas as pd

        if isinstance(value, pd.DataFrame):
            columns = [self._values(value.iloc[:, i].array, depth) for i in range(value.shape[1])]
            return {
                "t": "DataFrame",
                "index": self.encode(value.index, depth),
                "columns": self.encode(value.columns, depth),
                "data": columns,
            }
        if isinstance(value, pd.Series):
            return {
                "t": "Series",
                "index": self.encode(value.index, depth),
                "name": self.encode(value.name, depth),
                "values": self._values(value.array, depth),
            }
        if isinstance(value, pd.MultiIndex):
            levels = [self.encode(level, depth) for level in value.levels]
            codes = [self.array(c) for c in value.codes]
            return {
                "t": "MultiIndex",
                "levels": levels,
                "codes": codes,
                "names": self.encode(list(value.names), depth),
            }
        if isinstance(value, pd.RangeIndex):
            return {
                "t": "RangeIndex",
                "v": [value.start, value.stop, value.step],
                "name": self.encode(value.name, depth),
            }
        if isinstance(value, pd.Index):
            freq = getattr(value, "freqstr", None)
            return {
                "t": "Index",
                "values": self._values(value.array, depth),
                "name": self.encode(value.name, depth),
                "freq": freq,
            }
        if value is pd.NaT:
            return {"t": "NaT"}
        if value is pd.NA:
            return {"t": "NA"}
        if isinstance(value, pd.Timestamp):
            return {"t": "Timestamp", "v": value.isoformat(), "tz": str(value.tz) if value.tz else None}
        if isinstance(value, pd.Timedelta):
            return {"t": "Timedelta", "v": str(value.value)}
        if isinstance(value, pd.Period):
            return {"t": "Period", "v": str(value), "freq": value.freqstr}
        if isinstance(value, pd.Interval):
            return {
                "t": "Interval",
                "v": [self.encode(value.left, depth), self.encode(value.right, depth)],
                "closed": value.closed,
            }
        return {"t": "unsupported", "type": _type_name(value), "v": repr(value)[:300]}


def _is_pandas(value):
    return type(value).__module__.startswith("pandas")


def _type_name(value):
    return f"{type(value).__module__}.{type(value).__qualname__}"


def dumps(values):
    """(JSON text, .npz bytes) for a JSON-able tree whose leaves may be any values."""
    import numpy as np

    encoder = Encoder()
    tree = encoder.encode(values)
    buffer = io.BytesIO()
    np.savez(buffer, **encoder.arrays)
    return json.dumps(tree), buffer.getvalue()


def loads(text, npz):
    """The value `dumps` wrote; DecodeError for anything else."""
    import numpy as np

    try:
        tree = json.loads(text)
        with np.load(io.BytesIO(npz), allow_pickle=False) as archive:
            arrays = {name: archive[name] for name in archive.files}
        return Decoder(arrays).decode(tree)
    except DecodeError:
        raise
    except Exception as exc:  # malformed data of any kind is a decode failure, never a crash
        raise DecodeError(f"{type(exc).__name__}: {exc}") from exc


class Decoder:
    def __init__(self, arrays):
        self.arrays = arrays

    def array(self, key):
        if not isinstance(key, str) or key not in self.arrays:
            raise DecodeError(f"no array {key!r}")
        return self.arrays[key]

    def decode(self, node, depth=0):
        if depth > MAX_DEPTH:
            raise DecodeError("nested too deeply")
        if node is None or isinstance(node, (bool, str)):
            return node
        if not isinstance(node, dict) or not isinstance(node.get("t"), str):
            raise DecodeError(f"unexpected node {str(node)[:80]!r}")
        if node["t"] not in KINDS:
            raise DecodeError(f"unknown kind {node['t']!r}")
        return getattr(self, "_" + node["t"])(node, depth + 1)

    def _items(self, node, depth):
        if not isinstance(node.get("v"), list):
            raise DecodeError("a container without items")
        return [self.decode(x, depth) for x in node["v"]]

    def _int(self, node, depth):
        return int(node["v"])

    def _float(self, node, depth):
        return float(node["v"])

    def _complex(self, node, depth):
        return complex(float(node["v"][0]), float(node["v"][1]))

    def _bytes(self, node, depth):
        return base64.b64decode(node["v"])

    def _list(self, node, depth):
        return self._items(node, depth)

    def _tuple(self, node, depth):
        return tuple(self._items(node, depth))

    def _set(self, node, depth):
        return set(self._items(node, depth))

    def _frozenset(self, node, depth):
        return frozenset(self._items(node, depth))

    def _dict(self, node, depth):
        return {self.decode(k, depth): self.decode(v, depth) for k, v in node["v"]}

    def _datetime(self, node, depth):
        return datetime.datetime.fromisoformat(node["v"])

    def _date(self, node, depth):
        return datetime.date.fromisoformat(node["v"])

    def _time(self, node, depth):
        return datetime.time.fromisoformat(node["v"])

    def _timedelta(self, node, depth):
        days, seconds, micro = node["v"]
        return datetime.timedelta(days=days, seconds=seconds, microseconds=micro)

    def _unsupported(self, node, depth):
        return Unsupported(str(node.get("type")), str(node.get("v")))

    def _ndarray(self, node, depth):
        return self.array(node["k"])

    def _objarray(self, node, depth):
        import numpy as np

        items = self._items(node, depth)
        out = np.empty(len(items), dtype=object)
        out[:] = items if items else []
        return out.reshape([int(n) for n in node["shape"]])

    def _npscalar(self, node, depth):
        return self.array(node["k"])[()]

    def _sparse(self, node, depth):
        import scipy.sparse

        if node["format"] not in SPARSE_FORMATS:
            raise DecodeError(f"unknown sparse format {node['format']!r}")
        row, col, data = (self.array(k) for k in node["coo"])
        shape = tuple(int(n) for n in node["shape"])
        return scipy.sparse.coo_matrix((data, (row, col)), shape=shape).asformat(node["format"])

    def _values(self, node, depth):
        import pandas as pd

        kind = node.get("t")
        if kind == "categorical":
            cats = self.decode(node["cats"], depth)
            return pd.Categorical.from_codes(
                self.array(node["codes"]), categories=cats, ordered=bool(node["ordered"])
            )
        if kind == "datetimetz":
            naive = pd.DatetimeIndex(self.array(node["k"]).astype(f"datetime64[{node['unit']}]"))
            return naive.tz_localize("UTC").tz_convert(str(node["tz"])).array
        if kind == "extension":
            return pd.array(self._items(node, depth), dtype=str(node["dtype"]))
        return self.decode(node, depth)

    def _DataFrame(self, node, depth):
        import pandas as pd

        index, columns = self.decode(node["index"], depth), self.decode(node["columns"], depth)
        data = {i: self._values(column, depth) for i, column in enumerate(node["data"])}
        frame = pd.DataFrame(data, index=index) if data else pd.DataFrame(index=index)
        frame.columns = columns
        return frame

    def _Series(self, node, depth):
        import pandas as pd

        index = self.decode(node["index"], depth)
        return pd.Series(
            self._values(node["values"], depth), index=index, name=self.decode(node["name"], depth)
        )

    def _MultiIndex(self, node, depth):
        import pandas as pd

        levels = [self.decode(level, depth) for level in node["levels"]]
        codes = [self.array(c) for c in node["codes"]]
        return pd.MultiIndex(levels=levels, codes=codes, names=self.decode(node["names"], depth))

    def _RangeIndex(self, node, depth):
        import pandas as pd

        start, stop, step = (int(n) for n in node["v"])
        return pd.RangeIndex(start, stop, step, name=self.decode(node["name"], depth))

    def _Index(self, node, depth):
        import pandas as pd

        values = self._values(node["values"], depth)
        index = pd.Index(values, name=self.decode(node["name"], depth), tupleize_cols=False)
        if node.get("freq"):
            index.freq = str(node["freq"])
        return index

    def _NaT(self, node, depth):
        import pandas as pd

        return pd.NaT

    def _NA(self, node, depth):
        import pandas as pd

        return pd.NA

    def _Timestamp(self, node, depth):
        import pandas as pd

        return pd.Timestamp(str(node["v"]))

    def _Timedelta(self, node, depth):
        import pandas as pd

        return pd.Timedelta(int(node["v"]))

    def _Period(self, node, depth):
        import pandas as pd

        return pd.Period(str(node["v"]), freq=str(node["freq"]))

    def _Interval(self, node, depth):
        import pandas as pd

        left, right = (self.decode(x, depth) for x in node["v"])
        return pd.Interval(left, right, closed=str(node["closed"]))
