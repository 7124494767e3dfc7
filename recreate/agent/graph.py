"""The domain agent: a small LangGraph loop built from a Scaffold.

    start ──► step ──► step ... ──► finish

`start` renders the system and instance prompts and gets a sandbox session (the one the caller passes in
the run context, or a fresh one the agent owns); each `step` checks the limits, calls the model once and
runs the reply's action in the session, feeding the observation (or a format error) back; `finish`
closes what the agent opened and writes the trajectory. Each step is also appended to a step log, and
an interrupted node writes the trajectory before re-raising, so a crash never loses the steps so far.
One node per step rather than separate model and tool nodes halves the graph's overhead per step.
The graph is compiled without a checkpointer unless one is given, so it drops into a parent graph as a
node and the parent's checkpointer applies. The run's own conversation stays in a private channel (see
`recreate.agent.state`): the parent's `messages` get the agent's answer, never its prompts.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import re
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    HumanMessage,
    RemoveMessage,
    SystemMessage,
    ToolMessage,
)
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import REMOVE_ALL_MESSAGES
from langgraph.graph.state import CompiledStateGraph
from langgraph.runtime import Runtime
from langgraph.types import Command

from recreate.agent.actions import example_messages, parse_reply, runtime_instructions
from recreate.agent.recorder import TrajectoryRecorder, model_info, step_record
from recreate.agent.state import (
    AgentContext,
    AgentInput,
    AgentOutput,
    AgentState,
    answer_text,
    context_value,
    tool_turns,
)
from recreate.agent.toolbox import ActionError, ToolBox, tool_specs
from recreate.experience.schema import SandboxInfo, Trajectory, load_trajectory, new_id, utcnow
from recreate.models import BudgetExceeded, LedgerCallback, UsageLedger, is_context_overflow
from recreate.redact import redact
from recreate.sandbox.base import Sandbox, SandboxSpec, Session
from recreate.scaffold.model import Scaffold
from recreate.scaffold.render import render_instance, render_system

log = logging.getLogger(__name__)
ONE_CALL = "Not executed: call one tool per reply; only the first call of your reply ran."


def _node(method: Callable[[DomainAgent, AgentState], dict[str, Any]]) -> Callable[..., Command]:
    """An exception in a node ends the run with exit_status "error" (through `finish`, which writes the
    trajectory); a teardown (KeyboardInterrupt, cancellation) writes it as "interrupted" and re-raises."""

    @functools.wraps(method)
    def node(self: DomainAgent, state: AgentState) -> Command:
        try:
            return _next(method(self, state))
        except Exception as exc:
            return _next(_failure(state, exc))
        except BaseException as exc:
            self.save_interrupted(dict(state), exc)
            raise

    return node


def _next(update: dict[str, Any]) -> Command:
    """Route by the update itself (a Command), which spares the graph a full state read per step.
    The messages a step adds to the run go to `messages` too, so a caller streaming the agent's updates
    sees its steps; `finish` takes them out of `messages` again."""
    if "run_messages" in update:
        added = [m for m in update["run_messages"] if not isinstance(m, RemoveMessage)]
        for message in added:
            message.id = message.id or uuid.uuid4().hex  # one id in both channels
        update["messages"] = added
    status = update.get("exit_status", "running")
    return Command(update=update, goto="step" if status == "running" else "finish")


def _failure(state: dict[str, Any], exc: Exception) -> dict[str, Any]:
    error = redact(f"{type(exc).__name__}: {exc}")
    log.warning("domain agent run %s failed: %s", state.get("trajectory_id"), error)
    log.debug("domain agent run %s failed", state.get("trajectory_id"), exc_info=exc)
    return {"exit_status": "error", "error": error}


class DomainAgent:
    """Holds what the graph's nodes share: scaffold, model, sandbox, recorder, open sessions."""

    def __init__(
        self,
        scaffold: Scaffold,
        model: BaseChatModel,
        *,
        sandbox: Sandbox,
        sandbox_spec: SandboxSpec | None = None,
        action_format: str | None = None,
        ledger: UsageLedger | None = None,
        trajectory_dir: Path | None = None,
        provider: str | None = None,
        domain: str | None = None,
        policy: str | None = None,
    ):
        self.scaffold = scaffold
        self.sandbox = sandbox
        self.sandbox_spec = sandbox_spec or SandboxSpec()
        self.action_format = action_format or scaffold.action_format
        self.limits = scaffold.limits
        info = model_info(model, provider, policy)
        self.model_name = info.name
        self.endpoint = getattr(model, "openai_api_base", None)  # prices: a local endpoint's calls are free
        self.recorder = TrajectoryRecorder(
            scaffold=scaffold.scaffold_ref(),
            domain=domain or scaffold.domain,
            model=info,
            sandbox=SandboxInfo(backend=sandbox.name, image=self.sandbox_spec.image),
            directory=trajectory_dir,
        )
        # the prompts see the format the agent runs with; the recorded ref stays the stored version's
        shown = scaffold.model_copy(update={"action_format": self.action_format})
        self.shown_scaffold = shown
        self.system_text = "\n\n".join(
            p for p in (render_system(shown), runtime_instructions(shown, self.action_format)) if p
        )
        bound: Any = model
        if self.action_format == "tool_calls":
            bound = model.bind_tools(
                [{"type": "function", "function": spec} for spec in tool_specs(scaffold)]
            )
        if ledger is not None:
            bound = bound.with_config(callbacks=[LedgerCallback.for_model(ledger, "agent", model)])
        self.llm = bound
        self.pass_seed = "seed" in getattr(type(model), "model_fields", {})
        self._sessions: dict[str, tuple[ToolBox, bool]] = {}  # trajectory id -> (toolbox, owned)
        self._lock = threading.Lock()

    # -- graph ---------------------------------------------------------------------------------
    def compile(
        self,
        *,
        name: str | None = None,
        checkpointer: Any = None,
        store: Any = None,
        public: bool = True,
        tool_messages: bool = False,
    ) -> CompiledStateGraph:
        """The agent's graph. `public` (default): it reads AgentInput and writes AgentOutput, what a
        parent graph or LangGraph Studio sees; `public=False` takes and returns every key of AgentState
        (the rollout runner's: it passes task ids and seeds and reads the step records).
        `tool_messages`: the answer in `messages` comes after the run's tool calls and their results."""
        if tool_messages and self.action_format != "tool_calls":
            raise ValueError(
                f"tool_messages=True needs action_format='tool_calls': this agent runs with "
                f"{self.action_format!r}, which makes no tool calls (stream with subgraphs=True to watch "
                "its steps)"
            )
        schemas = {"input_schema": AgentInput, "output_schema": AgentOutput} if public else {}
        graph = StateGraph(AgentState, context_schema=AgentContext, **schemas)
        graph.add_node("start", self.start, destinations=("step", "finish"))
        graph.add_node("step", self.step, destinations=("step", "finish"))
        graph.add_node("finish", functools.partial(self.finish, tool_messages=tool_messages))
        graph.add_edge(START, "start")
        graph.add_edge("finish", END)
        return graph.compile(name=name or self.scaffold.name, checkpointer=checkpointer, store=store)

    # -- nodes ---------------------------------------------------------------------------------
    def start(self, state: AgentState, runtime: Runtime[AgentContext]) -> Command:
        task = state.get("task") or _last_human_text(state.get("messages", []))
        fresh = not state.get("steps") and state.get("exit_status") in (None, "running")
        tid = state.get("trajectory_id") if fresh and state.get("trajectory_id") else new_id("t-")
        update: dict[str, Any] = {
            "trajectory_id": tid, "task": task, "submission": None, "exit_status": "running", "error": None,
            "steps": 0, "format_errors": 0, "cost_usd": 0.0, "records": [], "started_at": utcnow(),
            "started_ts": time.time(), "run_messages": [RemoveMessage(id=REMOVE_ALL_MESSAGES)],
        }  # fmt: skip
        try:
            if not task:
                raise ValueError("no task: pass {'task': ...} or end the input messages with a human message")
            self._attach(tid, context_value(runtime.context, "session"))
            instance = render_instance(self.shown_scaffold, task, task_id=state.get("task_id") or "")
            examples = example_messages(
                self.shown_scaffold.examples,
                self.action_format,
                lambda text: render_instance(self.shown_scaffold, text, task_id="example"),
            )
            run = [SystemMessage(self.system_text), *examples, HumanMessage(instance, id=f"{tid}:task")]
            update["run_messages"] = [*update["run_messages"], *run]
            self.recorder.begin(state | update, run)
        except Exception as exc:
            update.update(_failure(state | update, exc))
        return _next(update)

    @_node
    def step(self, state: AgentState) -> dict[str, Any]:
        """One step: a model call (after the limit checks), then the action of its reply."""
        update = self.call_model(state)
        if update.get("exit_status", "running") != "running":
            return update
        try:
            acted = self.act(
                {**state, **update, "run_messages": [*state["run_messages"], *update["run_messages"]]}
            )
        except Exception as exc:  # keep the reply and its step record; end the run
            return {**update, **_failure(state, exc)}
        return {**update, **acted, "run_messages": [*update["run_messages"], *acted["run_messages"]]}

    def call_model(self, state: AgentState) -> dict[str, Any]:
        if state["steps"] >= self.limits.max_steps:
            return {
                "exit_status": "max_steps",
                "error": f"step limit reached ({self.limits.max_steps} model calls)",
            }
        if state["cost_usd"] >= self.limits.max_cost_usd > 0:
            reason = f"cost limit reached (${state['cost_usd']:.4f} of ${self.limits.max_cost_usd:g})"
            return {"exit_status": "max_cost", "error": reason}
        started = utcnow()
        kwargs = {}
        if self.pass_seed and state.get("seed") is not None:
            kwargs["seed"] = step_seed(state["seed"], state["steps"], state.get("task_id") or state["task"])
        messages = _run_messages(state)
        try:
            reply = self.llm.invoke(messages, **kwargs)
        except BudgetExceeded as exc:
            return {"exit_status": "max_cost", "error": str(exc)}
        except Exception as exc:
            if not is_context_overflow(exc):
                raise
            # a limit of the run like max_steps: the conversation no longer fits the model
            return {"exit_status": "context_exceeded", "error": redact(f"{type(exc).__name__}: {exc}")}
        step = step_record(state["steps"], reply, len(messages), started, self.model_name, self.endpoint)
        return {
            "run_messages": [reply],
            "steps": state["steps"] + 1,
            "cost_usd": state["cost_usd"] + (step.usage.cost_usd or 0.0),
            "records": [*state["records"], step.model_dump(mode="json")],
        }

    def act(self, state: AgentState) -> dict[str, Any]:
        reply = state["run_messages"][-1]
        parsed = parse_reply(reply, self.action_format)  # type: ignore[arg-type]
        step = dict(state["records"][-1])
        errors = [e.message for e in parsed.errors]
        out: list[BaseMessage] = [_answer(e.message, e.call_id, "error") for e in parsed.errors]
        update: dict[str, Any] = {}
        for i, action in enumerate(parsed.actions):
            if i > 0 or parsed.errors:
                out.append(_answer(ONE_CALL, action.call_id, "error"))
                continue
            try:
                done = self._toolbox(state["trajectory_id"]).run(action.name, action.args)
            except ActionError as exc:
                errors.append(f"Format error: {exc}")
                out.append(_answer(errors[-1], action.call_id, "error"))
                continue
            step["action"] = {"tool": action.name, "args": action.args}
            if done.observation is not None:
                step["observation"] = done.observation.model_dump(mode="json")
            if done.submission is not None:
                update.update(submission=done.submission, exit_status="submitted")
            out.append(_answer(done.text, action.call_id))
        if errors and not step.get("action"):
            step["action"] = {"format_error": "\n".join(errors)}
        update.update(
            run_messages=out,
            records=[*state["records"][:-1], step],
            format_errors=state["format_errors"] + len(errors),
        )
        self.recorder.log_step(state["trajectory_id"], [reply, *out], step)
        return update

    def finish(self, state: AgentState, *, tool_messages: bool = False) -> dict[str, Any]:
        """Close the run: write its trajectory (every internal step) and answer the caller with one
        AIMessage named after the scaffold (after its tool turns, with `tool_messages`). `task` is
        cleared, so the next run on a checkpointed thread reads its own task."""
        status = state.get("exit_status")
        final = {**state, "exit_status": "error" if status in (None, "running") else status}
        self._release(state.get("trajectory_id"))
        run = _run_messages(final)
        path = self.recorder.save(self.recorder.build(final, run, final=True))
        speaker = re.sub(r"[^A-Za-z0-9_-]", "_", self.scaffold.name)  # a valid `name` for chat APIs
        shown = tool_turns(run, f"{final.get('trajectory_id')}:task", speaker) if tool_messages else []
        kept = {m.id for m in shown}
        hidden = [RemoveMessage(id=m.id) for m in run if m.id not in kept]  # type: ignore[arg-type]
        answer = AIMessage(answer_text(final), name=speaker, id=f"{final.get('trajectory_id')}:answer")
        return {
            "exit_status": final["exit_status"],
            "trajectory_path": str(path) if path else None,
            "task": "",
            "messages": [*hidden, *shown, answer],
        }

    def trajectory(self, state: dict[str, Any]) -> Trajectory:
        """The final Trajectory of a run, from the graph's output: built from the full state (a graph
        compiled with `public=False`), or the one the run wrote (the public graph returns no steps)."""
        if not set(state) <= set(AgentOutput.__annotations__):  # more than the public output
            return self.recorder.build(state, _run_messages(state), final=True)
        path = self.recorder.path_for(str(state.get("trajectory_id")))
        if path is None or not path.is_file():
            raise ValueError(
                "no trajectory for this output: the public graph returns no steps and this agent writes "
                "no trajectory files; compile(public=False) or record to a trajectory_dir"
            )
        return load_trajectory(path)

    def save_interrupted(self, state: dict[str, Any], exc: BaseException) -> None:
        final = {**state, "exit_status": "interrupted", "error": type(exc).__name__}
        self._release(state.get("trajectory_id"))
        self.recorder.save(self.recorder.build(final, _run_messages(final), final=True))

    # -- sessions ------------------------------------------------------------------------------
    def _attach(self, tid: str, session: Session | None) -> None:
        owned = session is None
        if owned:
            session = self.sandbox.open(self.sandbox_spec)
        toolbox = ToolBox(self.scaffold, session)
        try:
            toolbox.install()
        except BaseException:
            if owned:
                session.close()
            raise
        with self._lock:
            self._sessions[tid] = (toolbox, owned)

    def _toolbox(self, tid: str) -> ToolBox:
        with self._lock:
            entry = self._sessions.get(tid)
        if entry is None:  # resumed from a checkpoint in a new process: the old workspace is gone
            self._attach(tid, None)
            entry = self._sessions[tid]
        return entry[0]

    def _release(self, tid: str | None) -> None:
        with self._lock:
            entry = self._sessions.pop(tid, None) if tid else None
        if entry and entry[1]:
            entry[0].session.close()


