"""Graph factory for `langgraph dev` / LangGraph Studio: the evolve loop as a graph (see langgraph.json).

Everything comes from the run's configurable values or the environment:
`seed` (RECREATE_SEED), `domain` (RECREATE_DOMAIN), `data` (RECREATE_DATA), `evaluator`
(RECREATE_EVALUATOR), `model` (RECREATE_MODEL), `optimizer_model` (RECREATE_OPTIMIZER_MODEL),
`rounds`, `batch_size`; the gate's level is the operator's alone (RECREATE_GATE_ALPHA, default 0.025:
a client may not loosen what its versions must show). The server brings its own checkpointer; the graph
is compiled without one.

A run's configurable values come from a client, so they are held to what the server allows (see
recreate.agent.client_settings): models on the server's own endpoint, seed and data inside its working
directory or home, and no evaluator (it runs code: the operator sets RECREATE_EVALUATOR).
"""

from __future__ import annotations

import asyncio
import math
import os
from pathlib import Path
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.graph.state import CompiledStateGraph

from recreate.agent.client_settings import ClientCheck, client_model, client_path, client_scaffold
from recreate.config import Settings, load_settings

REPO = Path(__file__).resolve().parents[2]


def _operator_only(key: str, value: Any, settings: Settings) -> Any:
    raise ValueError(
        f"{key}: an evaluator runs code on the server, so a run may not name one; leave it out (the "
        "server's operator sets RECREATE_EVALUATOR)"
    )


def _count(key: str, value: Any, settings: Settings) -> int:
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return value
    raise ValueError(f"{key} {value!r} is not a count; pass a whole number above 0")


def _env_count(value: Any, key: str, default: int) -> int:
    """A count from the run (checked by `_count`), else RECREATE_<KEY> (a whole number above 0), else
    `default`."""
    if value is None or isinstance(value, int):
        return default if value is None else value
    name = f"RECREATE_{key.upper()}"
    if not value.strip().isdigit() or int(value) < 1:
        raise ValueError(f"{name}={value!r} is not a count; set it to a whole number above 0")
    return int(value)


def _env_level() -> dict[str, float]:
    """The gate's level from RECREATE_GATE_ALPHA, when the operator set one."""
    from recreate.evaluation.stats import LEAST_ALPHA

    value = os.environ.get("RECREATE_GATE_ALPHA")
    if value is None:
        return {}
    try:
        level = float(value)
    except ValueError:
        level = math.nan
    if not LEAST_ALPHA <= level < 0.5:
        raise ValueError(
            f"RECREATE_GATE_ALPHA={value!r} is not a level; set it from {LEAST_ALPHA} to below 0.5"
        )
    return {"gate_alpha": level}


def _domain(key: str, value: Any, settings: Settings) -> str:
    from recreate.domains.registry import BUILTIN_DOMAINS

    if isinstance(value, str) and value in BUILTIN_DOMAINS:
        return value
    raise ValueError(f"{key} {value!r} is not a domain; pass one of {', '.join(BUILTIN_DOMAINS)}")


async def make_evolve_graph(config: RunnableConfig) -> CompiledStateGraph:
    """Built in a worker thread: the server calls factories on its event loop (see agent/server.py)."""
    return await asyncio.to_thread(evolve_graph, config)


def evolve_graph(config: RunnableConfig) -> CompiledStateGraph:
    from recreate.domains import get_domain
    from recreate.optimizer import EvolveConfig, ReCreateOptimizer

    configurable = (config or {}).get("configurable") or {}
    settings = load_settings()

    def value(key: str, check: ClientCheck, default: Any = None) -> Any:
        given = configurable.get(key)
        if given is not None:
            return check(f"configurable.{key}", given, settings)
        return os.environ.get(f"RECREATE_{key.upper()}") or default

    model = value("model", client_model, settings.model)
    if not model:
        raise ValueError("no model: set RECREATE_MODEL (e.g. openai:gpt-4.1-mini) or pass configurable.model")
    evaluator = value("evaluator", _operator_only)
    seed = value("seed", client_scaffold, REPO / "scaffolds" / "minimal")
    data = value("data", client_path, REPO / "examples" / "custom_domain" / "tasks.jsonl")
    loop = EvolveConfig(rounds=_env_count(value("rounds", _count), "rounds", 2),
                        batch_size=_env_count(value("batch_size", _count), "batch_size", 3),
                        **_env_level())  # fmt: skip
    optimizer_model = value("optimizer_model", client_model, model)
    domain = get_domain(
        value("domain", _domain, "jsonl"), data=data, **({"evaluator": evaluator} if evaluator else {})
    )
    opt = ReCreateOptimizer(
        optimizer_model=optimizer_model, agent_model=model, sandbox=settings.sandbox, config=loop
    )
    return opt.as_graph(
        seed=seed,
        domain=domain,
        trainset=domain.tasks("train"),
        valset=domain.tasks("val"),
    )
