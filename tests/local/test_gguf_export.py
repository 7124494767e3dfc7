"""Trained weights go back into a GGUF that llama.cpp serves: exactly the trainer's weights, and the
engine's log-probs agree with the trainer's on the same tokens."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from recreate.local import LocalModelError
from recreate.local.gguf_export import _interleave_rotary, hf_name
from recreate.local.keys import auth_headers

pytestmark = pytest.mark.slow


def test_gguf_names_map_to_llama_parameters():
    assert hf_name("token_embd.weight") == "model.embed_tokens.weight"
    assert hf_name("blk.12.attn_k.weight") == "model.layers.12.self_attn.k_proj.weight"
    assert hf_name("blk.0.ffn_norm.weight") == "model.layers.0.post_attention_layernorm.weight"
    with pytest.raises(LocalModelError, match="no Llama counterpart"):
        hf_name("blk.0.ssm_conv1d.weight")


def test_rotary_interleave_is_what_transformers_undoes_when_it_loads_a_gguf():
    from transformers.modeling_gguf_pytorch_utils import LlamaTensorProcessor

    undo = LlamaTensorProcessor(config={"num_attention_heads": 9, "num_key_value_heads": 3})
    q = np.random.default_rng(0).normal(size=(9 * 64, 16)).astype(np.float32)
    k = q[: 3 * 64]
    assert np.array_equal(undo.process(_interleave_rotary(q, 9), "blk.0.attn_q.weight").weights, q)
    assert np.array_equal(undo.process(_interleave_rotary(k, 3), "blk.0.attn_k.weight").weights, k)
    assert not np.array_equal(_interleave_rotary(q, 9), q)


def test_an_exported_model_serves_the_trainers_log_probs(local_extra, hf_model, tmp_path):
    """The HF copy exported to f32 GGUF: llama.cpp's log-probs of its own samples (T=1, no truncation)
    match the HF model's on the same tokens (measured mean |Δ| ≈ 0.0015 nats)."""
    import httpx
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from recreate.local import LocalModel, embedded_gguf, llamacpp
    from recreate.local.gguf_export import export_model_dir
    from recreate.local.server import LocalServer, free_port

    out = export_model_dir(hf_model, embedded_gguf(), tmp_path / "exported.gguf")
    port = free_port()
    messages = [{"role": "user", "content": "What is 12 + 30? Answer with a number."}]
    command = llamacpp.command(LocalModel("exported", gguf=out), port=port, parallel=1)
    with LocalServer(
        command, engine="llamacpp", model="exported", port=port, home=tmp_path, tool_calls=False
    ) as info:
        body = {"model": "exported", "messages": messages, "max_tokens": 24, "logprobs": True, "seed": 3,
                "temperature": 1.0, "top_k": 0, "top_p": 1.0, "min_p": 0.0}  # fmt: skip
        content = httpx.post(
            f"{info.base_url}/chat/completions", json=body, headers=auth_headers(info.base_url), timeout=120
        ).json()
    logged = content["choices"][0]["logprobs"]["content"]
    ids, served = [e["id"] for e in logged], [e["logprob"] for e in logged]
    tokenizer = AutoTokenizer.from_pretrained(hf_model)
    model = AutoModelForCausalLM.from_pretrained(hf_model, dtype=torch.float32)
    prompt = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    prompt_ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]
    with torch.no_grad():
        logits = model(torch.tensor([prompt_ids + ids])).logits[0]
    trainer = torch.log_softmax(logits.float(), -1)[len(prompt_ids) - 1 : -1].gather(
        1, torch.tensor(ids)[:, None]
    )
    gaps = (trainer.squeeze(1) - torch.tensor(served)).abs()
    assert len(ids) > 5
    assert gaps.mean() < 0.01 and gaps.max() < 0.05


@pytest.mark.parametrize(
    ("written", "served"),
    [
        ("smollm2-135m-instruct+ft1-057f10b8", "smollm2-135m-instruct+ft1-057f10b8"),  # a policy version
        ("SmolLM2 135M Instruct", "v1"),  # any other GGUF: its file's name
        (None, "v1"),
    ],
)
def test_a_published_policy_gguf_is_served_under_its_version_name(
    tmp_path: Path, written: str | None, served: str
) -> None:
    import gguf

    from recreate.local import resolve_local_model

    path = tmp_path / "run" / "v1.gguf"  # every run's first fine-tuned version is a v1.gguf
    path.parent.mkdir()
    writer = gguf.GGUFWriter(path, arch="llama")
    if written is not None:
        writer.add_name(written)
    writer.add_tensor("token_embd.weight", np.zeros((2, 4), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    model = resolve_local_model(tmp_path, path)
    assert model.name == served and model.gguf == path