def step_seed(seed: int, step: int, task: str = "") -> int:
    """The sampling seed of a run's `step`-th model call on `task` (its id, else its text). One seed for
    every call would replay the same sampling noise at each step (vLLM then repeats its first reply token
    for token); `seed + step` would share noise between the runs of a group; and without the task, runs
    of different tasks with the same seed share it: on similar prompts a small model then makes the same
    choice on every task, and an evaluation over tasks x seeds holds as many independent samples as it
    has seeds (measured: 24 tasks x 2 seeds, every task passed exactly once). The trajectory records
    the run's seed."""
    salt = int(hashlib.sha256(task.encode()).hexdigest()[:8], 16)
    return (seed * 100_003 + step + salt) % 2**31


def _answer(text: str, call_id: str | None, status: str = "success") -> BaseMessage:
    if call_id is None:
        return HumanMessage(text)
    return ToolMessage(text, tool_call_id=call_id, status=status)


def _run_messages(state: dict[str, Any]) -> list[BaseMessage]:
    """This run's own conversation (the private channel; never the caller's `messages`)."""
    return list(state.get("run_messages") or [])


def _last_human_text(messages: list[BaseMessage]) -> str:
    for message in reversed(messages):
        if isinstance(message, HumanMessage):
            return message.text
    return ""
