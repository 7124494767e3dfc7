from __future__ import annotations

import json
import os
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
import torch

from recreate.local.vllm import GUARD, ServeError, vllm_command
from tapo_backend.serve import VLLMServer, merge_lora

from .conftest import save_tiny_model

# Stands in for vLLM where it is not installed: the same module path and flags, a real HTTP server.
FAKE_API_SERVER = textwrap.dedent(
    """
    import argparse, json
    from http.server import BaseHTTPRequestHandler, HTTPServer

    parser = argparse.ArgumentParser()
    parser.add_argument("--model", required=True)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--served-model-name")
    parser.add_argument("--enable-lora", action="store_true")
    parser.add_argument("--lora-modules", nargs="*", default=[])
    parser.add_argument("--max-lora-rank", type=int, choices=[1, 8, 16, 32, 64, 128, 256, 320, 512])
    parser.add_argument("--allowed-origins")
    parser.add_argument("--middleware", action="append")
    args = parser.parse_args()
    models = [args.served_model_name or args.model] + [m.split("=", 1)[0] for m in args.lora_modules]

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):
            body = b"" if self.path == "/health" else json.dumps(
                {"data": [{"id": m} for m in models]}).encode()
            self.send_response(200 if self.path in ("/health", "/v1/models") else 404)
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    print("serving", models, flush=True)
    HTTPServer((args.host, args.port), Handler).serve_forever()
    """
)


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture
def fake_vllm(tmp_path: Path) -> dict[str, str]:
    package = tmp_path / "fake" / "vllm" / "entrypoints" / "openai"
    package.mkdir(parents=True)
    for folder in (package, package.parent, package.parent.parent):
        (folder / "__init__.py").write_text("")
    (package / "api_server.py").write_text(FAKE_API_SERVER)
    return {"PYTHONPATH": str(tmp_path / "fake")}


def _adapter(directory: Path, rank: int) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "adapter_config.json").write_text(json.dumps({"r": rank, "peft_type": "LORA"}))
    return directory


def test_command_for_a_merged_model() -> None:
    command = vllm_command("/models/merged", port=8123, served_model_name="agent", python="/env/bin/python")
    assert command == [
        "/env/bin/python",
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        "/models/merged",
        "--host",
        "127.0.0.1",
        "--port",
        "8123",
        "--allowed-origins",
        '["http://127.0.0.1:8123"]',
        "--middleware",
        GUARD,
        "--served-model-name",
        "agent",
    ]


def test_command_for_an_adapter_rounds_the_rank_up(tmp_path: Path) -> None:
    adapter = _adapter(tmp_path / "final", rank=12)
    command = vllm_command(
        "base-model", adapter=adapter, adapter_name="mine", extra_args=["--dtype", "float32"]
    )
    lora = command[command.index("--enable-lora") :]
    assert lora == [
        "--enable-lora",
        "--lora-modules",
        f"mine={adapter.resolve()}",
        "--max-lora-rank",
        "16",
        "--dtype",
        "float32",
    ]
    with pytest.raises(ServeError, match="above vLLM's largest"):
        vllm_command("base", adapter=_adapter(tmp_path / "huge", rank=1024))
    with pytest.raises(ServeError, match="not a LoRA adapter"):
        vllm_command("base", adapter=tmp_path)


def test_merge_lora_equals_the_adapter(tmp_path: Path) -> None:
    from peft import LoraConfig, PeftModel, get_peft_model
    from transformers import AutoModelForCausalLM

    base_dir = save_tiny_model(tmp_path / "base")
    torch.manual_seed(1)
    lora = LoraConfig(r=4, lora_alpha=8, target_modules="all-linear", init_lora_weights=False)
    get_peft_model(AutoModelForCausalLM.from_pretrained(base_dir), lora).save_pretrained(tmp_path / "adapter")

    merged_dir = merge_lora(tmp_path / "adapter", tmp_path / "merged")
    ids = torch.randint(0, 200, (2, 12))
    with torch.no_grad():
        base = AutoModelForCausalLM.from_pretrained(base_dir).eval()
        base_logits = base(ids).logits
        adapted = PeftModel.from_pretrained(base, tmp_path / "adapter").eval()(ids).logits
        merged = AutoModelForCausalLM.from_pretrained(merged_dir).eval()(ids).logits
    torch.testing.assert_close(merged, adapted, rtol=1e-4, atol=1e-4)
    assert not torch.allclose(merged, base_logits, atol=1e-3)
    assert (merged_dir / "tokenizer_config.json").is_file()
    assert not (merged_dir / "adapter_config.json").exists()


