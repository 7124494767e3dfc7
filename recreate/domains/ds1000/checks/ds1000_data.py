"""Runs INSIDE DS-1000 sandboxes: a value <-> data codec that cannot execute code when loaded.

What a solution produced crosses from the sandbox it ran in to the checker as a JSON tree plus one
`.npz` of plain arrays (read with `allow_pickle=False`). The tree is tagged (`{"t": kind, ...}`) so
tuples stay tuples, floats stay exact (repr) and NumPy/pandas/SciPy values come back with their dtypes,
index and structure; nothing in it names a class to import or a function to call. A value of another
kind is sent as a placeholder that equals nothing, so a check on it fails instead of trusting it.
A named tuple (SciPy's results too) or a struct sequence (time.struct_time) goes as a "record" of names,
items and extra fields (SciPy's `df`...) and comes back as a namedtuple type made for it (plain names
only), extras as attributes, equal to a tuple.
IntEnum/IntFlag members go as ints and dict views (keys(), values(), items()) as lists; `range`,
`Fraction`, `Decimal` and SciPy sparse arrays (as against matrices) keep their type.
The pandas kinds are in ds1000_pandas, tensorflow's (and ml_dtypes') in ds1000_tensors, torch's in
ds1000_torch (torch.return_types among them).
"""

import base64
import collections
import datetime
import decimal
import enum
import fractions
import io
import json
import keyword
import re
import zipfile

from ds1000_pandas import PandasDecoding, PandasEncoding, is_pandas
from ds1000_tensors import TensorDecoding, TensorEncoding
from ds1000_torch import TorchDecoding, TorchEncoding

