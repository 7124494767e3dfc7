"""Serve a trained model back to the agents with vLLM's OpenAI-compatible server.

vLLM is not a dependency of this package: it runs as a separate process, usually from its own
environment (`--python /path/to/vllm-env/bin/python`), and agents reach it over the OpenAI API
(`base_url`). A LoRA adapter is served on top of its base model (`--enable-lora --lora-modules`), or
merged into it first with `merge_lora` for a plain model directory. The command line comes from
`recreate.local.vllm.vllm_command`, the one home of how vLLM is started (the training loop's engine too).
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import httpx

from recreate.local.server import server_env
from recreate.local.vllm import ServeError, adapter_rank, guard_env


def default_log(port: int) -> Path:
    """Where a server's log goes unless told: the home's logs folder (never the working directory)."""
    from recreate.config import load_settings

    return load_settings().home / "logs" / f"vllm-{port}.log"


class VLLMServer:
    """Start, health-check and stop a server: `with VLLMServer(vllm_command(...)) as s: s.base_url`."""

    def __init__(
        self,
        command: Sequence[str],
        *,
        host: str = "127.0.0.1",
        port: int = 8000,
        log_path: str | Path | None = None,
        env: dict[str, str] | None = None,
        startup_timeout_s: float = 600.0,
    ) -> None:
        self.command = list(command)
        self.host, self.port = host, port
        self.log_path = Path(log_path) if log_path else default_log(port)
        self.env = env
        self.startup_timeout_s = startup_timeout_s
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def base_url(self) -> str:
        """OpenAI-compatible base URL for `openai.OpenAI(base_url=...)` / `ChatOpenAI`."""
        return f"{self.url}/v1"

    def start(self) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("wb") as log:
            # own process group, so stop() also ends the engine's worker processes
            self.process = subprocess.Popen(
                self.command,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=server_env(guard_env(self.env)),  # an allow-list (no keys or tokens of ours), our guard
                start_new_session=True,
            )

    def log_tail(self, lines: int = 20) -> str:
        if not self.log_path.is_file():
            return ""
        return "\n".join(self.log_path.read_text(encoding="utf-8", errors="replace").splitlines()[-lines:])

    def wait_ready(self) -> None:
        """Block until GET /health answers 200; ServeError if the process dies or time runs out."""
        deadline = time.monotonic() + self.startup_timeout_s
        while time.monotonic() < deadline:
            if self.process is None or self.process.poll() is not None:
                code = None if self.process is None else self.process.returncode
                raise ServeError(
                    f"vLLM server exited with code {code} before being ready:\n{self.log_tail()}"
                )
            try:
                if httpx.get(f"{self.url}/health", timeout=2.0).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
        self.stop()
        raise ServeError(f"vLLM server not ready after {self.startup_timeout_s:.0f} s:\n{self.log_tail()}")

    def models(self) -> list[str]:
        """Model ids the server answers to (the base model and each LoRA adapter name)."""
        response = httpx.get(f"{self.base_url}/models", timeout=10.0)
        response.raise_for_status()
        return [entry["id"] for entry in response.json()["data"]]

    def wait(self) -> int:
        if self.process is None:
            raise ServeError("server not started")
        return self.process.wait()

    def stop(self, timeout_s: float = 30.0) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        os.killpg(self.process.pid, signal.SIGTERM)
        try:
            self.process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()

    def __enter__(self) -> VLLMServer:
        self.start()
        try:
            self.wait_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()


def merge_lora(adapter_dir: str | Path, out_dir: str | Path, base_model: str | None = None) -> Path:
    """Fold a LoRA adapter into its base model's weights and save a plain HF model directory."""
    from peft import PeftConfig, PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    adapter_dir, out_dir = Path(adapter_dir), Path(out_dir)
    adapter_rank(adapter_dir)  # a clear error when this is not an adapter
    base_name = base_model or PeftConfig.from_pretrained(str(adapter_dir)).base_model_name_or_path
    base = AutoModelForCausalLM.from_pretrained(base_name, dtype="auto")
    merged = PeftModel.from_pretrained(base, str(adapter_dir)).merge_and_unload()
    merged.save_pretrained(str(out_dir))
    tokenizer_source = str(adapter_dir) if (adapter_dir / "tokenizer_config.json").is_file() else base_name
    AutoTokenizer.from_pretrained(tokenizer_source).save_pretrained(str(out_dir))
    return out_dir
