"""The edit ops: one pydantic model per op, discriminated by `op`, each carrying `rationale` and
`evidence` (trajectory ids) and editing a scaffold's plain data in place (`apply_to`). Parsing them from
model output and applying them all-or-nothing is recreate.scaffold.ops'."""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from recreate.scaffold.model import ID_PATTERN, TOOL_NAME_PATTERN, ExampleStep, Language, SmokeTest

Data = dict[str, Any]  # a scaffold as plain data (model_dump), which ops edit in place
SettableField = Literal[
    "description",
    "system_prompt",
    "instance_template",
    "action_format",
    "limits.max_steps",
    "limits.max_cost_usd",
    "limits.command_timeout_s",
    "examples",
]


class OpMiss(Exception):
    """An op does not apply to this scaffold; `ops.apply` adds the op's index."""


class BaseOp(BaseModel, ABC):
    model_config = ConfigDict(extra="forbid")
    rationale: str = ""
    evidence: list[str] = Field(default_factory=list)  # trajectory ids

    @abstractmethod
    def apply_to(self, data: Data) -> None:
        """Edit `data` in place, or raise OpMiss if the op does not apply."""


def _find(items: list[Data], key: str, value: str, what: str) -> Data:
    for item in items:
        if item[key] == value:
            return item
    known = ", ".join(repr(item[key]) for item in items[:20]) or "none"
    if len(items) > 20:
        known += f", ... ({len(items)} in all)"
    raise OpMiss(f"unknown {what} {value!r} (known: {known})")


def _next_id(items: list[Data], prefix: str) -> str:
    numbers = [int(m.group(1)) for item in items if (m := re.fullmatch(rf"{prefix}(\d+)", item["id"]))]
    return f"{prefix}{max(numbers, default=0) + 1}"


class SetField(BaseOp):
    op: Literal["set_field"] = "set_field"
    field: SettableField
    value: Any

    def apply_to(self, data: Data) -> None:
        *parents, last = self.field.split(".")
        target = data
        for part in parents:
            target = target[part]
        target[last] = self.value


class ReplaceText(BaseOp):
    """Replace the unique occurrence of `old` in a text field. `field` is one of system_prompt,
    instance_template, description, rules.<id>.text, tools.<name>.code, tools.<name>.description,
    memory.<id>.content."""

    op: Literal["replace_text"] = "replace_text"
    field: str
    old: str = Field(min_length=1)
    new: str

    def apply_to(self, data: Data) -> None:
        container, key = self._locate(data)
        text = container[key]
        count = text.count(self.old)
        if count == 0:
            raise OpMiss(f"{self.old!r} does not occur in {self.field}")
        if count > 1:
            raise OpMiss(
                f"{self.old!r} occurs {count} times in {self.field}; quote more context to make it unique"
            )
        container[key] = text.replace(self.old, self.new, 1)

    def _locate(self, data: Data) -> tuple[Data, str]:
        if self.field in ("system_prompt", "instance_template", "description"):
            return data, self.field
        for prefix, items, key, id_key, suffixes in (
            ("rules.", data["rules"], "rule", "id", ("text",)),
            ("tools.", data["tools"], "tool", "name", ("code", "description")),
            ("memory.", data["memory"], "memory item", "id", ("content", "title")),
        ):
            if self.field.startswith(prefix) and "." in self.field[len(prefix) :]:
                ident, _, attr = self.field[len(prefix) :].rpartition(".")
                if attr in suffixes:
                    return _find(items, id_key, ident, key), attr
        raise OpMiss(
            f"cannot replace text in field {self.field!r}; use system_prompt, instance_template, "
            "description, rules.<id>.text, tools.<name>.code, tools.<name>.description, "
            "memory.<id>.content or memory.<id>.title"
        )


class AddRule(BaseOp):
    op: Literal["add_rule"] = "add_rule"
    id: str | None = Field(None, pattern=ID_PATTERN)  # None: the next free "r<N>"
    text: str = Field(min_length=1)
    scope: str = "general"
    origin: str = "optimizer"

    def apply_to(self, data: Data) -> None:
        rule_id = self.id or _next_id(data["rules"], "r")
        if any(rule["id"] == rule_id for rule in data["rules"]):
            raise OpMiss(f"rule {rule_id!r} already exists; use update_rule")
        data["rules"].append(
            {
                "id": rule_id,
                "text": self.text,
                "scope": self.scope,
                "origin": self.origin,
                "helpful": 0,
                "harmful": 0,
            }
        )


class UpdateRule(BaseOp):
    op: Literal["update_rule"] = "update_rule"
    id: str
    text: str | None = Field(None, min_length=1)
    scope: str | None = None

    def apply_to(self, data: Data) -> None:
        if self.text is None and self.scope is None:
            raise OpMiss("nothing to update: give text and/or scope")
        rule = _find(data["rules"], "id", self.id, "rule")
        rule.update({k: v for k, v in (("text", self.text), ("scope", self.scope)) if v is not None})


class RemoveRule(BaseOp):
    op: Literal["remove_rule"] = "remove_rule"
    id: str

    def apply_to(self, data: Data) -> None:
        data["rules"].remove(_find(data["rules"], "id", self.id, "rule"))


