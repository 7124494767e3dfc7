"""The vLLM engine: the training loop's server (exact token ids, behaviour log-probs, LoRA at runtime).

vLLM runs from its own environment (see `vllm_env`) as `python -m vllm.entrypoints.openai.api_server`,
managed like any local server (`recreate.local.server.LocalServer`). The command line serves an HF model
directory with LoRA enabled and log-probs taken after temperature/top-p (`processed_logprobs`: the
distribution tokens were sampled from, which is what a trainer's behaviour policy is). Adapters the
trainer writes are loaded into the running server under a name per policy version (`load_adapter`), and
requests name the adapter as their `model`. `vllm_command` is the one place that knows how vLLM
starts; `tapo serve` (`tapo_backend.serve`) uses it too.

An agent pointed at a vLLM endpoint is told so by `served_model`: it then asks for token ids and
log-probs of every generated token (`with_token_logprobs`) and records which policy answered it.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import httpx

from recreate.local.keys import auth_headers
from recreate.local.vllm_env import VLLMEnvError, setup_vllm_env, vllm_python

if TYPE_CHECKING:
    from langchain_core.language_models import BaseChatModel

ENGINE = "vllm"
BASE_POLICY = "base"  # the policy name of the served base model (no adapter)
DEFAULT_LORA_RANK = 16  # adapters of up to this rank load at runtime (the trainer's default r=16)
DEFAULT_MAX_MODEL_LEN = 4096
# On CPU, vLLM sizes its KV cache from this fraction; its default (0.9) fails on a shared machine
CPU_MEMORY_UTILIZATION = 0.2
RUNTIME_LORA_ENV = {"VLLM_ALLOW_RUNTIME_LORA_UPDATING": "True"}
# our guard in front of every route (vLLM's own key check covers /v1/* only): guard/recreate_guard.py
GUARD_DIR = Path(__file__).resolve().parent / "guard"
GUARD = "recreate_guard.Guard"
REQUEST_TIMEOUT_S = 120.0  # loading an adapter reads its weights
VLLM_SERVER_MODULE = "vllm.entrypoints.openai.api_server"
# vLLM accepts only these values for --max-lora-rank; an adapter of rank r needs the next one up.
VLLM_LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)

__all__ = [
    "BASE_POLICY",
    "ServeError",
    "ServedModel",
    "VLLMEnvError",
    "VLLMError",
    "adapter_rank",
    "load_adapter",
    "served_model",
    "server_command",
    "server_env",
    "setup_vllm_env",
    "unload_adapter",
    "vllm_command",
    "vllm_python",
    "with_token_logprobs",
]


class ServeError(RuntimeError):
    """A vLLM server could not be built, started or made ready; the message says why (its log tail)."""


def adapter_rank(adapter: str | Path) -> int:
    config = Path(adapter) / "adapter_config.json"
    if not config.is_file():
        raise ServeError(f"{adapter} is not a LoRA adapter directory (no adapter_config.json)")
    return int(json.loads(config.read_text(encoding="utf-8"))["r"])


def max_lora_rank(rank: int) -> int:
    """The smallest `--max-lora-rank` vLLM accepts that holds adapters of rank `rank`."""
    allowed = next((r for r in VLLM_LORA_RANKS if r >= rank), None)
    if allowed is None:
        raise ServeError(f"LoRA rank {rank} is above vLLM's largest max-lora-rank {VLLM_LORA_RANKS[-1]}")
    return allowed


def vllm_command(
    model: str | Path,
    *,
    adapter: str | Path | None = None,
    adapter_name: str = "tapo",
    lora_rank: int | None = None,
    host: str = "127.0.0.1",
    port: int = 8000,
    python: str = "python",
    served_model_name: str | None = None,
    extra_args: Sequence[str] = (),
) -> list[str]:
    """The command line of a vLLM OpenAI-compatible server for `model` (+ a LoRA adapter); it runs with
    `guard_env()` in its environment.

    `lora_rank` enables LoRA without a startup adapter, for adapters of up to that rank loaded later at
    runtime (`load_adapter`); with `adapter` the larger of the two ranks counts."""
    command = [python, "-m", VLLM_SERVER_MODULE, "--model", str(model), "--host", host, "--port", str(port)]
    # its CORS default is "*": a page in the user's browser could read its answers; only its own origin.
    # The guard (on PYTHONPATH: `guard_env`) refuses requests addressed to another name and, given a
    # key, requests without it.
    command += ["--allowed-origins", json.dumps([f"http://{host}:{port}"]), "--middleware", GUARD]
    if served_model_name:
        command += ["--served-model-name", served_model_name]
    if adapter is not None or lora_rank is not None:
        rank = max(adapter_rank(adapter) if adapter is not None else 1, lora_rank or 1)
        command.append("--enable-lora")
        if adapter is not None:
            command += ["--lora-modules", f"{adapter_name}={Path(adapter).resolve()}"]
        command += ["--max-lora-rank", str(max_lora_rank(rank))]
    return [*command, *extra_args]


class VLLMError(ServeError):
    """A vLLM server refused a request or cannot be reached; the message names the fix."""


class HFModel(Protocol):
    name: str  # the name the server answers to
    hf_dir: Path | None


def has_gpu() -> bool:
    return Path("/dev/nvidia0").exists()


def guard_env(env: dict[str, str] | None = None) -> dict[str, str]:
    """`env` plus what every vLLM server of ours needs: our guard importable (first on PYTHONPATH)."""
    env = dict(env or {})
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(GUARD_DIR), env.get("PYTHONPATH")) if p)
    return env


def server_env() -> dict[str, str]:
    """Environment for the training loop's server: the guard, and adapters loaded and unloaded as it runs."""
    return guard_env(RUNTIME_LORA_ENV)


