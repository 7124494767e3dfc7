"""Runs INSIDE DS-1000 sandboxes: the TensorFlow half of the ds1000_data codec (mixed into its Encoder and
Decoder), the helpers the PyTorch half (ds1000_torch) uses too, and NumPy arrays of ml_dtypes' dtypes.
A tensor goes as one plain array of its values (a dtype NumPy lacks, bfloat16 and the like, widened to one
it has) and the names of its dtype, each looked up in a fixed table on load, never with getattr on a name
from the data; a tf.string tensor's bytes go as base64 text.
- tf.Tensor (eager) keeps dtype and shape; a tf.Variable comes back as a tf.Variable (values, dtype,
  `trainable`; not its name); tf.RaggedTensor as its flat values, row splits and each level's uniform row
  length (so a shape (3, 2) stays (3, 2)); tf.SparseTensor as its indices, values and dense shape;
  tf.DType and tf.TensorShape: themselves. Keras 3's own values (KerasTensor, keras.Variable) are not
  tensorflow's: they go as ds1000_data sends any other value.
- A NumPy array or scalar of an ml_dtypes dtype (bfloat16, float8_*, int4: `tensor.numpy()` of such a
  tensor) goes widened to float32 (int4 and uint4 to int8 and uint8) with the dtype's name, and is cast back.
torch and tensorflow are imported only to load a value of theirs; sending one needs no import at all.
"""

import base64
import math
import sys

MODULES = ("torch", "tensorflow")  # first parts of the modules whose values this codec sends
MAX_DIMS = 64  # torch's own bound; NumPy's is 32
# elements of a tensor whose data is smaller than its size (expanded, sparse): a check that makes it dense
# must stay within the memory the checker's jobs share (1 GiB of float64)
MAX_VIRTUAL_NUMEL = 1 << 27
# dtype name -> the NumPy dtype of the array that carries its values (numpy lacks bfloat16, float8, chalf)
_PLAIN = ("bool", "uint8", "int8", "int16", "int32", "int64", "uint16", "uint32", "uint64", "float16")
_PLAIN += ("float32", "float64", "complex64", "complex128")
TF_DTYPES = {name: name for name in _PLAIN} | {"bfloat16": "float32", "string": None}
SPLIT_DTYPES = ("int32", "int64")  # of a RaggedTensor's row splits
# ml_dtypes' dtypes (NumPy arrays of them are raw bytes to np.save) -> the NumPy dtype that carries them
ML_DTYPES = {"bfloat16": "float32", "int4": "int8", "uint4": "uint8"}
ML_DTYPES |= {name: "float32" for name in ("float8_e4m3fn", "float8_e5m2", "float8_e4m3b11fnuz")}
ML_DTYPES |= {name: "float32" for name in ("float8_e4m3fnuz", "float8_e5m2fnuz")}


def _fail(message):
    from ds1000_data import DecodeError  # (ds1000_data imports this module)

    raise DecodeError(message)


def _dims(dims, unknown=False):
    """A shape from the data: a list of at most MAX_DIMS sizes (None for an unknown one if `unknown`)."""
    if not isinstance(dims, list) or len(dims) > MAX_DIMS:
        _fail(f"a shape that is not a list of at most {MAX_DIMS} sizes: {str(dims)[:80]!r}")
    for n in dims:
        if not (n is None and unknown) and not (type(n) is int and 0 <= n < 1 << 62):
            _fail(f"a shape with a size that is not a non-negative int: {str(dims)[:80]!r}")
    return dims


def _numpy_of(array, numpy_dtype, shape=None):
    """`array` (from the npz) checked against the dtype its tensor's dtype implies and the shape sent."""
    if array.dtype.name != numpy_dtype:
        _fail(f"values of dtype {array.dtype.name}, where {numpy_dtype} is due")
    if shape is not None and list(array.shape) != _dims(shape):
        _fail(f"values of shape {list(array.shape)}, where the node says {str(shape)[:80]}")
    return array


