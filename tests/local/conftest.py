"""Fixtures for the local-model tests: the embedded model served by the real llama.cpp engine, the
vLLM environment, a stand-in vLLM server. Skipped only where the `local` extra is not installed, or
(for vLLM) where its environment cannot be built; the vLLM environment is cached under the repo's
`.recreate/` (ignored by git), so a second run reuses it."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from recreate.local import ServerInfo, start_server
from tests.conftest import require_local_extra


@pytest.fixture(scope="module")
def embedded_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, ServerInfo]]:
    """(home, server info) of a llama.cpp server for the embedded model, stopped after the module."""
    require_local_extra()
    home = tmp_path_factory.mktemp("local-home")
    server = start_server(home, engine="llamacpp", parallel=3)
    try:
        yield home, server.info
    finally:
        server.stop()


@pytest.fixture(scope="session")
def embedded_hf_dir(hf_model: Path) -> Path:
    return hf_model


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
