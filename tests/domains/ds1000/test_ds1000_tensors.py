"""The torch and tensorflow kinds of the DS-1000 result codec (checks/ds1000_torch.py, ds1000_tensors.py)
in the DS-1000 environment: tensors come back with their dtypes, shapes, layouts and flags, data that is not
what the codec writes fails to load, and a value of another library imports neither torch nor tensorflow.
DS-1000-style problems through the real checker: test_ds1000_tensor_problems.py."""

from tests.domains.ds1000.problems import run_in_env

TORCH_ROUNDTRIP = """
import numpy as np, torch
from ds1000_data import dumps, loads

def back(value):
    return loads(*dumps(value))

names = ["bool", "uint8", "int8", "int16", "int32", "int64", "uint16", "uint32", "uint64", "float16"]
names += ["bfloat16", "float32", "float64", "complex64", "complex128"]
for name in names:
    dtype = getattr(torch, name)
    for value in (torch.arange(6).reshape(2, 3) % 3, torch.tensor(5), torch.zeros(0, 4)):
        value = value.to(dtype)
        got = back(value)
        assert type(got) is torch.Tensor and got.dtype == dtype and got.shape == value.shape, (name, got)
        assert not got.requires_grad and got.type() == value.type()
        if name not in ("uint16", "uint32", "uint64"):  # torch.equal has no kernel for these
            assert torch.equal(got, value), (name, got)
        else:
            assert (got.to(torch.int64) == value.to(torch.int64)).all()
for name in ("complex32", "float8_e4m3fn", "float8_e5m2"):  # numpy has none of these: sent widened
    value = torch.tensor([1.5, -2.0, 0.25]).to(getattr(torch, name))
    got = back(value)
    assert got.dtype == value.dtype and torch.equal(got.to(torch.complex64), value.to(torch.complex64))
bf = torch.tensor([1.5, -2.25, 3e38], dtype=torch.bfloat16)
assert torch.equal(back(bf), bf) and back(bf).dtype == torch.bfloat16
odd = torch.tensor([float("nan"), float("inf"), -0.0])
assert torch.equal(back(odd).isnan(), odd.isnan()) and back(odd)[1] == float("inf")
assert torch.equal(back(torch.arange(12.0).reshape(3, 4).T), torch.arange(12.0).reshape(3, 4).T)
conj = torch.tensor([1 + 2j]).conj()  # a lazily conjugated view
assert torch.equal(back(conj), torch.tensor([1 - 2j]))
grad = torch.ones(3, requires_grad=True) * 2  # not a leaf: comes back as a leaf that requires grad
got = back(grad)
assert got.requires_grad and got.is_leaf and torch.equal(got.detach(), grad.detach())
param = torch.nn.Parameter(torch.randn(2, 2))
got = back(param)
assert type(got) is torch.nn.Parameter and got.requires_grad and torch.equal(got, param)
frozen = back(torch.nn.Parameter(torch.arange(3), requires_grad=False))
assert type(frozen) is torch.nn.Parameter and not frozen.requires_grad and frozen.dtype == torch.int64
size = back(torch.Size([2, 0, 3]))
assert type(size) is torch.Size and size == torch.Size([2, 0, 3])
assert back(torch.zeros(2, 3).shape) == (2, 3)
for dtype in (torch.float32, torch.bfloat16, torch.int64, torch.bool, torch.complex128):
    assert back(dtype) is dtype
blocks = back(torch.eye(4).to_sparse_bsr((2, 2)))  # block sparse layouts go as placeholders
assert blocks != blocks and "sparse" in repr(blocks)
coo = torch.sparse_coo_tensor([[0, 1, 1, 0], [2, 0, 2, 2]], [1.0, 2.0, 3.0, 4.0], (2, 3))  # uncoalesced
hybrid = torch.sparse_coo_tensor([[0, 2]], torch.arange(8.0).reshape(2, 4), (3, 4))
compressed = (torch.eye(3).to_sparse_csr(), torch.eye(3).double().to_sparse_csc())
for value in (coo, coo.coalesce(), hybrid, *compressed):
    got = back(value)
    assert got.layout == value.layout and got.dtype == value.dtype and got.shape == value.shape, got
    assert torch.equal(got.to_dense(), value.to_dense())
    if value.layout == torch.sparse_coo:
        assert got.is_coalesced() == value.is_coalesced() and got.sparse_dim() == value.sparse_dim()
assert back(coo.requires_grad_()).requires_grad
assert back(torch.eye(2).to_sparse_csr()).crow_indices().dtype == torch.int64
# layouts: strides, contiguity and channels_last survive; an expanded dim stays expanded
base = torch.arange(24.0).reshape(2, 3, 4)
last = torch.channels_last
layouts = [base.transpose(0, 2), base[:, 1:, ::2], base.reshape(2, 3, 2, 2).to(memory_format=last)]
layouts += [torch.zeros(1, 3).expand(4, 3), torch.tensor(2.0).expand(2, 3), base.permute(2, 0, 1)[1:]]
layouts += [torch.zeros(3, 0).t(), torch.arange(6).reshape(2, 3).t().to(torch.bfloat16), base[:, :, 1]]
for value in layouts:
    got = back(value)
    assert torch.equal(got, value) and got.stride() == value.stride(), (got.stride(), value.stride())
    assert got.is_contiguous() == value.is_contiguous() and got.dtype == value.dtype
    assert got.dim() != 4 or got.is_contiguous(memory_format=last) == value.is_contiguous(memory_format=last)
assert not back(torch.arange(6.0).reshape(2, 3).t()).is_contiguous()
assert back(torch.ones(3, requires_grad=True).expand(2, 3)).requires_grad
narrow = torch.arange(10**6.0).reshape(1000, 1000)[:, :1]  # its storage past the bound: comes back contiguous
overlap = torch.arange(5.0).unfold(0, 3, 1)  # elements that share memory: the same
for value in (narrow, overlap):
    got = back(value)
    assert torch.equal(got, value) and got.is_contiguous() and not value.is_contiguous()
# a leaf's gradient comes with it
leaf = torch.ones(2, 3, requires_grad=True)
(leaf * 3).sum().backward()
got = back(leaf)
assert got.requires_grad and torch.equal(got.grad, torch.full((2, 3), 3.0))
param = torch.nn.Parameter(torch.ones(2))
param.grad = torch.tensor([1.0, 2.0])
assert type(back(param)) is torch.nn.Parameter and torch.equal(back(param).grad, param.grad)
assert back(torch.ones(2)).grad is None
for device in ("cpu", "cuda:1", "meta"):
    got = back(torch.device(device))
    assert got == torch.device(device) and type(got) is torch.device
class Mine(torch.Tensor):  # a subclass the solution defines: a placeholder
    pass
mine = back(torch.ones(2).as_subclass(Mine))
assert mine != mine and "Mine" in repr(mine)
mixed = back({"x": [torch.tensor([1, 2]), (torch.float16, torch.Size([1]))], "n": np.int8(3)})
assert torch.equal(mixed["x"][0], torch.tensor([1, 2])) and mixed["x"][1] == (torch.float16, torch.Size([1]))

# the checks DS-1000's Pytorch problems use
ans = torch.stack([torch.randn(3), torch.randn(3)])
result = back(ans)
torch.testing.assert_close(result, ans)
assert result.type() == ans.type() and result.size() == ans.size()
try:
    torch.testing.assert_close(back(ans.double()), ans)
except AssertionError:
    pass
else:
    raise AssertionError("a float64 result passed a float32 answer")
top = back(torch.max(torch.tensor([[1, 5], [7, 2]]), 1))  # torch.return_types: fields by name
assert torch.equal(top.values, torch.tensor([5, 7])) and torch.equal(top.indices, torch.tensor([1, 0]))
values, indices = top
assert torch.equal(values, top.values) and type(top) is torch.return_types.max
x = torch.tensor([[5.0, 1.0, 4.0], [0.0, 3.0, 9.0]])
for value in (torch.topk(x, 2), torch.sort(x), torch.linalg.svd(torch.eye(2)), x.min(0), torch.linalg.qr(x)):
    got = back(value)
    assert type(got) is type(value) and len(got) == len(value), got
    assert all(torch.equal(a, b) for a, b in zip(got, value, strict=True))
print("torch ok")
"""