def server_command(
    home: str | Path | None,
    model: HFModel,
    *,
    port: int,
    host: str = "127.0.0.1",
    python: str | None = None,
    lora_rank: int = DEFAULT_LORA_RANK,
    max_model_len: int = DEFAULT_MAX_MODEL_LEN,
    cpu: bool | None = None,
    extra_args: Sequence[str] = (),
) -> list[str]:
    """The command line of a vLLM server for `model`'s HF directory, answering to `model.name`, with
    LoRA enabled for runtime adapters of rank <= `lora_rank`. `cpu` (default: no GPU here) adds fp32 and
    the memory fraction a CPU machine needs. `python`: default `vllm_python(home)`."""
    if model.hf_dir is None or not (Path(model.hf_dir) / "config.json").is_file():
        raise VLLMError(
            f"{model.name}: vLLM serves HF model directories (with config.json); got {model.hf_dir}"
        )
    args = ["--max-model-len", str(max_model_len), "--logprobs-mode", "processed_logprobs"]
    if (not has_gpu()) if cpu is None else cpu:
        # fp32: the trainer's precision, so server and trainer log-probs agree on the same tokens
        args += ["--dtype", "float32", "--gpu-memory-utilization", str(CPU_MEMORY_UTILIZATION)]
    return vllm_command(
        Path(model.hf_dir).absolute(),
        lora_rank=lora_rank,
        host=host,
        port=port,
        python=python or vllm_python(home),
        served_model_name=model.name,
        extra_args=[*args, *extra_args],
    )


# -- runtime LoRA --------------------------------------------------------------------------------------


def _root(base_url: str) -> str:
    """http://host:port from an OpenAI base URL (http://host:port/v1)."""
    url = base_url.rstrip("/")
    return url[: -len("/v1")] if url.endswith("/v1") else url


def _post(base_url: str, route: str, body: dict[str, Any], what: str) -> None:
    url = f"{_root(base_url)}/v1/{route}"
    try:
        response = httpx.post(url, json=body, headers=auth_headers(base_url), timeout=REQUEST_TIMEOUT_S)
    except httpx.HTTPError as exc:
        raise VLLMError(
            f"{what}: no vLLM server answers at {base_url} ({type(exc).__name__}: {exc})"
        ) from exc
    if response.status_code == 404:
        raise VLLMError(
            f"{what}: {base_url} has no runtime LoRA API; start vLLM with --enable-lora and "
            "VLLM_ALLOW_RUNTIME_LORA_UPDATING=True (`recreate model serve --engine vllm` does)"
        )
    if response.status_code >= 400:
        raise VLLMError(f"{what}: the server answered {response.status_code}: {_error_text(response)}")


