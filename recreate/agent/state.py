"""The domain agent's schemas: what a caller sends and gets back, what the graph keeps, its run context.

A parent graph (or LangGraph Studio) sees only `AgentInput` and `AgentOutput`: the user's conversation
goes in, one answer comes back. The run's own conversation (system prompt, worked examples, the rendered
task, every model reply and observation) lives in the private `run_messages` channel and in the
trajectory, never in the parent's `messages`: `answer_text` and `tool_turns` make what the caller gets.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any, NotRequired

from langchain_core.messages import AIMessage, AnyMessage, BaseMessage, ToolMessage
from langgraph.graph import MessagesState
from langgraph.graph.message import add_messages
from pydantic import Field
from pydantic.json_schema import SkipJsonSchema
from typing_extensions import TypedDict  # pydantic builds their JSON schemas only from this one on 3.11


class AgentInput(TypedDict, total=False):
    """What the agent reads: a `task`, or else the last human message of `messages`."""

    messages: Annotated[list[AnyMessage], add_messages]
    task: str


class AgentOutput(TypedDict, total=False):
    """What the agent writes back: its answer appended to `messages` as one AIMessage named after the
    scaffold (preceded by its tool calls and their results when the graph was compiled with
    `tool_messages=True`), the submission, how the run ended, and the id of its trajectory."""

    messages: Annotated[list[AnyMessage], add_messages]
    submission: str | None
    exit_status: str | None
    trajectory_id: str


class AgentState(MessagesState):
    """Everything the graph keeps. The rollout runner (which compiles the graph with `public=False`)
    also passes `task_id`, `seed`, `run_id`, `trajectory_id` and `metadata` and reads the bookkeeping."""

    task: NotRequired[str]
    task_id: NotRequired[str | None]
    seed: NotRequired[int | None]
    run_id: NotRequired[str | None]
    metadata: NotRequired[dict[str, Any]]
    trajectory_id: NotRequired[str]
    trajectory_path: NotRequired[str | None]
    submission: NotRequired[str | None]
    exit_status: NotRequired[str | None]
    error: NotRequired[str | None]
    steps: NotRequired[int]
    format_errors: NotRequired[int]
    cost_usd: NotRequired[float]
    run_messages: NotRequired[Annotated[list[AnyMessage], add_messages]]  # this run's own conversation
    records: NotRequired[list[dict[str, Any]]]  # Step records (schema v1), one per model call
    started_at: NotRequired[str]
    started_ts: NotRequired[float]


@dataclass
class AgentContext:
    """Per-run context (never checkpointed). `scaffold`, `model` and `sandbox` are read by the LangGraph
    server's graph factory (langgraph.json -> recreate/agent/server.py), which builds the agent from them;
    a graph built in Python already has its own. `session`: a sandbox session the caller prepared (e.g.
    with the task's files), used instead of a fresh one."""

    scaffold: Annotated[
        str | None, Field(description="scaffold directory or stored ref, e.g. runs/x/scaffolds/ds1000@v7")
    ] = None
    model: Annotated[
        str | None, Field(description="model spec, e.g. openai:gpt-4.1-mini or NAME@http://host:8000/v1")
    ] = None
    sandbox: Annotated[str | None, Field(description="sandbox backend: bwrap, docker or local")] = None
    session: SkipJsonSchema[Any] = None  # a recreate.sandbox.base.Session (not JSON: Python callers only)


def context_value(context: Any, key: str) -> Any:
    """`key` of the run context: an AgentContext, a parent graph's own context (a subgraph inherits it:
    a dataclass, a pydantic model or a dict) or none."""
    if isinstance(context, dict):
        return context.get(key)
    return getattr(context, key, None)


def answer_text(state: dict[str, Any]) -> str:
    """The content of the agent's answer to its caller: the submission, else why there is none."""
    if state.get("submission") is not None:
        return str(state["submission"])
    why = state.get("error") or "no submission"
    return f"The agent stopped without an answer ({state['exit_status']}: {why})."


def tool_turns(run: list[BaseMessage], task_marker: str, speaker: str) -> list[BaseMessage]:
    """The run's tool calls and their results after the task message: only replies whose every call
    was answered, so the caller's conversation stays valid for chat APIs (each tool message answers
    a call of the message before it)."""
    start = next((i + 1 for i, m in enumerate(run) if m.id == task_marker), len(run))
    turns = run[start:]
    answered = {m.tool_call_id for m in turns if isinstance(m, ToolMessage)}
    shown: list[BaseMessage] = []
    kept: set[str] = set()
    for message in turns:
        if isinstance(message, AIMessage) and message.tool_calls:
            ids = {call["id"] for call in message.tool_calls}
            if ids <= answered and not message.invalid_tool_calls:
                kept |= ids
                shown.append(message.model_copy(update={"name": speaker}))
        elif isinstance(message, ToolMessage) and message.tool_call_id in kept:
            shown.append(message)
    return shown