TF_ROUNDTRIP = """
import numpy as np, tensorflow as tf
from ds1000_data import dumps, loads

def back(value):
    return loads(*dumps(value))

def same(got, value):
    return type(got) is type(value) and got.dtype == value.dtype and got.shape == value.shape

names = ["bool", "uint8", "int8", "int16", "int32", "int64", "uint16", "uint32", "uint64", "float16"]
names += ["bfloat16", "float32", "float64", "complex64", "complex128"]
for name in names:
    dtype = tf.dtypes.as_dtype(name)
    for value in (tf.reshape(tf.range(6) % 3, (2, 3)), tf.constant(5), tf.zeros((0, 4), tf.int32)):
        value = tf.cast(value, dtype)
        got = back(value)
        assert same(got, value), (name, got)
        assert np.array_equal(got.numpy(), value.numpy()), (name, got)
for value in (tf.constant([[b"a", b""], [b"\\x00\\xff", "\\u00e9".encode()]]), tf.constant(b"tail\\x00")):
    got = back(value)
    assert same(got, value) and bool(tf.reduce_all(tf.equal(got, value))), got
variable = tf.Variable([[1.0, 2.0]], trainable=False)
got = back(variable)
assert isinstance(got, tf.Variable) and not got.trainable and same(got, variable)
assert back(tf.Variable(3)).trainable and int(back(tf.Variable(3)).numpy()) == 3
ragged = tf.ragged.constant([[[1, 2], []], [[3]]], dtype=tf.int64)
got = back(ragged)
assert isinstance(got, tf.RaggedTensor) and got.to_list() == ragged.to_list() and got.dtype == tf.int64
assert got.row_splits.dtype == ragged.row_splits.dtype and got.ragged_rank == 2
words = tf.ragged.constant([[b"a"], [b"b", b"c"]], row_splits_dtype=tf.int32)
got = back(words)
assert got.to_list() == words.to_list() and got.row_splits.dtype == tf.int32
uniform = tf.RaggedTensor.from_uniform_row_length(tf.range(6), 2)  # shape (3, 2), not (3, None)
got = back(uniform)
assert got.shape.as_list() == [3, 2] and int(got.uniform_row_length) == 2
assert got.to_list() == uniform.to_list()
inner = tf.RaggedTensor.from_row_splits(tf.range(5, dtype=tf.int64), tf.constant([0, 2, 2, 5, 5], tf.int32))
nested = tf.RaggedTensor.from_uniform_row_length(inner, 2)
got = back(nested)
assert got.shape.as_list() == [2, 2, None] and got.to_list() == nested.to_list() and got.dtype == tf.int64
assert got.row_splits.dtype == tf.int32 and got.values.uniform_row_length is None
none = tf.RaggedTensor.from_uniform_row_length(tf.zeros((0,)), 0, nrows=3)
assert back(none).shape.as_list() == [3, 0]
import ml_dtypes  # noqa: E402  NumPy arrays of ml_dtypes' dtypes (what tensor.numpy() gives for them)
bf16 = tf.cast(tf.constant([[1.5, -2.25]]), tf.bfloat16).numpy()
for value in (bf16, bf16[0, 1], np.array([1, -8, 7], ml_dtypes.int4), np.array([0, 15], ml_dtypes.uint4)):
    got = back(value)
    assert type(got) is type(value) and got.dtype == value.dtype and np.shape(got) == np.shape(value), got
    assert np.array_equal(np.asarray(got).astype(np.float64), np.asarray(value).astype(np.float64))
masked = back(np.ma.MaskedArray(bf16, mask=[[True, False]]))
assert masked.dtype == bf16.dtype and masked.mask.tolist() == [[True, False]] and float(masked[0, 1]) == -2.25
for name in ("float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz", "float8_e4m3b11fnuz"):
    value = np.array([0.5, -1.5], getattr(ml_dtypes, name))
    assert back(value).dtype == value.dtype and np.array_equal(back(value).astype(np.float32), [0.5, -1.5])
sparse = tf.SparseTensor(indices=[[0, 1], [2, 3]], values=[1.5, 2.5], dense_shape=[3, 4])
got = back(sparse)
assert isinstance(got, tf.SparseTensor) and got.dtype == tf.float32
assert np.array_equal(tf.sparse.to_dense(got).numpy(), tf.sparse.to_dense(sparse).numpy())
odd = back([tf.ragged.constant([[1], []], dtype=tf.qint8), tf.constant([1], tf.qint8), tf.qint8, 2])
assert odd[0] != odd[0] and odd[1] != odd[1] and odd[2] != odd[2] and odd[3] == 2, odd  # dtypes not sent
for dtype in (tf.int32, tf.float64, tf.string, tf.bool, tf.bfloat16):
    assert back(dtype) == dtype and isinstance(back(dtype), tf.dtypes.DType)
for shape in (tf.TensorShape([2, None, 3]), tf.TensorShape(None), tf.TensorShape([])):
    got = back(shape)
    assert isinstance(got, tf.TensorShape) and got.as_proto() == shape.as_proto()
assert back(tf.zeros((2, 3)).shape) == (2, 3)
import keras  # noqa: E402  keras 3's own values are not tensorflow's: placeholders that equal nothing
for value in (keras.Variable([1.0, 2.0]), keras.Input((3,))):
    got = back(value)
    assert got != got and "keras" in repr(got), got
sent = []
tf.function(lambda x: sent.append(back(x)) or x)(tf.constant([1.0]))  # a symbolic tensor has no values
assert sent[0] != sent[0] and "tensorflow" in repr(sent[0]), sent

# the checks DS-1000's Tensorflow problems use
ans = tf.one_hot([1, 0, 2], depth=4, dtype=tf.int32)
result = back(ans)
np.testing.assert_array_equal(result, ans)
assert bool(tf.reduce_all(result == ans)) and result.dtype == ans.dtype and type(result) == type(ans)
from ds1000_check import empty_where_expected  # noqa: E402  the checker's guard sees tf's sizes too
assert empty_where_expected(back(tf.zeros((3, 0))), ans) == "result"
assert empty_where_expected(back(tf.zeros((0,))), ans) == "result"
assert empty_where_expected(back(tf.constant(1.0)), ans) is None
print("tf ok")
"""

