"""LangChain tools over the experience store, for the meta-agent (the ReCreate optimizer).

The flags of `experience_tools` switch tools off for ablations of the optimizer.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Collection
from typing import Any

from langchain_core.tools import BaseTool, ToolException
from pydantic import BaseModel, Field

from recreate.experience.catalog import FILTER_KEYS
from recreate.experience.inspection import ExperienceInspector
from recreate.experience.schema import SchemaError
from recreate.experience.store import ExperienceStore
from recreate.experience.views import DEFAULT_BUDGET, VIEWS
from recreate.structured_tool import make_tool

_FILTERS_HELP = f"exact-match filters; keys: {', '.join(FILTER_KEYS)} (outcome is passed|failed|unevaluated)"


class ListArgs(BaseModel):
    filters: dict[str, str | int] = Field(default_factory=dict, description=_FILTERS_HELP)
    limit: int = Field(50, ge=1, le=500, description="show at most this many (newest)")


class ReadArgs(BaseModel):
    trajectory_id: str
    view: str = Field(
        "index",
        description=f"one of {', '.join(VIEWS)}; "
        "index lists files, commands, errors and tests with step numbers",
    )


class SearchArgs(BaseModel):
    query: str = Field(description="what to look for, in words (semantic search)")
    filters: dict[str, str | int] = Field(
        default_factory=dict, description=_FILTERS_HELP + "; for steps also error_type"
    )
    k: int = Field(5, ge=1, le=50)
    scope: str = Field("steps", description="steps | summaries | memory")


class RunSearchArgs(SearchArgs):
    """Search without step documents (the `no_trajectory` ablation)."""

    scope: str = Field("summaries", description="summaries | memory")


class CompareArgs(BaseModel):
    trajectory_ids: list[str] = Field(min_length=2, description="runs to compare, ideally of the same task")


def _as_tool_error(fn: Callable[..., str]) -> Callable[..., str]:
    @functools.wraps(fn)
    def wrapped(*args: Any, **kwargs: Any) -> str:
        try:
            return fn(*args, **kwargs)
        except (KeyError, ValueError, SchemaError) as exc:
            raise ToolException(str(exc).strip("'\"")) from exc

    return wrapped


def experience_tools(
    store: ExperienceStore,
    *,
    allow_trajectories: bool = True,
    allow_search: bool = True,
    allow_evaluation: bool = True,
    budget_tokens: int = DEFAULT_BUDGET,
    hidden_tasks: Collection[str] = (),
) -> list[BaseTool]:
    """Tools bound to `store`. Ablations: `allow_trajectories=False` drops read_trajectory and compare and
    step-level search (the steps hold the same actions and outputs), `allow_search=False` drops
    search_experience, `allow_evaluation=False` hides evaluation feedback. Runs of `hidden_tasks` (held-out
    validation/test tasks) are invisible to every tool."""
    inspector = ExperienceInspector(
        store,
        budget_tokens=budget_tokens,
        allow_evaluation=allow_evaluation,
        allow_steps=allow_trajectories,
        hidden_tasks=hidden_tasks,
    )
    budget_note = f" Output is capped at about {budget_tokens} tokens."
    specs: list[tuple[str, str, type[BaseModel], Callable[..., str]]] = [
        (
            "list_experiences",
            "List stored agent runs (trajectories) with task, scaffold version, outcome and step count.",
            ListArgs,
            inspector.list_experiences,
        )
    ]
    if allow_search:
        specs.append(
            (
                "search_experience",
                "Semantic search over past steps (action + output + error), run summaries or memory items; "
                "returns trajectory id, task, step and a snippet per hit."
                if allow_trajectories
                else "Semantic search over run summaries or memory items; returns id, task and a snippet.",
                SearchArgs if allow_trajectories else RunSearchArgs,
                inspector.search_experience,
            )
        )
    if allow_trajectories:
        specs += [
            (
                "read_trajectory",
                "Read one run through a compact view: index (start here), summary, steps(a,b), "
                "window(step,w), failures, submission, evaluation.",
                ReadArgs,
                inspector.read_trajectory,
            ),
            (
                "compare",
                "Compare runs of the same task: where the successful and the failed runs diverge.",
                CompareArgs,
                inspector.compare,
            ),
        ]
    return [
        make_tool(
            _as_tool_error(fn),
            name=name,
            description=description + budget_note,
            args=schema,
            handle_tool_error=True,
        )
        for name, description, schema, fn in specs
    ]
