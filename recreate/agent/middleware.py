"""Apply a scaffold to an agent built with `langchain.agents.create_agent`.

    agent = create_agent(model, tools=[...], middleware=[ScaffoldMiddleware("scaffolds/ds1000")])

The middleware adds the scaffold's system prompt, rules and memory index in front of the agent's own
system prompt, and registers the scaffold's tools (`bash` and the scaffold's scripts, run inside a sandbox
session opened on first use and closed when the agent finishes; `search_memory`; `submit`, which ends
the run and returns the answer as the last tool message). Each run of the agent has a session of its own
(named in the run's state), so concurrent runs through one middleware never share or close each other's.
"""

from __future__ import annotations

import contextvars
import threading
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, NotRequired

from langchain.agents.middleware import AgentMiddleware, AgentState, ModelRequest, ModelResponse
from langchain.agents.middleware.types import PrivateStateAttr
from langchain_core.messages import SystemMessage, ToolMessage
from langchain_core.tools import BaseTool, StructuredTool
from langgraph.prebuilt.tool_node import ToolCallRequest
from langgraph.types import Command

from recreate.agent.actions import runtime_instructions
from recreate.agent.toolbox import ToolBox, format_memory, search_memory, tool_specs
from recreate.sandbox import resolve_sandbox
from recreate.sandbox.base import Sandbox, SandboxSpec, Session
from recreate.scaffold import Scaffold, load_scaffold
from recreate.scaffold.render import render_system

_current_run: contextvars.ContextVar[str] = contextvars.ContextVar("scaffold_run", default="")


class ScaffoldState(AgentState):
    scaffold_run: NotRequired[Annotated[str, PrivateStateAttr]]  # names the run's sandbox session


@dataclass
class _RunBox:
    lock: threading.Lock = field(default_factory=threading.Lock)
    toolbox: ToolBox | None = None


class ScaffoldMiddleware(AgentMiddleware):
    state_schema = ScaffoldState

    def __init__(
        self,
        scaffold: Scaffold | str | Path,
        *,
        sandbox: str | Sandbox = "bwrap",
        sandbox_spec: SandboxSpec | None = None,
    ):
        super().__init__()
        self.scaffold = load_scaffold(scaffold)
        self.sandbox = resolve_sandbox(sandbox)
        self.sandbox_spec = sandbox_spec or SandboxSpec()
        extra = runtime_instructions(self.scaffold, "tool_calls")
        self.system_text = "\n\n".join(p for p in (render_system(self.scaffold), extra) if p)
        self.tools: list[BaseTool] = [self._make_tool(spec) for spec in tool_specs(self.scaffold)]
        self._boxes: dict[str, _RunBox] = {}  # run id -> its sandbox session, opened on first use
        self._lock = threading.Lock()

    @property
    def name(self) -> str:
        return f"ScaffoldMiddleware[{self.scaffold.name}]"

    def wrap_model_call(
        self, request: ModelRequest, handler: Callable[[ModelRequest], ModelResponse]
    ) -> ModelResponse:
        return handler(self._with_scaffold(request))

    async def awrap_model_call(
        self, request: ModelRequest, handler: Callable[[ModelRequest], Awaitable[ModelResponse]]
    ) -> ModelResponse:
        return await handler(self._with_scaffold(request))

    def _with_scaffold(self, request: ModelRequest) -> ModelRequest:
        """The scaffold's system text first, then the agent's own system prompt."""
        own = request.system_prompt
        text = f"{self.system_text}\n\n{own}" if own else self.system_text
        return request.override(system_message=SystemMessage(text))

    def before_agent(self, state: Any, runtime: Any) -> dict[str, Any] | None:
        return {"scaffold_run": uuid.uuid4().hex}

    def wrap_tool_call(
        self,
        request: ToolCallRequest,
        handler: Callable[[ToolCallRequest], ToolMessage | Command],
    ) -> ToolMessage | Command:
        token = _current_run.set(self._run_of(request))
        try:
            return handler(request)
        finally:
            _current_run.reset(token)

    async def awrap_tool_call(
        self,
        request: ToolCallRequest,
        handler: Callable[[ToolCallRequest], Awaitable[ToolMessage | Command]],
    ) -> ToolMessage | Command:
        token = _current_run.set(self._run_of(request))
        try:
            return await handler(request)
        finally:
            _current_run.reset(token)

    def _run_of(self, request: ToolCallRequest) -> str:
        state = request.state if isinstance(request.state, dict) else {}
        return str(state.get("scaffold_run", ""))

    def after_agent(self, state: Any, runtime: Any) -> dict[str, Any] | None:
        self.close(str(state.get("scaffold_run", "")))
        return None

    def close(self, run: str | None = None) -> None:
        """Close the sandbox session of one run, or of every run (the next tool call opens a fresh one)."""
        with self._lock:
            runs = list(self._boxes) if run is None else [run]
            boxes = [box for r in runs if (box := self._boxes.pop(r, None)) is not None]
        for box in boxes:
            with box.lock:
                toolbox, box.toolbox = box.toolbox, None
            if toolbox is not None:
                toolbox.session.close()

    def session(self) -> Session:
        """The sandbox session of the run calling (opened on first use)."""
        return self._box().session

    def _box(self) -> ToolBox:
        run = _current_run.get()
        with self._lock:
            box = self._boxes.setdefault(run, _RunBox())
        with box.lock:  # opening is slow (a container): other runs do not wait for it
            if box.toolbox is None:
                toolbox = ToolBox(self.scaffold, self.sandbox.open(self.sandbox_spec))
                toolbox.install()
                box.toolbox = toolbox
            return box.toolbox

    def _make_tool(self, spec: dict[str, Any]) -> BaseTool:
        name = spec["name"]

        def run(**args: Any) -> str:
            if name == "submit":  # return_direct: the answer is the run's last message
                return str(args["answer"])
            if name == "search_memory":
                return format_memory(search_memory(self.scaffold.memory, str(args["query"])))
            return self._box().run(name, args).text

        return StructuredTool.from_function(
            func=run,
            name=name,
            description=spec["description"],
            args_schema=spec["parameters"],
            return_direct=name == "submit",
        )