MAX_DEPTH = 64
MAX_FIELDS = 256  # of a record, extra fields included
DICT_VIEWS = (type({}.keys()), type({}.values()), type({}.items()))
SPARSE_FORMATS = ("csr", "csc", "coo", "lil", "dok", "dia", "bsr")
# every kind of node the encoder writes; the decoder knows no other
KINDS = frozenset(
    ("int", "float", "complex", "bytes", "list", "tuple", "set", "frozenset", "dict", "datetime", "date")
    + ("time", "timedelta", "unsupported", "ndarray", "objarray", "npscalar", "sparse", "DataFrame", "Series")
    + ("MultiIndex", "RangeIndex", "Index", "NaT", "NA", "Timestamp", "Timedelta", "Period", "Interval")
    + ("masked", "matrix", "ExtensionArray", "record", "range", "Fraction", "Decimal")
    + ("torch_tensor", "torch_size", "torch_dtype", "tf_tensor", "tf_ragged", "tf_sparse", "tf_dtype")
    + ("tf_shape", "npdtype", "torch_sparse", "torch_return", "torch_device", "mlarray")
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


class Encoder(PandasEncoding, TensorEncoding, TorchEncoding):
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
        if isinstance(value, int) and isinstance(value, enum.Enum):  # IntEnum, IntFlag: their value
            return {"t": "int", "v": str(int(value))}
        if type(value) is float:
            return {"t": "float", "v": repr(value)}
        if type(value) is complex:
            return {"t": "complex", "v": [repr(value.real), repr(value.imag)]}
        if isinstance(value, bytes) and not _is_numpy(value):
            return {"t": "bytes", "v": base64.b64encode(value).decode()}
        if type(value) is range:
            return {"t": "range", "v": [str(value.start), str(value.stop), str(value.step)]}
        if isinstance(value, fractions.Fraction):
            return {"t": "Fraction", "v": [str(value.numerator), str(value.denominator)]}
        if isinstance(value, decimal.Decimal):
            return {"t": "Decimal", "v": str(value)}
        if isinstance(value, DICT_VIEWS):
            return {"t": "list", "v": [self.encode(x, down) for x in value]}
        module = type(value).__module__.split(".")[0]
        if module == "scipy" and hasattr(value, "tocoo") and getattr(value, "format", None) in SPARSE_FORMATS:
            import scipy.sparse

            coo = value.tocoo()  # before the containers: a dok_matrix is a dict
            keys = [self.array(coo.row), self.array(coo.col), self.array(coo.data)]
            node = {"t": "sparse", "format": value.format, "shape": list(value.shape), "coo": keys}
            if isinstance(value, getattr(scipy.sparse, "sparray", ())):
                node["array"] = True
            return node
        tensor = self._tensor(value, down)  # before the containers: a torch.Size is a tuple
        if tensor is not None:
            return tensor
        if isinstance(value, tuple) and type(value) is not tuple and _record_names(value):
            fields, extra = _record_names(value)
            name = type(value).__name__.lstrip("_")
            return {
                "t": "record",
                "name": name if _plain_name(name) else "Record",
                "fields": fields,
                "v": [self.encode(x, down) for x in value],
                "extra": extra,
                "xv": [self.encode(getattr(value, x), down) for x in extra],
            }
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
        if module in ("numpy", "ml_dtypes"):  # (an ml_dtypes scalar's type is of ml_dtypes)
            return self._numpy(value, down)
        if module == "pandas":
            return self._pandas(value, down)
        return self.unsupported(value)

    def _numpy(self, value, depth):
        import numpy as np

        if (node := self._ml_node(value)) is not None:  # bfloat16 and the like: raw bytes to np.save
            return node
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
        if isinstance(value, np.dtype) and value.fields is None and not value.subdtype:
            return {"t": "npdtype", "v": value.str}  # e.g. "<f8", "|b1", "<M8[ns]", "<U5"
        return self.unsupported(value)


def _is_numpy(value):
    return type(value).__module__ == "numpy"


def _record_names(value):
    """([field], [extra field]) of a named tuple the decoder takes; None for others (they go as tuples):
    a renamed field (`_1`, as `itertuples()` names a column that is no identifier) goes as a tuple."""
    fields, extra = getattr(type(value), "_fields", None), getattr(type(value), "_extra_fields", ())
    if fields is None and isinstance(getattr(type(value), "n_sequence_fields", None), int):
        fields = getattr(type(value), "__match_args__", None)  # a struct sequence (torch.return_types)
    if not isinstance(fields, tuple) or not isinstance(extra, tuple) or len(fields) != len(value):
        return None
    names = fields + extra
    ok = len(names) <= MAX_FIELDS and len(set(names)) == len(names) and all(map(_plain_name, names))
    return (list(fields), list(extra)) if ok else None


def _plain_name(text):
    """An identifier, not a keyword, not starting with "_" (so no dunder, nothing namedtuple refuses)."""
    return isinstance(text, str) and text.isidentifier() and not keyword.iskeyword(text) and text[0] != "_"


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
        with zipfile.ZipFile(io.BytesIO(npz)) as archive:  # np.savez stores: a deflated member may be a bomb
            members = archive.infolist()
            if any(m.compress_type != zipfile.ZIP_STORED or m.file_size > len(npz) for m in members):
                raise DecodeError("arrays compressed or larger than their file: not what dumps writes")
        with np.load(io.BytesIO(npz), allow_pickle=False) as archive:
            arrays = {name: archive[name] for name in archive.files}
        return Decoder(arrays).decode(tree)
    except DecodeError:
        raise
    except Exception as exc:  # malformed data of any kind is a decode failure, never a crash
        raise DecodeError(f"{type(exc).__name__}: {exc}") from exc


class Decoder(PandasDecoding, TensorDecoding, TorchDecoding):
    def __init__(self, arrays):
        self.arrays = arrays
        self.records = {}  # (name, fields, extra fields) -> the type made for them

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

    def _range(self, node, depth):
        start, stop, step = (int(x) for x in node["v"])
        return range(start, stop, step)

    def _Fraction(self, node, depth):
        numerator, denominator = (int(x) for x in node["v"])
        return fractions.Fraction(numerator, denominator)

    def _Decimal(self, node, depth):
        if not isinstance(node["v"], str):
            raise DecodeError("a Decimal that is not a string")
        return decimal.Decimal(node["v"])

    def _record(self, node, depth):
        name, fields, extra = node["name"], node["fields"], node["extra"]
        if not all(isinstance(x, list) for x in (fields, extra, node["v"], node["xv"])):
            raise DecodeError("a record without lists of fields and items")
        if len(fields) + len(extra) > MAX_FIELDS:
            raise DecodeError(f"a record of more than {MAX_FIELDS} fields")
        for text in (name, *fields, *extra):
            if not _plain_name(text):
                raise DecodeError(f"a record name that is not a plain identifier: {str(text)[:80]!r}")
        if len(set(fields + extra)) < len(fields + extra):
            raise DecodeError("a record with a field named twice")
        if len(node["v"]) != len(fields) or len(node["xv"]) != len(extra):
            raise DecodeError("a record whose items do not match its fields")
        key = (name, tuple(fields), tuple(extra))
        if key not in self.records:  # checked names only: namedtuple builds its type from them
            base = collections.namedtuple(name, fields)
            self.records[key] = type(name, (base,), {"_extra_fields": tuple(extra)})
        record = self.records[key](*self._items(node, depth))
        record.__dict__.update(zip(extra, (self.decode(x, depth) for x in node["xv"]), strict=True))
        return record

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

    def _npdtype(self, node, depth):
        import numpy as np

        text = node.get("v")
        if not isinstance(text, str) or not re.fullmatch(r"[<>|=][a-zA-Z?][0-9]*(\[[0-9a-zA-Z]+\])?", text):
            raise DecodeError(f"not a plain NumPy dtype: {str(text)[:80]!r}")
        return np.dtype(text)

    def _sparse(self, node, depth):
        import scipy.sparse

        if node["format"] not in SPARSE_FORMATS:
            raise DecodeError(f"unknown sparse format {node['format']!r}")
        row, col, data = (self.array(k) for k in node["coo"])
        shape = tuple(int(n) for n in node["shape"])
        coo = scipy.sparse.coo_array if node.get("array") is True else scipy.sparse.coo_matrix
        return coo((data, (row, col)), shape=shape).asformat(node["format"])
