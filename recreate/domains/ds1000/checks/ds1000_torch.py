"""Runs INSIDE DS-1000 sandboxes: the PyTorch half of the ds1000_tensors codec (mixed into ds1000_data's
Encoder and Decoder; tensorflow's kinds and the helpers both use are in ds1000_tensors).
- A dense torch.Tensor goes as one plain array of its values (a dtype NumPy lacks, bfloat16 and the like,
  widened to one it has), the name of its dtype (looked up in a fixed table on load, never with getattr on a
  name from the data), its shape, strides, requires_grad and, on a leaf whose `.grad` is set, that gradient
  (a tensor node). It comes back laid out as it was: `stride()`, `is_contiguous()` and channels_last hold;
  an expanded dimension (stride 0) is sent once and expanded again. A layout that cannot be rebuilt within
  a bounded storage (a narrow slice of a large tensor, or one whose elements overlap) comes back contiguous
  (its node says "relaid"). A torch.nn.Parameter comes back as a Parameter, any other subclass that torch
  itself defines as a plain tensor. A subclass defined elsewhere, by the solution (its module is "__main__"
  or "builtins") or by another library, is no value of torch's: it goes as ds1000_data sends any other
  value, as a placeholder that equals nothing.
- A sparse tensor (COO, CSR, CSC) goes as its indices and values (tensor nodes) and size, and is rebuilt
  with torch's invariant checks; other layouts (BSR, quantized, nested, on the meta device) go as
  placeholders.
- torch.return_types (topk, max, sort, svd...) come back as themselves, the class looked up by name among
  the tuple types that module defines. torch.Size, torch.dtype, torch.device: themselves.
"""

import math
import re
import warnings

from ds1000_tensors import MAX_VIRTUAL_NUMEL, _dims, _fail, _numpy_of

# dtype name -> the NumPy dtype of the array that carries its values (numpy lacks bfloat16, float8, chalf)
_PLAIN = ("bool", "uint8", "int8", "int16", "int32", "int64", "uint16", "uint32", "uint64", "float16")
_PLAIN += ("float32", "float64", "complex64", "complex128")
TORCH_DTYPES = {name: name for name in _PLAIN} | {"bfloat16": "float32", "complex32": "complex64"}
TORCH_DTYPES |= {"float8_e4m3fn": "float32", "float8_e5m2": "float32"}
SPARSE_LAYOUTS = {"coo": 2, "csr": 3, "csc": 3}  # layout -> how many tensors carry it
INDEX_DTYPES = ("int32", "int64")  # of a compressed sparse tensor's indices (COO's are int64)
DEVICE = re.compile(r"(cpu|cuda|meta|mps|xpu)(:[0-9]{1,3})?")


def _extent(shape, strides):
    """The storage a layout spans (0 for no elements), or None where elements would overlap. Dims of
    size 1 or 0 do not count; the others, in order of stride, each start past all the smaller ones
    (enough for no overlap, and what every layout torch's own operations make satisfies)."""
    if 0 in shape:
        return 0
    span = 0  # the last offset the dims seen so far reach
    for size, stride in sorted((p for p in zip(shape, strides, strict=True) if p[0] > 1), key=lambda p: p[1]):
        if stride <= span:
            return None
        span += (size - 1) * stride
    return span + 1


def _bound(numel):
    return max(4 * numel, numel + 4096)


def _layout(shape, strides):
    """(the shape the values are sent in: 1 on an expanded dim, why not) for a tensor of `shape` and
    `strides`: (None, the reason) if its layout cannot be rebuilt."""
    sent = [1 if stride == 0 and size > 1 else size for size, stride in zip(shape, strides, strict=True)]
    numel = 1
    for size in sent:
        numel *= size
    extent = _extent(sent, strides)
    if extent is None:
        return None, "whose elements overlap"
    if extent > _bound(numel):
        return None, f"spanning {extent} elements of storage for {numel}"
    return sent, None


def _return_types(torch):
    """name -> class of torch.return_types' own tuple types (read from the module's dict: no getattr)."""
    found = vars(torch.return_types).items()
    return {
        n: c
        for n, c in found
        if isinstance(c, type) and issubclass(c, tuple) and c.__module__ == "torch.return_types"
    }


