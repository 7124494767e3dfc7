"""Apply a scaffold to an agent built with `langchain.agents.create_agent`.

    agent = create_agent(model, tools=[...], middleware=[ScaffoldMiddleware("scaffolds/ds1000")])

The middleware adds the scaffold's system prompt, rules and memory index in front of the agent's own
system prompt, and registers the scaffold's tools (`bash` and the scaffold's scripts, run inside a sandbox
session opened on first use and closed when the agent finishes; `search_memory`; `submit`, which ends
the run and returns the answer as the last tool message).
"""

from __future__ import annotations

import threading
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from langchain.agents.middleware import AgentMiddleware, ModelRequest, ModelResponse
from langchain_core.messages import SystemMessage
from langchain_core.tools import BaseTool, StructuredTool

from recreate.agent.actions import runtime_instructions
from recreate.agent.factory import resolve_sandbox
from recreate.agent.toolbox import ToolBox, format_memory, search_memory, tool_specs
from recreate.sandbox.base import Sandbox, SandboxSpec, Session
from recreate.scaffold import Scaffold, load_scaffold
from recreate.scaffold.render import render_system


class ScaffoldMiddleware(AgentMiddleware):
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
        self._toolbox: ToolBox | None = None
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

    def after_agent(self, state: Any, runtime: Any) -> dict[str, Any] | None:
        self.close()
        return None

    def close(self) -> None:
        """Close the sandbox session (the next tool call opens a fresh one)."""
        with self._lock:
            toolbox, self._toolbox = self._toolbox, None
        if toolbox is not None:
            toolbox.session.close()

    def session(self) -> Session:
        return self._box().session

    def _box(self) -> ToolBox:
        with self._lock:
            if self._toolbox is None:
                toolbox = ToolBox(self.scaffold, self.sandbox.open(self.sandbox_spec))
                toolbox.install()
                self._toolbox = toolbox
            return self._toolbox

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