def test_server_lifecycle(tmp_path: Path, fake_vllm: dict[str, str]) -> None:
    port = _free_port()
    adapter = _adapter(tmp_path / "final", rank=8)
    command = vllm_command("base-model", adapter=adapter, port=port, python=sys.executable)
    server = VLLMServer(
        command, port=port, log_path=tmp_path / "vllm.log", env=fake_vllm, startup_timeout_s=60
    )
    with server:
        assert server.base_url == f"http://127.0.0.1:{port}/v1"
        assert server.models() == ["base-model", "tapo"]
        pid = server.process.pid
    assert server.process.poll() is not None
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


def test_server_that_dies_reports_its_log(tmp_path: Path, fake_vllm: dict[str, str]) -> None:
    command = vllm_command("m", port=_free_port(), python=sys.executable, extra_args=["--no-such-flag"])
    server = VLLMServer(command, log_path=tmp_path / "vllm.log", env=fake_vllm, startup_timeout_s=60)
    with pytest.raises(ServeError, match="unrecognized arguments: --no-such-flag"), server:
        pass


VLLM_CPU_ARGS = ["--max-model-len", "256", "--dtype", "float32", "--gpu-memory-utilization", "0.2"]


def _vllm_ready_model_and_adapter(directory: Path) -> tuple[Path, Path]:
    """A tiny Llama vLLM accepts (head_dim 64) and a non-trivial LoRA adapter for it."""
    from peft import LoraConfig, get_peft_model
    from transformers import LlamaConfig, LlamaForCausalLM

    from .conftest import make_tokenizer

    tokenizer = make_tokenizer()
    config = LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=128, intermediate_size=256, num_hidden_layers=2,
        num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=512,
        bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )  # fmt: skip
    torch.manual_seed(0)
    LlamaForCausalLM(config).save_pretrained(directory / "model")
    tokenizer.save_pretrained(directory / "model")
    lora = LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], init_lora_weights=False)
    base = LlamaForCausalLM.from_pretrained(directory / "model")
    get_peft_model(base, lora).save_pretrained(directory / "adapter")
    return directory / "model", directory / "adapter"


def _chat(server: VLLMServer, model: str) -> Any:
    from openai import OpenAI

    client = OpenAI(base_url=server.base_url, api_key="unused")
    return client.chat.completions.create(
        model=model, messages=[{"role": "user", "content": "hi"}], max_tokens=5, logprobs=True
    )


@pytest.mark.slow
@pytest.mark.timeout(1200)  # a vLLM CPU start takes minutes on a busy machine
def test_real_vllm_serves_a_merged_model(tmp_path: Path, vllm_python: str) -> None:
    """With vLLM installed in its own environment: the merged model answers chat completions."""
    _, adapter = _vllm_ready_model_and_adapter(tmp_path)
    merged = merge_lora(adapter, tmp_path / "merged")
    port = _free_port()
    python = vllm_python
    command = vllm_command(
        merged, port=port, python=python, served_model_name="tiny", extra_args=VLLM_CPU_ARGS
    )
    with VLLMServer(command, port=port, log_path=tmp_path / "vllm.log", startup_timeout_s=400) as server:
        assert server.models() == ["tiny"]
        assert _chat(server, "tiny").choices[0].logprobs is not None


@pytest.mark.slow
@pytest.mark.timeout(1200)  # a vLLM CPU start takes minutes on a busy machine
def test_real_vllm_serves_a_lora_adapter(tmp_path: Path, vllm_python: str) -> None:
    model, adapter = _vllm_ready_model_and_adapter(tmp_path)
    port = _free_port()
    python = vllm_python
    command = vllm_command(model, adapter=adapter, port=port, python=python, served_model_name="tiny",
                           extra_args=VLLM_CPU_ARGS)  # fmt: skip
    with VLLMServer(command, port=port, log_path=tmp_path / "vllm.log", startup_timeout_s=400) as server:
        assert server.models() == ["tiny", "tapo"]
        assert _chat(server, "tapo").choices[0].logprobs is not None