class TensorEncoding:
    """The Encoder's tensorflow and ml_dtypes kinds, and where torch's go (ds1000_torch has them)."""

    def _tensor(self, value, depth):
        """The node of a torch/tensorflow value, None for one that is no tensor value (a container of
        theirs, say: the Encoder goes on with it), a placeholder for a tensor it cannot send."""
        module = type(value).__module__.split(".")[0]
        if module not in MODULES or module not in sys.modules:  # a value of theirs: they are imported
            return None
        try:
            if module == "torch":
                return self._torch(value, sys.modules["torch"], depth)
            return self._tf(value, sys.modules["tensorflow"], depth)
        except Exception as exc:  # e.g. a symbolic (graph) tensor has no values to send
            node = self.unsupported(value)
            return node | {"v": f"{node['v']} ({type(exc).__name__}: {exc})"[:600]}

    def _ml_node(self, value):
        """The node of a NumPy array or scalar of an ml_dtypes dtype (bfloat16...), None for others."""
        import numpy as np

        if type(value) is not np.ndarray and not isinstance(value, np.generic):  # (masked: its parts)
            return None
        dtype = value.dtype
        if dtype.name not in ML_DTYPES:
            return None
        if dtype.type.__module__.split(".")[0] == "numpy":  # (a NumPy dtype of that name: none yet)
            return None
        key = self.array(np.asarray(value).astype(ML_DTYPES[dtype.name]))
        return {"t": "mlarray", "dtype": dtype.name, "k": key, "scalar": isinstance(value, np.generic)}

    def _tf(self, value, tf, depth):
        import numpy as np

        if isinstance(value, tf.dtypes.DType):
            return {"t": "tf_dtype", "v": value.name} if value.name in TF_DTYPES else self.unsupported(value)
        if isinstance(value, tf.TensorShape):
            return {"t": "tf_shape", "v": None if value.rank is None else value.as_list()}
        if isinstance(value, (tf.RaggedTensor, tf.SparseTensor)):
            ragged = isinstance(value, tf.RaggedTensor)
            values = self._tf(value.flat_values if ragged else value.values, tf, depth)
            if values["t"] != "tf_tensor":  # of a dtype not sent: the whole goes as a placeholder
                return self.unsupported(value)
            if ragged:
                splits = [self.array(s.numpy()) for s in value.nested_row_splits]
                levels = [value]
                while len(levels) < value.ragged_rank:
                    levels.append(levels[-1].values)
                uniform = [x.uniform_row_length for x in levels]
                uniform = [None if n is None else int(n) for n in uniform]
                return {"t": "tf_ragged", "v": values, "splits": splits, "uniform": uniform}
            parts = [self.array(value.indices.numpy()), self.array(value.dense_shape.numpy())]
            return {"t": "tf_sparse", "v": values, "k": parts}
        if not isinstance(value, (tf.Tensor, tf.Variable)):
            return None
        name = value.dtype.name
        if name not in TF_DTYPES:
            return self.unsupported(value)
        node = {"t": "tf_tensor", "dtype": name, "shape": value.shape.as_list()}
        if isinstance(value, tf.Variable):
            node["variable"], node["trainable"] = True, bool(value.trainable)
        if name == "string":
            node["v"] = [base64.b64encode(x).decode() for x in tf.reshape(value, [-1]).numpy()]
        else:
            node["k"] = self.array(np.asarray(value.numpy()).astype(TF_DTYPES[name], copy=False))
        return node


def _ml_dtype(name):
    import ml_dtypes

    if not isinstance(name, str) or name not in ML_DTYPES:
        _fail(f"not an ml_dtypes dtype this codec sends: {str(name)[:80]!r}")
    return {n: getattr(ml_dtypes, n) for n in ML_DTYPES if hasattr(ml_dtypes, n)}[name]  # from the table


def _tf_dtype(name):
    import tensorflow as tf

    if not isinstance(name, str) or name not in TF_DTYPES:
        _fail(f"not a tensorflow dtype this codec sends: {str(name)[:80]!r}")
    return {n: tf.dtypes.as_dtype(n) for n in TF_DTYPES}[name]


