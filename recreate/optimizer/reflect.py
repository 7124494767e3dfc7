"""Instance level: the ReCreate-Agent inspects one run and proposes typed scaffold edits.

It reads the experience on demand (inspection tools), views the scaffold, can re-open the task's
environment in a fresh sandbox to try commands and test a tool it writes, and ends by calling `propose`.
Nothing it writes runs on the host.
"""

from __future__ import annotations

import functools
import json
import threading
from collections.abc import Collection, Mapping
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

from langchain.agents import create_agent
from langchain_core.language_models import BaseChatModel
from langchain_core.tools import BaseTool
from pydantic import BaseModel, Field

from recreate.domains.base import Domain, Task
from recreate.experience.schema import Trajectory
from recreate.experience.tools import experience_tools
from recreate.optimizer.prompts import GUIDANCE, REFLECT, with_ops_reference
from recreate.optimizer.proposals import Proposal, ProposalBox, propose_tool
from recreate.optimizer.structured import reflect_structured
from recreate.sandbox import SandboxSpec, Session, close_when_opened, open_soon, resolve_sandbox
from recreate.scaffold import Scaffold, Tool
from recreate.structured_tool import make_tool
from recreate.text import clip_middle

OUTPUT_CHARS = 4000


class _RunArgs(BaseModel):
    command: str = Field(description="a bash command")


class _ViewArgs(BaseModel):
    component: str = Field(
        "overview",
        description="overview | system_prompt | instance_template | rules | memory | tools | tool:NAME",
    )


class _TestToolArgs(BaseModel):
    name: str = Field(description="tool name: lowercase letters, digits, underscores")
    language: str = Field("python", description="python | bash")
    code: str = Field(description="the script; it reads one JSON object from argv[1] and prints its result")
    args: dict[str, Any] = Field(default_factory=dict, description="the JSON arguments to run it with")


@dataclass(frozen=True)
class Ablations:
    """The paper's ablations: what the meta-agent is denied."""

    no_trajectory: bool = False  # no access to the agent's steps, by any tool (outcome + score only)
    no_environment: bool = False  # cannot re-open the task's sandbox
    no_eval_details: bool = False  # sees pass/fail and score, not the evaluator's feedback
    no_guidance: bool = False  # no modification guidance in the prompt (the op reference stays)
    no_synthesis: bool = False  # instance proposals are applied directly


def view_scaffold_tool(scaffold: Scaffold) -> BaseTool:
    def view_scaffold(component: str = "overview") -> str:
        if component == "system_prompt":
            return scaffold.system_prompt
        if component == "instance_template":
            return scaffold.instance_template
        if component == "rules":
            return (
                "\n".join(f"[{r.id}] ({r.scope}, +{r.helpful}/-{r.harmful}) {r.text}" for r in scaffold.rules)
                or "(none)"
            )
        if component == "memory":
            items = [f"[{m.id}] (+{m.helpful}/-{m.harmful}) {m.title}: {m.content}" for m in scaffold.memory]
            return "\n".join(items) or "(none)"
        if component == "tools":
            return "\n".join(f"{t.name}: {t.description}" for t in scaffold.tools) or "(none)"
        if component.startswith("tool:"):
            tool = scaffold.tool(component.removeprefix("tool:"))
            return json.dumps(tool.model_dump(mode="json"), indent=1)
        return (
            f"name: {scaffold.name} (domain {scaffold.domain}); limits: {scaffold.limits.model_dump()}\n"
            f"system prompt: {len(scaffold.system_prompt)} chars; rules: {len(scaffold.rules)}; "
            f"tools: {[t.name for t in scaffold.tools]}; memory items: {len(scaffold.memory)}"
        )

    return make_tool(
        view_scaffold,
        name="view_scaffold",
        description="View a part of the current scaffold.",
        args=_ViewArgs,
    )


