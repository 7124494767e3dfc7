"""Graph factory for `langgraph dev` / LangGraph Studio: the evolve loop as a graph (see langgraph.json).

Everything comes from the run's configurable values or the environment:
`seed` (RECREATE_SEED), `domain` (RECREATE_DOMAIN), `data` (RECREATE_DATA), `evaluator`
(RECREATE_EVALUATOR), `model` (RECREATE_MODEL), `optimizer_model` (RECREATE_OPTIMIZER_MODEL),
`rounds`, `batch_size`. The server brings its own checkpointer; the graph is compiled without one.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.graph.state import CompiledStateGraph

from recreate.config import load_settings

REPO = Path(__file__).resolve().parents[2]


def _value(configurable: dict[str, Any], key: str, default: Any = None) -> Any:
    return configurable.get(key) or os.environ.get(f"RECREATE_{key.upper()}") or default


async def make_evolve_graph(config: RunnableConfig) -> CompiledStateGraph:
    """Built in a worker thread: the server calls factories on its event loop (see agent/server.py)."""
    return await asyncio.to_thread(evolve_graph, config)


def evolve_graph(config: RunnableConfig) -> CompiledStateGraph:
    from recreate.domains import get_domain
    from recreate.optimizer import EvolveConfig, ReCreateOptimizer

    configurable = (config or {}).get("configurable") or {}
    settings = load_settings()
    model = _value(configurable, "model", settings.model)
    if not model:
        raise ValueError("no model: set RECREATE_MODEL (e.g. openai:gpt-4.1-mini) or pass configurable.model")
    evaluator = _value(configurable, "evaluator")
    domain = get_domain(
        _value(configurable, "domain", "jsonl"),
        data=_value(configurable, "data", REPO / "examples" / "custom_domain" / "tasks.jsonl"),
        **({"evaluator": evaluator} if evaluator else {}),
    )
    opt = ReCreateOptimizer(
        optimizer_model=_value(configurable, "optimizer_model", model),
        agent_model=model,
        sandbox=settings.sandbox,
        config=EvolveConfig(
            rounds=int(configurable.get("rounds", 2)), batch_size=int(configurable.get("batch_size", 3))
        ),
    )
    return opt.as_graph(
        seed=_value(configurable, "seed", REPO / "scaffolds" / "minimal"),
        domain=domain,
        trainset=domain.tasks("train"),
        valset=domain.tasks("val"),
    )
