"""Graph factory for `langgraph dev` / LangGraph Server (see langgraph.json at the repo root).

The scaffold, model and sandbox come from the run's context (`scaffold`, `model`, `sandbox`: the graph's
context schema, which Studio shows as the run's settings), else its configurable values, else the
environment (RECREATE_SCAFFOLD, RECREATE_MODEL, RECREATE_SANDBOX), so one deployment serves any stored
version: `{"context": {"scaffold": "runs/x/scaffolds/ds1000@v7"}}`. The server brings its own
checkpointer; the graph is compiled without one.

What a client sends (the context, the configurable values) is held to what the server allows
(recreate.agent.client_settings): the server's own model endpoint, an isolating sandbox, a scaffold inside
its working directory or home. The environment's values are the operator's and stay as they are.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.outputs import ChatResult
from langchain_core.runnables import RunnableConfig
from langgraph.graph.state import CompiledStateGraph
from langgraph_sdk.runtime import ServerRuntime

from recreate.agent.client_settings import ClientCheck, client_model, client_sandbox, client_scaffold
from recreate.agent.factory import create_domain_agent
from recreate.agent.local import is_local_spec
from recreate.agent.state import context_value
from recreate.config import load_settings

DEFAULT_SCAFFOLD = Path(__file__).resolve().parents[2] / "scaffolds" / "minimal"
NO_MODEL = "no model: set RECREATE_MODEL (e.g. openai:gpt-4.1-mini) or pass the run's context.model"
SERVE_LOCAL = (
    "model {model!r}: a LangGraph server does not start model servers of its own; serve the model "
    "(`recreate model serve --detach`) and set RECREATE_MODEL to the NAME@URL it prints"
)


class _NoModel(BaseChatModel):
    """Stands in while the server only reads the graph (schemas, drawing) and no model is configured."""

    @property
    def _llm_type(self) -> str:
        return "none"

    def bind_tools(self, tools: Any, **kwargs: Any) -> _NoModel:
        return self

    def _generate(
        self, messages: Any, stop: Any = None, run_manager: Any = None, **kwargs: Any
    ) -> ChatResult:
        raise ValueError(NO_MODEL)


GraphBuilder = Callable[[str, "str | BaseChatModel", str], CompiledStateGraph]


def server_factory(build: GraphBuilder) -> Callable[[RunnableConfig, ServerRuntime], Any]:
    """A langgraph.json factory around `build(scaffold, model, sandbox)`. The server calls factories on its
    event loop; building reads files and probes the sandbox (blocking calls, which `langgraph dev` refuses
    there), so it happens in a worker thread. A run's context is there only when the server builds the
    graph to execute a run."""

    async def factory(config: RunnableConfig, runtime: ServerRuntime) -> CompiledStateGraph:
        run = runtime.execution_runtime
        context = run.context if run is not None else None
        executing = run is not None
        return await asyncio.to_thread(lambda: build(*graph_settings(config, context, executing=executing)))

    return factory


def domain_agent_graph(scaffold: str, model: str | BaseChatModel, sandbox: str) -> CompiledStateGraph:
    return create_domain_agent(scaffold, model=model, sandbox=sandbox, name="domain_agent")


make_graph = server_factory(domain_agent_graph)


def graph_settings(
    config: RunnableConfig, context: Any = None, *, executing: bool = True
) -> tuple[str, str | BaseChatModel, str]:
    """(scaffold, model, sandbox) of a graph the server builds: the run's context, else its configurable
    values (both checked: a client sent them), else the environment. Without a model, a graph built only
    to be read gets a stand-in."""
    configurable = (config or {}).get("configurable") or {}
    settings = load_settings()

    def setting(key: str, check: ClientCheck, default: Any) -> Any:
        for where, value in (
            ("context", context_value(context, key)),
            ("configurable", configurable.get(key)),
        ):
            if value is not None:
                return check(f"{where}.{key}", value, settings)
        return default

    scaffold = setting(
        "scaffold", client_scaffold, os.environ.get("RECREATE_SCAFFOLD") or str(DEFAULT_SCAFFOLD)
    )
    model = setting("model", client_model, settings.model)
    if not model and executing:
        raise ValueError(NO_MODEL)
    if is_local_spec(model):  # create_domain_agent would hand back a context manager, not a graph
        raise ValueError(SERVE_LOCAL.format(model=model))
    return str(scaffold), model or _NoModel(), setting("sandbox", client_sandbox, settings.sandbox)