class TorchEncoding:
    """The Encoder's torch kinds (its `encode`, `array` and `unsupported` do the rest)."""

    def _torch(self, value, torch, depth):
        if isinstance(value, torch.Size):
            return {"t": "torch_size", "v": [int(n) for n in value]}
        if isinstance(value, torch.dtype):
            name = str(value).removeprefix("torch.")
            return {"t": "torch_dtype", "v": name} if name in TORCH_DTYPES else self.unsupported(value)
        if isinstance(value, torch.device):
            return {"t": "torch_device", "v": str(value)}
        if isinstance(value, tuple) and type(value) is _return_types(torch).get(type(value).__name__):
            items = [self.encode(x, depth) for x in value]
            return {"t": "torch_return", "name": type(value).__name__, "v": items}
        if not isinstance(value, torch.Tensor):
            return None
        sparse = {torch.sparse_coo: "coo", torch.sparse_csr: "csr", torch.sparse_csc: "csc"}
        if value.layout in sparse and not value.is_meta:
            return self._torch_sparse(value, torch, sparse[value.layout], depth)
        if value.layout in sparse:
            return self.unsupported(value)
        name = str(value.dtype).removeprefix("torch.")
        dense = value.layout == torch.strided and not value.is_quantized and not value.is_nested
        if name not in TORCH_DTYPES or not dense or value.is_meta:
            return self.unsupported(value)
        plain = value.detach().cpu().resolve_conj().resolve_neg()
        strides = list(value.stride())
        sent, _ = _layout(list(value.shape), strides)
        if sent is None:  # comes back contiguous
            strides = None
        else:  # an expanded dim goes once
            for dim, (size, was) in enumerate(zip(sent, value.shape, strict=True)):
                if size != was:
                    plain = plain.narrow(dim, 0, 1)
        if TORCH_DTYPES[name] != name:
            plain = plain.to(getattr(torch, TORCH_DTYPES[name]))
        node = {
            "t": "torch_tensor",
            "dtype": name,
            "shape": list(value.shape),
            "stride": strides,
            "k": self.array(plain.numpy()),
            "grad": bool(value.requires_grad),
            "param": isinstance(value, torch.nn.Parameter),
        }
        if strides is None:
            node["relaid"] = True
        if value.is_leaf and value.grad is not None:
            gradient = self._torch(value.grad.detach(), torch, depth + 1)
            if gradient["t"] == "torch_tensor":  # (a sparse gradient is not sent)
                node["gradient"] = gradient
        return node

    def _torch_sparse(self, value, torch, layout, depth):
        if layout != "coo" and (value.dim() != 2 or value.dense_dim() != 0):
            return self.unsupported(value)  # batched or hybrid: not sent
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "sparse CSR support is in beta"
            if layout == "coo":
                parts = [value._indices(), value._values()]
            elif layout == "csr":
                parts = [value.crow_indices(), value.col_indices(), value.values()]
            else:
                parts = [value.ccol_indices(), value.row_indices(), value.values()]
        node = {"t": "torch_sparse", "layout": layout, "size": list(value.shape), "grad": value.requires_grad}
        node["v"] = [self._torch(x.detach(), torch, depth + 1) for x in parts]
        if any(x["t"] != "torch_tensor" for x in node["v"]):  # values of a dtype not sent
            return self.unsupported(value)
        if layout == "coo":
            node["coalesced"] = bool(value.is_coalesced())
        return node


def _torch_dtype(name):
    import torch

    if not isinstance(name, str) or name not in TORCH_DTYPES:
        _fail(f"not a torch dtype this codec sends: {str(name)[:80]!r}")
    return {n: getattr(torch, n) for n in TORCH_DTYPES}[name]  # names from the table, not from the data


def _strides(strides, shape):
    """Strides from the data (None: contiguous): one non-negative int per dim, a layout without overlaps
    within the bound on its storage."""
    if strides is None:
        return None, shape
    if not isinstance(strides, list) or len(strides) != len(shape):
        _fail(f"strides that are not one int per dim: {str(strides)[:80]!r}")
    if not all(type(n) is int and 0 <= n < 1 << 62 for n in strides):
        _fail(f"strides that are not non-negative ints: {str(strides)[:80]!r}")
    sent, why = _layout(shape, strides)
    if sent is None:
        _fail(f"strides {str(strides)[:80]} {why}")
    return strides, sent


