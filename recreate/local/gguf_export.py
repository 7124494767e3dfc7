"""Write trained Llama weights as a GGUF file the llama.cpp engine serves.

The trainer works on the HF copy of the embedded model; to sample from what it trained, the weights go
back into a GGUF. Everything that is not a weight (architecture, tokenizer, chat template) is copied
from a template GGUF of the same architecture (the embedded model's own file), so only the tensors are
written: in f32 by default, which holds the trainer's fp32 weights exactly (the base's Q4_1 weights
dequantised), so the engine samples from the same policy the trainer scores — up to kernel arithmetic.

llama.cpp stores the q/k projections with the rotary halves interleaved per head; transformers undoes
that when it loads a GGUF, and `_interleave_rotary` redoes it here.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from recreate.local.embedded import LocalModelError

_LAYER = re.compile(r"blk\.(\d+)\.(.+)\.weight")
_LAYER_NAMES = {
    "attn_norm": "input_layernorm",
    "ffn_norm": "post_attention_layernorm",
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
}
_GLOBAL_NAMES = {
    "token_embd.weight": "model.embed_tokens.weight",
    "output_norm.weight": "model.norm.weight",
    "output.weight": "lm_head.weight",
}
_SKIPPED_KEYS = ("GGUF.", "general.architecture", "general.file_type", "general.quantization_version")


def hf_name(gguf_name: str) -> str:
    """The HF Llama parameter that a GGUF tensor holds."""
    if gguf_name in _GLOBAL_NAMES:
        return _GLOBAL_NAMES[gguf_name]
    match = _LAYER.fullmatch(gguf_name)
    if match is None or match.group(2) not in _LAYER_NAMES:
        raise LocalModelError(f"GGUF tensor {gguf_name!r} has no Llama counterpart; only Llama models export")
    return f"model.layers.{match.group(1)}.{_LAYER_NAMES[match.group(2)]}.weight"


def _interleave_rotary(weight: np.ndarray, heads: int) -> np.ndarray:
    rows = weight.shape[0]
    return (
        weight.reshape(heads, 2, rows // heads // 2, *weight.shape[1:]).swapaxes(1, 2).reshape(weight.shape)
    )


def _field_value(field: Any) -> Any:
    return field.contents()


_VERSION_NAME = re.compile(r"[\w.\-]+\+ft\d+-[0-9a-f]{8}")  # `ServedPolicy`'s: <base>+ft<n>-<weights hash>


def policy_version_name(path: Path) -> str | None:
    """The policy version a GGUF of `ServedPolicy.publish` holds (its `general.name`), else None: served
    under it, its runs say which weights answered (a file name, `v1.gguf`, is the same in every run)."""
    try:
        import gguf

        field = gguf.GGUFReader(path).fields.get("general.name")
        name = str(_field_value(field)) if field is not None else ""
    except (ImportError, OSError, ValueError):  # not readable here: the caller names it by its file
        return None
    return name if _VERSION_NAME.fullmatch(name) else None


def export_gguf(
    state_dict: Mapping[str, Any], template: Path, out: Path, *, name: str | None = None, dtype: str = "f32"
) -> Path:
    """Write `state_dict` (HF Llama names; torch tensors or arrays) as a GGUF shaped like `template`."""
    import gguf

    if dtype not in ("f32", "f16"):
        raise LocalModelError(f"dtype {dtype!r}: choose f32 or f16")
    reader = gguf.GGUFReader(template)
    arch = str(_field_value(reader.fields["general.architecture"]))
    if arch != "llama":
        raise LocalModelError(f"{template}: architecture {arch!r}; only llama GGUFs can be exported")
    heads = int(_field_value(reader.fields["llama.attention.head_count"]))
    kv_heads = int(_field_value(reader.fields["llama.attention.head_count_kv"]))
    out.parent.mkdir(parents=True, exist_ok=True)
    partial = out.with_name(out.name + ".partial")
    writer = gguf.GGUFWriter(partial, arch=arch)
    for key, field in reader.fields.items():
        if key.startswith(_SKIPPED_KEYS):
            continue
        value = _field_value(field)
        if key == "general.name" and name:
            value = name
        sub_type = field.types[1] if len(field.types) > 1 else None
        writer.add_key_value(key, value, field.types[0], sub_type=sub_type)
    writer.add_file_type(gguf.LlamaFileType.ALL_F32 if dtype == "f32" else gguf.LlamaFileType.MOSTLY_F16)
    writer.add_quantization_version(gguf.GGML_QUANT_VERSION)
    tied = "lm_head.weight" not in state_dict
    for tensor in reader.tensors:
        source = hf_name(tensor.name)
        if source not in state_dict:
            if tied and source == "lm_head.weight":
                source = "model.embed_tokens.weight"
            else:
                raise LocalModelError(f"the trained weights lack {source} (for GGUF tensor {tensor.name})")
        weight = _to_numpy(state_dict[source])
        if tensor.name.endswith("attn_q.weight"):
            weight = _interleave_rotary(weight, heads)
        elif tensor.name.endswith("attn_k.weight"):
            weight = _interleave_rotary(weight, kv_heads)
        if dtype == "f16" and weight.ndim == 2:  # norms stay f32, as llama.cpp's own converter keeps them
            weight = weight.astype(np.float16)
        writer.add_tensor(tensor.name, np.ascontiguousarray(weight))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    partial.replace(out)
    return out


def _to_numpy(value: Any) -> np.ndarray:
    if hasattr(value, "detach"):
        return value.detach().to("cpu").float().numpy()
    return np.asarray(value, dtype=np.float32)


def load_weights(model_dir: Path) -> dict[str, np.ndarray]:
    """The safetensors weights of an HF model directory, by parameter name."""
    from safetensors.numpy import load_file

    files = sorted(Path(model_dir).glob("*.safetensors"))
    if not files:
        raise LocalModelError(f"{model_dir}: no *.safetensors weights to export")
    state: dict[str, np.ndarray] = {}
    for file in files:
        state.update(load_file(file))
    return state


def export_model_dir(model_dir: Path, template: Path, out: Path, *, dtype: str = "f32") -> Path:
    """An HF Llama directory (e.g. a merged fine-tune) -> GGUF."""
    return export_gguf(load_weights(model_dir), template, out, name=Path(model_dir).name, dtype=dtype)
