"""`create_domain_agent`: a scaffold + a model -> a LangGraph graph, one line in any LangGraph app."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

from langchain_core.language_models import BaseChatModel
from langgraph.graph.state import CompiledStateGraph

from recreate.agent.graph import DomainAgent
from recreate.agent.local import LocalAgent, is_local_spec
from recreate.config import load_settings
from recreate.local.vllm import served_model, with_token_logprobs
from recreate.models import UsageLedger, make_chat_model, parse_spec
from recreate.sandbox import resolve_sandbox
from recreate.sandbox.base import Sandbox, SandboxSpec
from recreate.scaffold import Scaffold, load_scaffold


def resolve_model(
    model: str | BaseChatModel,
    *,
    logprobs: bool | None = None,
    temperature: float | None = None,
    max_tokens: int | None = None,
    extra_body: dict[str, Any] | None = None,
) -> tuple[BaseChatModel, str | None]:
    """(chat model, provider name). A spec string goes through `make_chat_model`; with `logprobs` on an
    OpenAI-compatible endpoint (vLLM) the completion's token ids are requested too. `logprobs=None`
    (default): requested when the endpoint is a vLLM server. `max_tokens` caps each reply (a small model
    may otherwise talk until its context is full); `extra_body` adds server-specific sampling fields
    (e.g. llama.cpp's top_k, min_p, post_sampling_probs)."""
    if isinstance(model, BaseChatModel):
        chat, provider = model, None
    else:
        chat, provider = _chat_model(model, bool(logprobs), temperature, max_tokens, extra_body)
    if logprobs is None and served_model(chat) is not None:
        chat = with_token_logprobs(chat)
    return chat, provider


def _chat_model(
    model: str,
    logprobs: bool,
    temperature: float | None,
    max_tokens: int | None,
    extra_body: dict[str, Any] | None,
) -> tuple[BaseChatModel, str | None]:
    settings = load_settings()
    provider, _, base_url = parse_spec(model, settings.base_url)
    extra: dict[str, Any] = {} if max_tokens is None else {"max_tokens": max_tokens}
    body = dict(extra_body or {})
    if logprobs and base_url and provider in (None, "openai"):
        body["return_tokens_as_token_ids"] = True
    if body:
        extra["extra_body"] = body
    chat = make_chat_model(
        model,
        base_url=settings.base_url,
        logprobs=logprobs,
        temperature=temperature,
        max_retries=settings.max_retries,
        timeout=settings.request_timeout_s,
        **extra,
    )
    return chat, provider or ("openai" if base_url else None)


def build_domain_agent(
    scaffold: Scaffold | str | Path,
    *,
    model: str | BaseChatModel,
    sandbox: str | Sandbox = "bwrap",
    sandbox_spec: SandboxSpec | None = None,
    action_format: str | None = None,
    ledger: UsageLedger | None = None,
    trajectory_dir: str | Path | None = None,
    record: bool = True,
    logprobs: bool | None = None,
    temperature: float | None = None,
    max_tokens: int | None = None,
    extra_body: dict[str, Any] | None = None,
    domain: str | None = None,
) -> DomainAgent:
    """The agent runtime behind the graph (the rollout runner uses it to pass prepared sessions).
    On a vLLM endpoint the trajectories record token ids and log-probs (unless `logprobs=False`) and the
    policy version (base model or LoRA adapter) that answered."""
    loaded = load_scaffold(scaffold)
    chat, provider = resolve_model(
        model, logprobs=logprobs, temperature=temperature, max_tokens=max_tokens, extra_body=extra_body
    )
    served = served_model(chat)
    directory = None
    if record:
        directory = Path(trajectory_dir) if trajectory_dir else load_settings().home / "trajectories"
    return DomainAgent(
        loaded,
        chat,
        sandbox=resolve_sandbox(sandbox),
        sandbox_spec=sandbox_spec,
        action_format=action_format,
        ledger=ledger,
        trajectory_dir=directory,
        provider=provider,
        domain=domain,
        policy=served.policy if served else None,
    )


def create_domain_agent(
    scaffold: Scaffold | str | Path,
    *,
    model: str | BaseChatModel,
    sandbox: str | Sandbox = "bwrap",
    name: str | None = None,
    checkpointer: Any = None,
    store: Any = None,
    tool_messages: bool = False,
    **options: Any,
) -> CompiledStateGraph | LocalAgent:
    """A compiled LangGraph graph that runs the scaffold's agent on `{"task": ...}` (or on the last
    human message of `messages`) and returns `messages` with its answer appended as one AIMessage named
    after the scaffold, plus `submission`, `exit_status` and `trajectory_id`. Its prompts and steps stay
    out of `messages` (they are in the trajectory); `tool_messages=True` adds its tool calls and their
    results before the answer.

    `scaffold`: a Scaffold, a scaffold directory, or a stored ref ("runs/x/scaffolds/ds1000@v7").
    `model`: a spec for `make_chat_model` ("openai:gpt-4.1-mini", "MODEL@http://host:8000/v1") or any
    LangChain chat model. `sandbox`: "bwrap" (default), "docker", "local" or a Sandbox object.
    No checkpointer by default, so the graph inherits its parent's when used as a node or subgraph.
    `options`: sandbox_spec, action_format ("tool_calls" | "text"), ledger, trajectory_dir, record,
    logprobs, temperature, max_tokens, extra_body, domain (see `build_domain_agent`).
    `model="local"` (the embedded model) or `"local:PATH"` (a .gguf file or HF directory) returns a
    context manager instead, which serves the model while its block runs and gives the graph (see
    `recreate.agent.local`): `with create_domain_agent(scaffold, model="local") as agent: ...`
    """
    if is_local_spec(model):
        build = functools.partial(
            create_domain_agent, scaffold, sandbox=sandbox, name=name, checkpointer=checkpointer,
            store=store, tool_messages=tool_messages,
        )  # fmt: skip
        return LocalAgent(str(model), build, options)
    agent = build_domain_agent(scaffold, model=model, sandbox=sandbox, **options)
    return agent.compile(name=name, checkpointer=checkpointer, store=store, tool_messages=tool_messages)