HOSTILE = """
import io, json, sys
import numpy as np
from ds1000_data import DecodeError, dumps, loads

def npz(**arrays):
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    return buffer.getvalue()

def rejected(node, **arrays):
    try:
        loads(json.dumps(node), npz(**arrays))
    except DecodeError as exc:
        return str(exc)
    raise AssertionError(f"loaded {node}")

f32 = np.zeros(3, np.float32)
tf_tensor = {"t": "tf_tensor", "dtype": "float32", "shape": [3], "k": "a0"}
tensor = {"t": "torch_tensor", "dtype": "float32", "shape": [3], "k": "a0", "grad": False, "param": False}
assert loads(json.dumps(tensor), npz(a0=f32)).shape == (3,)
for name in ("os.system", "Tensor", "__class__", "nn", "float", "bfloat16 ", 7, None, ["int64"]):
    assert "not a torch dtype" in rejected({**tensor, "dtype": name}, a0=f32)
    assert "not a torch dtype" in rejected({"t": "torch_dtype", "v": name})
    assert "not a tensorflow dtype" in rejected({"t": "tf_dtype", "v": name})
    assert "not a tensorflow dtype" in rejected({**tf_tensor, "dtype": name}, a0=f32)
assert "shape" in rejected({**tensor, "shape": [4]}, a0=f32)
assert "shape" in rejected({**tensor, "shape": [3, 1]}, a0=f32)
assert "shape" in rejected({**tensor, "shape": "3"}, a0=f32)
assert "dtype" in rejected({**tensor, "dtype": "int64"}, a0=f32)
assert "dtype" in rejected({**tensor, "dtype": "bfloat16"}, a0=np.zeros(3, np.uint16))  # carried as float32
assert "no array" in rejected({**tensor, "k": 5}, a0=f32)
assert "no array" in rejected({**tensor, "k": "a1"}, a0=f32)
assert "flags" in rejected({**tensor, "grad": "yes"}, a0=f32)
assert rejected({**tensor, "dtype": "int64", "grad": True}, a0=np.zeros(3, np.int64))  # no grad for ints
assert "pickle" in rejected({**tensor, "dtype": "int64"}, a0=np.array([print], dtype=object))
for dims in ([-1], [2**70], [1.5], [True], ["2"], [1] * 65, {"n": 2}, None):
    assert "shape" in rejected({"t": "torch_size", "v": dims}), dims
strings = {"t": "tf_tensor", "dtype": "string", "shape": [2], "v": ["YQ==", ""]}
assert loads(json.dumps(strings), npz()).shape == (2,)
assert "strings" in rejected({**strings, "shape": [10**12, 10**12]})  # huge, not matching the items
assert "strings" in rejected({**strings, "shape": [3]})
assert "shape" in rejected({**strings, "shape": [2**70, 0]})
assert "shape" in rejected({**strings, "shape": [1] * 100})
assert "items" in rejected({**strings, "v": [1, 2]})
assert rejected({**strings, "v": ["not base64!", ""]})
assert "shape" in rejected({**tf_tensor, "shape": [10**15]}, a0=f32)
assert "dtype" in rejected({**tf_tensor, "dtype": "int32"}, a0=f32)
assert "trainable" in rejected({**tf_tensor, "variable": True, "trainable": "x"}, a0=f32)
for dims in ([-2], [2**70], [1.5], "x", [1] * 65):
    assert "shape" in rejected({"t": "tf_shape", "v": dims}), dims
splits = np.array([0, 2, 3], np.int64)
ragged = {"t": "tf_ragged", "v": {**tf_tensor}, "splits": ["a1"]}
assert loads(json.dumps(ragged), npz(a0=f32, a1=splits)).shape.as_list() == [2, None]
assert rejected(ragged, a0=f32, a1=np.array([0, 3, 2], np.int64))  # splits that go back
assert rejected(ragged, a0=f32, a1=np.array([0, 2, 5], np.int64))  # past the values
assert "int32 or int64" in rejected(ragged, a0=f32, a1=splits.astype(np.float64))
assert "row splits" in rejected({**ragged, "splits": []}, a0=f32)
assert "not a tensor" in rejected({**ragged, "v": {"t": "list", "v": []}}, a0=f32, a1=splits)
variable = {**tf_tensor, "variable": True, "trainable": True}
assert "not a tensor" in rejected({**ragged, "v": variable}, a0=f32, a1=splits)
sparse = {"t": "tf_sparse", "v": {**tf_tensor}, "k": ["a1", "a2"]}
indices, dense = np.array([[0, 0], [1, 2], [2, 1]], np.int64), np.array([3, 3], np.int64)
assert loads(json.dumps(sparse), npz(a0=f32, a1=indices, a2=dense)).dense_shape.numpy().tolist() == [3, 3]
assert "out of" in rejected(sparse, a0=f32, a1=indices, a2=np.array([3, 2], np.int64))
assert "out of" in rejected(sparse, a0=f32, a1=-indices, a2=dense)
assert "match" in rejected(sparse, a0=f32, a1=indices[:2], a2=dense)
assert "match" in rejected(sparse, a0=f32, a1=indices, a2=np.array([3, 3, 3], np.int64))
assert "shape" in rejected(sparse, a0=f32, a1=indices, a2=np.array([3, -1], np.int64))
assert "dtype" in rejected(sparse, a0=f32, a1=indices.astype(np.int32), a2=dense)
assert "indices" in rejected({**sparse, "k": "a1"}, a0=f32, a1=indices, a2=dense)
huge = np.array([1 << 20, 1 << 20], np.int64)  # a few values, a dense size no check could make
assert "elements" in rejected(sparse, a0=f32, a1=indices, a2=huge)
f23 = np.zeros((2, 3), np.float32)
strided = {**tensor, "shape": [2, 3], "stride": [1, 2]}
assert loads(json.dumps(strided), npz(a0=f23)).stride() == (1, 2)
assert loads(json.dumps({**strided, "stride": [0, 1]}), npz(a0=f23[:1])).stride() == (0, 1)
assert "shape" in rejected({**strided, "stride": [0, 1]}, a0=f23)  # an expanded dim comes once
vast = {**tensor, "shape": [1 << 30, 3], "stride": [0, 1]}  # one row of data, expanded past any memory
assert "elements" in rejected(vast, a0=f23[:1])
for strides in (["1", 2], [1.5, 1], [True, 1], [-1, 1], [1], [1, 2, 3], "12", {"0": 1}, [2**70, 1]):
    assert "strides" in rejected({**strided, "stride": strides}, a0=f23), strides
for strides in ([1, 1], [2, 1]):  # elements that overlap
    assert "overlap" in rejected({**strided, "stride": strides}, a0=f23), strides
for strides in ([10**9, 1], [1, 2**61], [5000, 1]):  # storage far past the values
    assert "storage" in rejected({**strided, "stride": strides}, a0=f23), strides
assert "relaid" in rejected({**strided, "relaid": True}, a0=f23)
assert "relaid" in rejected({**tensor, "relaid": "yes"}, a0=f32)
gradient = {**tensor, "shape": [2], "k": "a1"}
assert "gradient" in rejected({**tensor, "gradient": gradient}, a0=f32, a1=np.zeros(2, np.float32))
wide = {**tensor, "dtype": "float64", "k": "a1"}
assert "gradient" in rejected({**tensor, "gradient": wide}, a0=f32, a1=np.zeros(3))
for part in ({"t": "list", "v": []}, {**tensor, "param": True}, {**tensor, "grad": True}, 5):
    assert "plain tensor" in rejected({**tensor, "gradient": part}, a0=f32), part
top = {"t": "torch_return", "name": "max", "v": [tensor, tensor]}
assert type(loads(json.dumps(top), npz(a0=f32))).__name__ == "max"
for name in ("__init__", "os", "sys", "torch", "Tensor", "__builtins__", "namedtuple", "max ", 5, None):
    assert "return_types" in rejected({**top, "name": name}, a0=f32), name
assert "items" in rejected({**top, "v": [tensor]}, a0=f32)
assert "items" in rejected({**top, "v": [tensor] * 3}, a0=f32)
index = {**tensor, "dtype": "int64", "shape": [2, 1], "k": "a1"}
coo = {"t": "torch_sparse", "layout": "coo", "size": [2, 2], "grad": False}
coo["v"] = [index, {**tensor, "shape": [1]}]
one, at = np.ones(1, np.float32), np.array([[1], [0]], np.int64)
assert loads(json.dumps(coo), npz(a0=one, a1=at)).to_dense().tolist() == [[0, 0], [1, 0]]
assert rejected(coo, a0=one, a1=np.array([[1], [5]], np.int64))  # an index out of its size
assert rejected(coo, a0=one, a1=-at)
assert "elements" in rejected({**coo, "size": [1 << 20, 1 << 20]}, a0=one, a1=at)
assert "dtype" in rejected(coo, a0=one, a1=at.astype(np.int32))
floats = {**coo, "v": [{**index, "dtype": "float32"}, coo["v"][1]]}
assert "int64" in rejected(floats, a0=one, a1=at.astype(np.float32))
assert "plain tensor" in rejected({**coo, "v": [{**index, "param": True}, coo["v"][1]]}, a0=one, a1=at)
assert "shape" in rejected({**coo, "size": [2, -2]}, a0=one, a1=at)
assert "shape" in rejected({**coo, "size": [1] * 65}, a0=one, a1=at)
assert "elements" in rejected({**coo, "size": [2**30, 2**30]}, a0=one, a1=at)
assert "match" in rejected({**coo, "size": [2]}, a0=one, a1=at)
assert "layout" in rejected({**coo, "layout": "bsr"}, a0=one, a1=at)
assert "layout" in rejected({**coo, "v": coo["v"][:1]}, a0=one, a1=at)
twice = np.array([[1, 1], [0, 0]], np.int64)  # duplicates said to be coalesced
dup = {**coo, "coalesced": True, "v": [{**index, "shape": [2, 2]}, {**tensor, "shape": [2]}]}
assert rejected(dup, a0=np.ones(2, np.float32), a1=twice)
crow = {**tensor, "dtype": "int64", "shape": [3], "k": "a1"}
csr = {"t": "torch_sparse", "layout": "csr", "size": [2, 2], "grad": False}
csr["v"] = [crow, {**crow, "shape": [1], "k": "a2"}, {**tensor, "shape": [1]}]
good = {"a0": one, "a1": np.array([0, 1, 1], np.int64), "a2": np.array([1], np.int64)}
assert loads(json.dumps(csr), npz(**good)).to_dense().tolist() == [[0, 1], [0, 0]]
assert rejected(csr, **(good | {"a1": np.array([0, 1, 5], np.int64)}))  # rows past the values
assert rejected(csr, **(good | {"a2": np.array([7], np.int64)}))  # a column out of its size
assert "matrix" in rejected({**csr, "size": [2, 2, 1]}, **good)
assert loads(json.dumps({"t": "torch_device", "v": "cuda:1"}), npz()).index == 1
for text in ("cpu; import os", "cuda:1234", "tpu", "", "cpu:0\\n", "CPU", "cuda:-1", 5, None, ["cpu"]):
    assert "device" in rejected({"t": "torch_device", "v": text}), text
ml = {"t": "mlarray", "dtype": "bfloat16", "k": "a0", "scalar": False}
assert loads(json.dumps(ml), npz(a0=f32)).dtype.name == "bfloat16"
assert loads(json.dumps({**ml, "scalar": True}), npz(a0=np.float32(2.5))) == 2.5
for name in ("float32", "os", "bfloat16 ", "__class__", "finfo", "float8_e8m0fnu", 5, None):
    assert "ml_dtypes" in rejected({**ml, "dtype": name}, a0=f32), name
assert "dtype" in rejected(ml, a0=np.zeros(3, np.float64))
assert "dtype" in rejected({**ml, "dtype": "int4"}, a0=f32)
assert "scalar" in rejected({**ml, "scalar": True}, a0=f32)
assert "scalar" in rejected({**ml, "scalar": "no"}, a0=f32)
uniform = {**ragged, "v": {**tf_tensor, "shape": [4]}, "uniform": [2]}
assert "uniform" in rejected(uniform, a0=np.zeros(4, np.float32), a1=splits)  # its splits: not [0, 2, 4]
assert rejected({**uniform, "uniform": [3]}, a0=np.zeros(4, np.float32), a1=np.array([0, 3, 6]))
assert loads(json.dumps(uniform), npz(a0=np.zeros(4, np.float32), a1=np.array([0, 2, 4]))).shape == (2, 2)
for lengths in ([2, None], "2", ["2"], [1.0], [True], [-2], [2**40]):
    assert "uniform" in rejected({**ragged, "uniform": lengths}, a0=f32, a1=splits), lengths
assert "unknown kind" in rejected({"t": "torch_Tensor", "v": []})
assert "unexpected node" in rejected({"t": "list", "v": [["torch_tensor"]]})
print("hostile ok")
"""