class AddTool(BaseOp):
    op: Literal["add_tool"] = "add_tool"
    name: str = Field(pattern=TOOL_NAME_PATTERN)
    description: str = Field(min_length=1)
    args: dict[str, Any] = Field(default_factory=lambda: {"type": "object", "properties": {}})
    smoke: SmokeTest
    language: Language = "python"
    code: str = Field(min_length=1)

    def apply_to(self, data: Data) -> None:
        if any(tool["name"] == self.name for tool in data["tools"]):
            raise OpMiss(f"tool {self.name!r} already exists; use update_tool")
        data["tools"].append(
            self.model_dump(include={"name", "description", "args", "smoke", "language", "code"})
        )


class UpdateTool(BaseOp):
    op: Literal["update_tool"] = "update_tool"
    name: str
    description: str | None = Field(None, min_length=1)
    args: dict[str, Any] | None = None
    smoke: SmokeTest | None = None
    language: Language | None = None
    code: str | None = Field(None, min_length=1)

    def apply_to(self, data: Data) -> None:
        changes = self.model_dump(
            include={"description", "args", "smoke", "language", "code"}, exclude_none=True
        )
        if not changes:
            raise OpMiss("nothing to update: give description, args, smoke, language and/or code")
        _find(data["tools"], "name", self.name, "tool").update(changes)


class RemoveTool(BaseOp):
    op: Literal["remove_tool"] = "remove_tool"
    name: str

    def apply_to(self, data: Data) -> None:
        data["tools"].remove(_find(data["tools"], "name", self.name, "tool"))


class AddMemory(BaseOp):
    """A memory item; its evidence is the op's evidence."""

    op: Literal["add_memory"] = "add_memory"
    id: str | None = Field(None, pattern=ID_PATTERN)  # None: the next free "m<N>"
    title: str = Field(min_length=1)
    content: str = Field(min_length=1)
    tags: list[str] = Field(default_factory=list)

    def apply_to(self, data: Data) -> None:
        item_id = self.id or _next_id(data["memory"], "m")
        if any(item["id"] == item_id for item in data["memory"]):
            raise OpMiss(f"memory item {item_id!r} already exists")
        data["memory"].append(
            {
                "id": item_id,
                "title": self.title,
                "content": self.content,
                "tags": list(self.tags),
                "evidence": list(self.evidence),
                "helpful": 0,
                "harmful": 0,
            }
        )


class RemoveMemory(BaseOp):
    op: Literal["remove_memory"] = "remove_memory"
    id: str

    def apply_to(self, data: Data) -> None:
        data["memory"].remove(_find(data["memory"], "id", self.id, "memory item"))


class AddExample(BaseOp):
    """A worked example (task, then each step: a `command` with its `output`, or a final `submit`),
    shown to the agent as earlier turns of its conversation. Typically a passing training run kept as
    a method to imitate; its evidence is that run."""

    op: Literal["add_example"] = "add_example"
    task: str = Field(min_length=1)
    steps: list[ExampleStep] = Field(min_length=1)

    def apply_to(self, data: Data) -> None:
        if any(example["task"] == self.task for example in data["examples"]):
            raise OpMiss(f"an example of task {self.task[:60]!r} already exists")
        data["examples"].append({"task": self.task, "steps": [step.model_dump() for step in self.steps]})


class RemoveExample(BaseOp):
    """Remove the worked example at `index` (0 is the first)."""

    op: Literal["remove_example"] = "remove_example"
    index: int = Field(ge=0)

    def apply_to(self, data: Data) -> None:
        if self.index >= len(data["examples"]):
            raise OpMiss(f"no example {self.index}: the scaffold has {len(data['examples'])}")
        del data["examples"][self.index]


class Vote(BaseOp):
    """Add to a rule's or memory item's helpful/harmful counters."""

    op: Literal["vote"] = "vote"
    target: Literal["rule", "memory"]
    id: str
    helpful: int = Field(0, ge=0)
    harmful: int = Field(0, ge=0)

    def apply_to(self, data: Data) -> None:
        if self.helpful == 0 and self.harmful == 0:
            raise OpMiss("an empty vote: give helpful and/or harmful > 0")
        items, what = (data["rules"], "rule") if self.target == "rule" else (data["memory"], "memory item")
        item = _find(items, "id", self.id, what)
        item["helpful"] += self.helpful
        item["harmful"] += self.harmful


EditOp = Annotated[
    SetField
    | ReplaceText
    | AddRule
    | UpdateRule
    | RemoveRule
    | AddTool
    | UpdateTool
    | RemoveTool
    | AddMemory
    | RemoveMemory
    | AddExample
    | RemoveExample
    | Vote,
    Field(discriminator="op"),
]
OP_NAMES = (
    "set_field",
    "replace_text",
    "add_rule",
    "update_rule",
    "remove_rule",
    "add_tool",
    "update_tool",
    "remove_tool",
    "add_memory",
    "remove_memory",
    "add_example",
    "remove_example",
    "vote",
)