class TorchDecoding:
    """The Decoder's torch kinds (its `decode` and `array` do the rest)."""

    def _torch_tensor(self, node, depth):
        import torch

        dtype, shape = _torch_dtype(node.get("dtype")), _dims(node.get("shape"))
        strides, sent = _strides(node.get("stride"), shape)
        if sent != shape and math.prod(shape) > MAX_VIRTUAL_NUMEL:
            _fail(f"an expanded torch tensor of more than {MAX_VIRTUAL_NUMEL} elements")
        values = _numpy_of(self.array(node.get("k")), TORCH_DTYPES[node["dtype"]], sent)
        grad, param = node.get("grad"), node.get("param")
        if not isinstance(grad, bool) or not isinstance(param, bool):
            _fail("a torch tensor without its requires_grad and parameter flags")
        relaid = node.get("relaid", False)  # True: its layout was not sent (None: contiguous)
        if not isinstance(relaid, bool) or relaid and strides is not None:
            _fail("a torch tensor whose relaid flag does not match its strides")
        tensor = torch.from_numpy(values.copy()).to(dtype)
        if strides is not None:
            tensor = torch.empty_strided(sent, strides, dtype=dtype).copy_(tensor)
        if sent != shape:
            tensor = tensor.expand(shape)
        if param:
            tensor = torch.nn.Parameter(tensor, requires_grad=grad)
        else:
            tensor.requires_grad_(grad)
        if "gradient" in node:
            gradient = self._torch_part(node["gradient"], depth)
            if gradient.shape != tensor.shape or gradient.dtype != tensor.dtype:
                _fail("a gradient whose shape or dtype is not its tensor's")
            tensor.grad = gradient
        return tensor

    def _torch_part(self, node, depth):
        """A plain tensor (a gradient, a sparse tensor's indices or values) from a torch_tensor node."""
        if not isinstance(node, dict) or node.get("t") != "torch_tensor" or node.get("param") is not False:
            _fail("a part of a torch tensor that is not a plain tensor")
        if node.get("grad") is not False or "gradient" in node:
            _fail("a part of a torch tensor that is not a plain tensor (it requires grad)")
        return self.decode(node, depth)

    def _torch_sparse(self, node, depth):
        import torch

        layout, parts, size = node.get("layout"), node.get("v"), _dims(node.get("size"))
        if (
            layout not in SPARSE_LAYOUTS
            or not isinstance(parts, list)
            or len(parts) != SPARSE_LAYOUTS[layout]
        ):
            _fail("a sparse torch tensor without its layout and parts")
        numel = 1
        for n in size:
            numel *= n
        if numel > MAX_VIRTUAL_NUMEL:
            _fail(f"a sparse torch tensor of more than {MAX_VIRTUAL_NUMEL} elements")
        grad, coalesced = node.get("grad"), node.get("coalesced", False)
        if not isinstance(grad, bool) or not isinstance(coalesced, bool):
            _fail("a sparse torch tensor without its requires_grad and coalesced flags")
        *indices, values = (self._torch_part(x, depth) for x in parts)
        dtypes = ("int64",) if layout == "coo" else INDEX_DTYPES
        if any(str(x.dtype).removeprefix("torch.") not in dtypes for x in indices):
            _fail("sparse indices that are not int64 (or int32, compressed)")
        if layout == "coo":
            if indices[0].dim() != 2 or values.dim() < 1 or indices[0].shape[1] != values.shape[0]:
                _fail("sparse COO indices and values whose shapes do not match")
            sparse_dims = indices[0].shape[0]
            if sparse_dims > len(size) or list(values.shape[1:]) != size[sparse_dims:]:  # hybrid: dense last
                _fail("sparse COO indices and values that do not match its size")
            make = torch.sparse_coo_tensor
            tensor = make(indices[0], values, size, is_coalesced=coalesced, check_invariants=True)
        else:
            if any(x.dim() != 1 for x in indices) or values.dim() != 1 or len(size) != 2:
                _fail("a compressed sparse torch tensor that is not a matrix of vectors")
            make = torch.sparse_csr_tensor if layout == "csr" else torch.sparse_csc_tensor
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                tensor = make(*indices, values, size, check_invariants=True)
        return tensor.requires_grad_(grad)

    def _torch_return(self, node, depth):
        import torch

        name, items = node.get("name"), node.get("v")
        types = _return_types(torch)
        if not isinstance(name, str) or name not in types or not isinstance(items, list):
            _fail(f"not a torch.return_types type this codec sends: {str(name)[:80]!r}")
        if len(items) != types[name].n_sequence_fields:
            _fail(f"{len(items)} items for torch.return_types.{name}")
        return types[name](self._items(node, depth))

    def _torch_size(self, node, depth):
        import torch

        return torch.Size(_dims(node.get("v")))

    def _torch_dtype(self, node, depth):
        return _torch_dtype(node.get("v"))

    def _torch_device(self, node, depth):
        import torch

        text = node.get("v")
        if not isinstance(text, str) or not DEVICE.fullmatch(text):
            _fail(f"not a torch device: {str(text)[:80]!r}")
        return torch.device(text)