NO_IMPORT = """
import sys
import numpy as np, pandas as pd
from ds1000_data import dumps, loads

value = [np.arange(6).reshape(2, 3), pd.DataFrame({"a": [1.5]}), (1, "x"), {"k": np.float32(2)}]
got = loads(*dumps(value))
assert (got[0] == value[0]).all() and got[2] == (1, "x")
imported = sorted(m for m in sys.modules if m.split(".")[0] in ("torch", "tensorflow", "keras"))
assert not imported, imported
print("no import ok")
"""


def test_torch_values_round_trip(torch_env):
    done = run_in_env(torch_env, TORCH_ROUNDTRIP)
    assert done.returncode == 0 and "torch ok" in done.stdout, done.stderr[-3000:]


def test_tensorflow_values_round_trip(tf_env):
    done = run_in_env(tf_env, TF_ROUNDTRIP)
    assert done.returncode == 0 and "tf ok" in done.stdout, done.stderr[-3000:]


def test_hostile_tensor_data_fails_to_load(torch_env, tf_env):
    done = run_in_env(torch_env, HOSTILE)
    assert done.returncode == 0 and "hostile ok" in done.stdout, done.stderr[-3000:]


def test_values_of_other_libraries_import_neither_torch_nor_tensorflow(ds1000_env):
    done = run_in_env(ds1000_env, NO_IMPORT)
    assert done.returncode == 0 and "no import ok" in done.stdout, done.stderr[-3000:]
