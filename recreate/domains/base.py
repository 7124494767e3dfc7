"""The Domain contract: where tasks come from and how a submission is judged."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, runtime_checkable

from recreate.experience.schema import Evaluation
from recreate.sandbox.base import Sandbox, Session

Split = Literal["train", "val", "test", "all"]


@dataclass
class Task:
    id: str
    prompt: str  # rendered into the scaffold's instance_template as {{ task }}
    group: str | None = None  # tasks of one group never straddle splits
    files: dict[str, str] = field(default_factory=dict)  # workspace files to prepare
    reference: str | None = None  # reference solution/answer, never shown to the agent
    metadata: dict[str, Any] = field(default_factory=dict)


@runtime_checkable
class Domain(Protocol):
    name: str

    def tasks(self, split: Split = "all") -> list[Task]: ...

    def prepare(self, task: Task, session: Session) -> None:
        """Put the task's files into the agent's workspace."""
        ...

    def evaluate(self, task: Task, submission: str | None, sandbox: Sandbox) -> Evaluation:
        """Judge a submission in a fresh sandbox session; never raises for bad submissions."""
        ...

    def describe(self) -> str:
        """Text the optimizer reads: what the tasks are, how they are judged, what a submission is."""
        ...


__all__ = ["Domain", "Evaluation", "Split", "Task"]