class TensorDecoding:
    """The Decoder's tensorflow and ml_dtypes kinds (its `decode` and `array` do the rest)."""

    def _tf_dtype(self, node, depth):
        return _tf_dtype(node.get("v"))

    def _mlarray(self, node, depth):
        dtype, scalar = _ml_dtype(node.get("dtype")), node.get("scalar")
        values = _numpy_of(self.array(node.get("k")), ML_DTYPES[node["dtype"]])
        if not isinstance(scalar, bool) or scalar and values.ndim:
            _fail("an ml_dtypes array without its scalar flag")
        values = values.astype(dtype)
        return values[()] if scalar else values

    def _tf_shape(self, node, depth):
        import tensorflow as tf

        dims = node.get("v")
        return tf.TensorShape(None if dims is None else _dims(dims, unknown=True))

    def _tf_tensor(self, node, depth):
        import numpy as np
        import tensorflow as tf

        dtype, shape = _tf_dtype(node.get("dtype")), _dims(node.get("shape"))
        if dtype == tf.string:
            items = node.get("v")
            if not isinstance(items, list) or not all(isinstance(x, str) for x in items):
                _fail("a tf.string tensor without its items")
            if len(items) != math.prod(shape):
                _fail(f"{len(items)} strings for a tensor of shape {shape}")
            values = np.empty(len(items), dtype=object)  # made here, of bytes only: never from the npz
            values[:] = [base64.b64decode(x, validate=True) for x in items]
            tensor = tf.constant(values.reshape(shape), dtype=tf.string)
        else:
            values = _numpy_of(self.array(node.get("k")), TF_DTYPES[dtype.name], shape)
            tensor = tf.cast(tf.constant(values), dtype)  # bfloat16 comes as float32
        if node.get("variable") is True:
            trainable = node.get("trainable")
            if not isinstance(trainable, bool):
                _fail("a tf.Variable without its trainable flag")
            return tf.Variable(tensor, trainable=trainable)
        return tensor

    def _tf_values(self, node, depth):
        """The values (a tf.Tensor node, nothing else) of a ragged or sparse tensor."""
        if not isinstance(node, dict) or node.get("t") != "tf_tensor" or "variable" in node:
            _fail("a ragged or sparse tensor whose values are not a tensor")
        return self._tf_tensor(node, depth)

    def _tf_ragged(self, node, depth):
        import numpy as np
        import tensorflow as tf

        splits = node.get("splits")
        if not isinstance(splits, list) or not 0 < len(splits) < MAX_DIMS:
            _fail("a ragged tensor without its row splits")
        splits = [self.array(k) for k in splits]
        if any(s.dtype.name not in SPLIT_DTYPES or s.ndim != 1 for s in splits):
            _fail("row splits that are not a vector of int32 or int64")
        uniform = node.get("uniform", [None] * len(splits))
        if not isinstance(uniform, list) or len(uniform) != len(splits):
            _fail("a ragged tensor without a uniform row length (or None) for each level")
        values = self._tf_values(node.get("v"), depth)
        for split, length in zip(reversed(splits), reversed(uniform), strict=True):  # the innermost first
            if length is None:
                values = tf.RaggedTensor.from_row_splits(values, split, validate=True)
                continue
            if type(length) is not int or not 0 <= length < 1 << 31:  # (so the products below fit)
                _fail(f"a uniform row length that is not a non-negative int: {str(length)[:80]}")
            if not np.array_equal(split, np.arange(len(split), dtype=np.int64) * length):
                _fail(f"a uniform row length {str(length)[:80]} that is not its row splits'")
            length, rows = (tf.constant(n, tf.as_dtype(split.dtype)) for n in (length, len(split) - 1))
            values = tf.RaggedTensor.from_uniform_row_length(values, length, nrows=rows, validate=True)
        return values

    def _tf_sparse(self, node, depth):
        import tensorflow as tf

        parts = node.get("k")
        if not isinstance(parts, list) or len(parts) != 2:
            _fail("a sparse tensor without its indices and dense shape")
        indices, shape = (_numpy_of(self.array(k), "int64") for k in parts)
        values = self._tf_values(node.get("v"), depth)
        rank = shape.shape[0] if shape.ndim == 1 else -1
        if rank < 0 or values.shape.rank != 1 or indices.shape != (values.shape[0], rank):
            _fail("a sparse tensor whose indices, values and dense shape do not match")
        if math.prod(_dims(shape.tolist())) > MAX_VIRTUAL_NUMEL:
            _fail(f"a sparse tensor of more than {MAX_VIRTUAL_NUMEL} elements")
        if ((indices < 0) | (indices >= shape)).any():
            _fail("a sparse tensor with an index out of its dense shape")
        return tf.SparseTensor(indices, values, shape)