class TaskEnvironment:
    """The task's environment re-opened in a fresh sandbox session for the meta-agent: on first use, or
    ahead of it with `open_soon` (while the meta-agent's first model call is out)."""

    def __init__(self, domain: Domain, task: Task, sandbox: Any, spec: SandboxSpec | None = None):
        self.domain, self.task, self.sandbox, self.spec = domain, task, resolve_sandbox(sandbox), spec
        self._opening: Future[Session] | None = None
        self._lock = threading.Lock()

    def open_soon(self) -> Future[Session]:
        with self._lock:
            if self._opening is None:
                prepare = functools.partial(self.domain.prepare, self.task)  # (session) -> None
                self._opening = open_soon(self.sandbox, self.spec or SandboxSpec(), then=prepare)
            return self._opening

    def session(self) -> Session:
        opening = self.open_soon()
        try:
            return opening.result()
        except Exception:
            with self._lock:
                if self._opening is opening:
                    self._opening = None  # the next command tries again
            raise

    def run(self, command: str) -> str:
        """Run a shell command in the task's environment (a fresh sandbox with the task's files)."""
        try:
            res = self.session().run(command, timeout=60)
        except Exception as exc:  # a broken sandbox is reported to the meta-agent, not raised
            return f"sandbox error: {type(exc).__name__}: {exc}"
        return clip_middle(
            f"exit={res.exit_code} timed_out={res.timed_out}\nstdout:\n{res.stdout}\nstderr:\n{res.stderr}",
            OUTPUT_CHARS,
        )

    def test_tool(self, name: str, language: str, code: str, args: dict[str, Any]) -> str:
        """Write a tool into the sandbox and run it once with `args`."""
        try:
            tool = Tool(
                name=name, description="candidate", language=language, code=code, smoke={"args": args}
            )
            self.session().put(tool.sandbox_path(), code)
        except Exception as exc:
            return f"cannot install the tool: {type(exc).__name__}: {exc}"
        return self.run(tool.command(args))

    def tools(self) -> list[BaseTool]:
        return [
            make_tool(
                self.run,
                name="run_in_environment",
                args=_RunArgs,
                description="Run a shell command in a fresh sandbox holding the task's files.",
            ),
            make_tool(
                self.test_tool,
                name="test_tool",
                args=_TestToolArgs,
                description="Write a candidate tool into the task's sandbox and run it once with `args`.",
            ),
        ]

    def close(self) -> None:
        with self._lock:
            opening, self._opening = self._opening, None
        if opening is not None:
            close_when_opened(opening)


def run_brief(traj: Trajectory, ablations: Ablations) -> str:
    ev = traj.evaluation
    lines = [
        f"Task: {traj.task_id}. Run (trajectory id): {traj.trajectory_id}.",
        f"Exit status: {traj.outcome.exit_status}; steps: {traj.totals.steps}.",
        f"Evaluation: score={ev.score if ev else 'n/a'} passed={ev.passed if ev else 'n/a'}.",
    ]
    if ev and not ablations.no_eval_details:
        lines.append(f"Evaluator feedback: {clip_middle(ev.feedback, OUTPUT_CHARS)}")
    lines.append("Investigate with your tools, then call `propose` exactly once.")
    return "\n".join(lines)


def reflect_on_run(
    traj: Trajectory,
    *,
    scaffold: Scaffold,
    domain: Domain,
    task: Task,
    model: BaseChatModel,
    experience: Any,
    sandbox: Any,
    ablations: Ablations = Ablations(),
    max_steps: int = 16,
    hidden_tasks: Collection[str] = (),
    protocol: str = "agentic",
    prompts: Mapping[str, str] | None = None,
) -> Proposal:
    """`hidden_tasks`: held-out task ids whose runs the meta-agent must never see. `protocol`: "agentic"
    (the meta-agent inspects with tools and calls `propose`) or "structured" (one constrained call over
    an evidence digest, for models that cannot call tools); `prompts`: the raw text of the training
    tasks by id, whose passing runs it may keep as worked examples (default: this task's)."""
    if protocol == "structured":
        return reflect_structured(
            traj,
            scaffold=scaffold,
            domain_text=domain.describe(),
            model=model,
            experience=experience,
            sandbox=sandbox,
            hidden_tasks=hidden_tasks,
            with_eval=not ablations.no_eval_details,
            with_steps=not ablations.no_trajectory,
            guidance=not ablations.no_guidance,
            prompts={task.id: task.prompt} if prompts is None else prompts,
        )
    box = ProposalBox(scaffold, task.id, [traj.trajectory_id], sandbox=sandbox)
    env = TaskEnvironment(domain, task, sandbox)
    tools: list[BaseTool] = [view_scaffold_tool(scaffold), propose_tool(box)]
    tools += experience_tools(
        experience,
        allow_trajectories=not ablations.no_trajectory,
        allow_evaluation=not ablations.no_eval_details,
        hidden_tasks=hidden_tasks,
    )
    if not ablations.no_environment:
        tools += env.tools()
        env.open_soon()
    prompt = REFLECT.format(domain=domain.describe())
    if not ablations.no_guidance:
        prompt += "\n" + GUIDANCE
    prompt = with_ops_reference(prompt)
    agent = create_agent(model, tools, system_prompt=prompt, name="recreate_reflect")
    try:
        return box.run(agent, run_brief(traj, ablations), max_steps=max_steps, who="meta-agent")
    finally:
        env.close()
