"""Graph factory for `langgraph dev` / LangGraph Server (see langgraph.json at the repo root).

The scaffold, model and sandbox come from the run's configurable values (`scaffold`, `model`,
`sandbox`) or from the environment (RECREATE_SCAFFOLD, RECREATE_MODEL, RECREATE_SANDBOX), so one
deployment serves any stored version: `{"configurable": {"scaffold": "runs/x/scaffolds/ds1000@v7"}}`.
The server brings its own checkpointer; the graph is compiled without one.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

from langchain_core.runnables import RunnableConfig
from langgraph.graph.state import CompiledStateGraph

from recreate.agent.factory import create_domain_agent
from recreate.config import load_settings

DEFAULT_SCAFFOLD = Path(__file__).resolve().parents[2] / "scaffolds" / "minimal"


async def make_graph(config: RunnableConfig) -> CompiledStateGraph:
    """The server calls factories on its event loop; building reads files and probes the sandbox (blocking
    calls, which `langgraph dev` refuses there), so it happens in a worker thread."""
    return await asyncio.to_thread(domain_agent_graph, config)


def domain_agent_graph(config: RunnableConfig) -> CompiledStateGraph:
    configurable = (config or {}).get("configurable") or {}
    settings = load_settings()
    scaffold = configurable.get("scaffold") or os.environ.get("RECREATE_SCAFFOLD") or str(DEFAULT_SCAFFOLD)
    model = configurable.get("model") or settings.model
    if not model:
        raise ValueError("no model: set RECREATE_MODEL (e.g. openai:gpt-4.1-mini) or pass configurable.model")
    sandbox = configurable.get("sandbox") or settings.sandbox
    return create_domain_agent(scaffold, model=model, sandbox=sandbox, name="domain_agent")
