"""Local models: the embedded SmolLM2 (from its PyPI wheel) or any model directory, served on this
machine behind the OpenAI API so the agents, the optimizer and the trainer reach it like any endpoint.

    with local_endpoint(home) as server:           # reuses a running server, else starts one
        agent = create_domain_agent(scaffold, model=server.spec, action_format="text")

Engines: `llamacpp` (xllamacpp, GGUF, light: the default for running agents) and `vllm` (HF
directories, LoRA adapters, exact token ids and log-probs: the engine of the training loop).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from recreate.errors import Arg
from recreate.local.embedded import (
    EMBEDDED_NAME,
    LocalModel,
    LocalModelArgumentError,
    LocalModelError,
    embedded_gguf,
    embedded_model,
    ensure_hf_model,
)
from recreate.local.keys import note_home
from recreate.local.server import (
    LocalServer,
    ServerInfo,
    free_port,
    healthy,
    running_servers,
)

if TYPE_CHECKING:
    from langchain_core.language_models import BaseChatModel

LOCAL_SPEC = "local"
ENGINES = ("llamacpp", "vllm")

__all__ = [
    "EMBEDDED_NAME",
    "ENGINES",
    "LOCAL_SPEC",
    "LocalModel",
    "LocalModelArgumentError",
    "LocalModelError",
    "LocalServer",
    "ServerInfo",
    "embedded_gguf",
    "embedded_model",
    "ensure_hf_model",
    "find_server",
    "local_agent_options",
    "local_chat_model",
    "local_endpoint",
    "start_server",
]


def resolve_local_model(home: Path, model: str | Path | None) -> LocalModel:
    """None: the embedded model; a .gguf file; or an HF model directory."""
    if model is None:
        return embedded_model(home)
    path = Path(model).expanduser()
    if path.is_file() and path.suffix == ".gguf":
        from recreate.local.gguf_export import policy_version_name

        return LocalModel(policy_version_name(path) or path.stem, gguf=path.absolute())
    if (path / "config.json").is_file():
        return LocalModel(path.name, hf_dir=path.absolute())
    raise LocalModelArgumentError(
        "{model}: not a .gguf file or an HF model directory (no config.json)",
        model=Arg("model", repr(str(model)), str(model)),
    )


def find_server(home: Path, engine: str | None = None, model: str | None = None) -> ServerInfo | None:
    """A running, answering server of `engine` serving `model` (default: any), if there is one."""
    for info in running_servers(home):
        if engine not in (None, info.engine) or model not in (None, info.model):
            continue
        if healthy(info.base_url, key=info.api_key):
            note_home(home)  # our clients (and local Ray workers) find its key whatever home they were given
            return info
    return None


def start_server(
    home: Path,
    *,
    engine: str = "llamacpp",
    model: str | Path | None = None,
    port: int | None = None,
    detach: bool = False,
    parallel: int = 4,
    ctx_per_slot: int = 4096,
    key: str | None = None,
) -> LocalServer:
    """Start a server for `model` (default: the embedded one) and return it once it answers; llama.cpp
    gives each of its `parallel` slots a context of `ctx_per_slot` tokens. It requires `key` (default: a
    new one each start; `keys.read_key_file` reads one kept across restarts)."""
    home = Path(home)
    local = resolve_local_model(home, model)
    port = port or free_port()
    if engine == "llamacpp":
        from recreate.local import llamacpp

        command = llamacpp.command(local, port=port, parallel=parallel, ctx_per_slot=ctx_per_slot)
        tool_calls, env = False, {}
    elif engine == "vllm":
        from recreate.local import vllm

        if local.hf_dir is None:
            local = LocalModel(local.name, local.gguf, ensure_hf_model(home))
        command, tool_calls, env = vllm.server_command(home, local, port=port), False, vllm.server_env()
    else:
        raise LocalModelError(f"unknown engine {engine!r}; choose one of {', '.join(ENGINES)}")
    server = LocalServer(
        command, engine=engine, model=local.name, port=port, home=home, tool_calls=tool_calls,
        detach=detach, env=env, key=key,
    )  # fmt: skip
    server.start()
    return server


@contextlib.contextmanager
def local_endpoint(
    home: Path, *, engine: str = "llamacpp", model: str | Path | None = None, log=print
) -> Iterator[ServerInfo]:
    """A running server for the run's duration: an answering one is reused (e.g. from `recreate model
    serve`), else one is started here and stopped when the block ends."""
    name = None if model is None else resolve_local_model(home, model).name
    running = find_server(home, engine, name or EMBEDDED_NAME)
    if running is not None:
        log(f"using the {engine} server already running at {running.base_url} ({running.model})")
        yield running
        return
    server = start_server(home, engine=engine, model=model)
    info = server.info
    log(f"started the {engine} server for {info.model} at {info.base_url} (log {info.log})")
    try:
        yield server.info
    finally:
        server.stop()


# Per-reply token caps on local models: a small model may otherwise talk until its context is full.
LOCAL_REPLY_TOKENS = {"agent": 384, "optimizer": 1024, "synthesis": 1536, "bootstrap": 1536}
LOCAL_TEMPERATURE = 0.7
# Sampling whose log-probs are the behaviour policy's, so any run's logs can be trained on: no
# truncation (llama.cpp's defaults are top-k 40, top-p 0.95, min-p 0.05), and `post_sampling_probs`
# makes llama.cpp return each sampled token's probability under softmax(logits / T) (its plain
# `logprob` is the T=1 one). The trainer then scores the same tempered distribution.
BEHAVIOUR_SAMPLING = {"top_k": 0, "top_p": 1.0, "min_p": 0.0, "post_sampling_probs": True}


def local_agent_options(info: ServerInfo) -> dict[str, Any]:
    """Domain-agent options for a local server: text actions when its chat template has no tool calls,
    a reply cap, and the sampled tokens' ids and log-probs recorded for fine-tuning."""
    return {
        "action_format": "tool_calls" if info.tool_calls else "text",
        "temperature": LOCAL_TEMPERATURE,
        "max_tokens": LOCAL_REPLY_TOKENS["agent"],
        "logprobs": True,
        "extra_body": dict(BEHAVIOUR_SAMPLING),
    }


def local_chat_model(info: ServerInfo, role: str) -> BaseChatModel:
    """A chat model on a local server for an optimizer role (optimizer, synthesis, bootstrap)."""
    from recreate.models import make_chat_model

    model = make_chat_model(
        info.spec, role=role, temperature=LOCAL_TEMPERATURE, max_tokens=LOCAL_REPLY_TOKENS[role]
    )
    # what the optimizer's "auto" protocol reads: a chat template without tool calls gets the structured one
    model.metadata = {**(model.metadata or {}), "tool_calls": info.tool_calls}
    return model
