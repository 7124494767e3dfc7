"""Runs INSIDE DS-1000 sandboxes: a value <-> data codec that cannot execute code when loaded.

What a solution produced crosses from the sandbox it ran in to the checker as a JSON tree plus one
`.npz` of plain arrays (read with `allow_pickle=False`). The tree is tagged (`{"t": kind, ...}`) so
tuples stay tuples, floats stay exact (repr) and NumPy/pandas/SciPy values come back with their dtypes,
index and structure; nothing in it names a class to import or a function to call. A value of another
kind is sent as a placeholder that equals nothing, so a check on it fails instead of trusting it.
The pandas kinds are in ds1000_pandas.
"""

import base64
import datetime
import io
import json

from ds1000_pandas import PandasDecoding, PandasEncoding, is_pandas

MAX_DEPTH = 64
SPARSE_FORMATS = ("csr", "csc", "coo", "lil", "dok", "dia", "bsr")
# every kind of node the encoder writes; the decoder knows no other
KINDS = frozenset(
    ("int", "float", "complex", "bytes", "list", "tuple", "set", "frozenset", "dict", "datetime", "date")
    + ("time", "timedelta", "unsupported", "ndarray", "objarray", "npscalar", "sparse", "DataFrame", "Series")
    + ("MultiIndex", "RangeIndex", "Index", "NaT", "NA", "Timestamp", "Timedelta", "Period", "Interval")
    + ("masked", "matrix", "ExtensionArray")
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


class Encoder(PandasEncoding):
    def __init__(self):
        self.arrays = {}

    def unsupported(self, value):
        return {"t": "unsupported", "type": _type_name(value), "v": repr(value)[:300]}

    def array(self, values):
        key = f"a{len(self.arrays)}"
        self.arrays[key] = values
        return key

    def encode(self, value, depth=0):
        if depth > MAX_DEPTH:
            raise ValueError("the value is nested too deeply")
        down = depth + 1
        if value is None or isinstance(value, (bool, str)) and not _is_numpy(value):  # np.str_ is a str
            return value
        if type(value) is int:
            return {"t": "int", "v": str(value)}
        if type(value) is float:
            return {"t": "float", "v": repr(value)}
        if type(value) is complex:
            return {"t": "complex", "v": [repr(value.real), repr(value.imag)]}
        if isinstance(value, bytes) and not _is_numpy(value):
            return {"t": "bytes", "v": base64.b64encode(value).decode()}
        module = type(value).__module__.split(".")[0]
        if module == "scipy" and hasattr(value, "tocoo") and getattr(value, "format", None) in SPARSE_FORMATS:
            coo = value.tocoo()  # before the containers: a dok_matrix is a dict
            keys = [self.array(coo.row), self.array(coo.col), self.array(coo.data)]
            return {"t": "sparse", "format": value.format, "shape": list(value.shape), "coo": keys}
        if isinstance(value, (list, tuple, set, frozenset)):
            kind = next(k for k in (list, tuple, set, frozenset) if isinstance(value, k)).__name__
            items = sorted(value, key=repr) if kind in ("set", "frozenset") else value
            return {"t": kind, "v": [self.encode(x, down) for x in items]}
        if isinstance(value, dict):
            return {
                "t": "dict",
                "v": [[self.encode(k, down), self.encode(v, down)] for k, v in value.items()],
            }
        if isinstance(value, (datetime.datetime, datetime.date, datetime.time)) and not is_pandas(value):
            return {"t": type(value).__name__, "v": value.isoformat()}
        if isinstance(value, datetime.timedelta) and not is_pandas(value):
            return {"t": "timedelta", "v": [value.days, value.seconds, value.microseconds]}
        if module == "numpy":
            return self._numpy(value, down)
        if module == "pandas":
            return self._pandas(value, down)
        return self.unsupported(value)

    def _numpy(self, value, depth):
        import numpy as np

        if isinstance(value, np.ma.MaskedArray):
            fill = value.fill_value  # None: the dtype's default (it may not fit the dtype)
            fill = None if np.all(fill == np.ma.default_fill_value(value.dtype)) else np.asarray(fill)
            parts = (np.ma.getdata(value), np.ma.getmaskarray(value), fill)
            return {"t": "masked", "v": [self.encode(x, depth) for x in parts]}
        if isinstance(value, np.matrix):
            return {"t": "matrix", "v": self.encode(np.asarray(value), depth)}
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
        return self.unsupported(value)


def _is_numpy(value):
    return type(value).__module__ == "numpy"


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


class Decoder(PandasDecoding):
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

    def _masked(self, node, depth):
        import numpy as np

        data, mask, fill = (self.decode(x, depth) for x in node["v"])
        return np.ma.MaskedArray(data, mask=mask, fill_value=None if fill is None else fill[()])

    def _matrix(self, node, depth):
        import numpy as np

        return np.asmatrix(self.decode(node["v"], depth))

    def _objarray(self, node, depth):
        import numpy as np

        items = self._items(node, depth)
        out = np.empty(len(items), dtype=object)
        for i, item in enumerate(items):  # one by one: a slice assignment would unpack lists and tuples
            out[i] = item
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