def _error_text(response: httpx.Response) -> str:
    try:
        body = response.json()
    except ValueError:
        return " ".join(response.text.split())[:300]
    error = body.get("error", body) if isinstance(body, dict) else body
    message = error.get("message", error) if isinstance(error, dict) else error
    return " ".join(str(message).split())[:300]


def load_adapter(base_url: str, name: str, path: str | Path) -> str:
    """Load the LoRA adapter at `path` into the running server as model `name` (no restart); returns
    `name`. VLLMError when the server lacks runtime LoRA, already serves `name`, or its max LoRA rank is
    below the adapter's."""
    path = Path(path).absolute()
    rank = adapter_rank(path)  # ServeError with the path when it is not an adapter directory
    what = f"loading adapter {name!r} (rank {rank}) from {path}"
    if name in _model_ids(base_url):
        raise VLLMError(f"{what}: the server already serves a model named {name!r}; name each policy version")
    _post(base_url, "load_lora_adapter", {"lora_name": name, "lora_path": str(path)}, what)
    return name


def unload_adapter(base_url: str, name: str) -> None:
    """Remove adapter `name` from the running server (VLLMError if it serves no such adapter)."""
    _post(base_url, "unload_lora_adapter", {"lora_name": name}, f"unloading adapter {name!r}")


# -- what an endpoint is -------------------------------------------------------------------------------


@dataclass(frozen=True)
class ServedModel:
    """A model a vLLM server answers to: the base model or a LoRA adapter on it (a policy version)."""

    name: str
    parent: str | None  # the base model of an adapter; None for the base model itself

    @property
    def policy(self) -> str:
        return self.name if self.parent else BASE_POLICY


def _models(base_url: str, timeout_s: float = 5.0) -> list[dict[str, Any]] | None:
    """GET /v1/models; None when the endpoint does not answer it."""
    try:
        url = f"{base_url.rstrip('/')}/models"
        response = httpx.get(url, headers=auth_headers(base_url), timeout=timeout_s)
        response.raise_for_status()
        data = response.json().get("data")
    except (httpx.HTTPError, ValueError, AttributeError):
        return None
    return [entry for entry in data or [] if isinstance(entry, dict)]


def _model_ids(base_url: str) -> set[str]:
    return {str(entry.get("id")) for entry in _models(base_url) or []}


_IS_VLLM: dict[str, bool] = {}  # base URL -> answer; an endpoint does not change engines


def _is_vllm(base_url: str) -> bool:
    """vLLM lists its models as owned by "vllm". An answer is remembered, so hosted endpoints are not
    asked again for every agent; an endpoint that did not answer (not up yet) is asked next time."""
    if base_url not in _IS_VLLM:
        models = _models(base_url, timeout_s=2.0)
        if models is None:
            return False
        _IS_VLLM[base_url] = any(entry.get("owned_by") == ENGINE for entry in models)
    return _IS_VLLM[base_url]


def endpoint_url(chat: BaseChatModel) -> str | None:
    url = getattr(chat, "openai_api_base", None)
    return str(url) if url else None


def model_name(chat: BaseChatModel) -> str | None:
    name = getattr(chat, "model_name", None) or getattr(chat, "model", None)
    return str(name) if name else None


def served_model(chat: BaseChatModel) -> ServedModel | None:
    """What the vLLM server behind `chat` serves under `chat`'s model name; None for other endpoints."""
    url, name = endpoint_url(chat), model_name(chat)
    if not url or not name or not _is_vllm(url):
        return None
    for entry in _models(url) or []:
        if entry.get("id") == name:
            parent = entry.get("parent")
            return ServedModel(name, str(parent) if parent else None)
    return ServedModel(name, None)


def with_token_logprobs(chat: BaseChatModel) -> BaseChatModel:
    """`chat` asking for the log-prob and id of every generated token (vLLM sends each token back as
    "token_id:N"; the recorder stores them with the step)."""
    extra = dict(getattr(chat, "extra_body", None) or {}) | {"return_tokens_as_token_ids": True}
    return chat.model_copy(update={"logprobs": True, "extra_body": extra})
