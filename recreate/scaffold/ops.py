"""Typed edit ops: the only way a scaffold changes.

Every op is JSON-serialisable, discriminated by `op`, and carries `rationale` and `evidence`
(trajectory ids). `apply(scaffold, ops)` is all-or-nothing: it works on a copy, raises OpError for an
op that does not apply, and returns a new scaffold only if the result validates.
"""

from __future__ import annotations

import difflib
import json
import re
from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

from recreate.scaffold.errors import OpError, Problem, ScaffoldValidationError
from recreate.scaffold.files import MEMORY_FILE, SCAFFOLD_FILE, TOOL_FILE, TOOLS_DIR
from recreate.scaffold.model import ID_PATTERN, TOOL_NAME_PATTERN, ExampleStep, Language, Scaffold, SmokeTest
from recreate.scaffold.validate import Bounds, validate_scaffold

if TYPE_CHECKING:
    from recreate.sandbox.base import Sandbox, SandboxSpec

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


class _Miss(Exception):
    """An op does not apply to this scaffold; `apply` adds the op's index."""


class _Op(BaseModel, ABC):
    model_config = ConfigDict(extra="forbid")
    rationale: str = ""
    evidence: list[str] = Field(default_factory=list)  # trajectory ids

    @abstractmethod
    def apply_to(self, data: Data) -> None:
        """Edit `data` in place, or raise _Miss if the op does not apply."""


def _find(items: list[Data], key: str, value: str, what: str) -> Data:
    for item in items:
        if item[key] == value:
            return item
    known = ", ".join(repr(item[key]) for item in items[:20]) or "none"
    if len(items) > 20:
        known += f", ... ({len(items)} in all)"
    raise _Miss(f"unknown {what} {value!r} (known: {known})")


def _next_id(items: list[Data], prefix: str) -> str:
    numbers = [int(m.group(1)) for item in items if (m := re.fullmatch(rf"{prefix}(\d+)", item["id"]))]
    return f"{prefix}{max(numbers, default=0) + 1}"


class SetField(_Op):
    op: Literal["set_field"] = "set_field"
    field: SettableField
    value: Any

    def apply_to(self, data: Data) -> None:
        *parents, last = self.field.split(".")
        target = data
        for part in parents:
            target = target[part]
        target[last] = self.value


class ReplaceText(_Op):
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
            raise _Miss(f"{self.old!r} does not occur in {self.field}")
        if count > 1:
            raise _Miss(
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
        raise _Miss(
            f"cannot replace text in field {self.field!r}; use system_prompt, instance_template, "
            "description, rules.<id>.text, tools.<name>.code, tools.<name>.description, "
            "memory.<id>.content or memory.<id>.title"
        )


class AddRule(_Op):
    op: Literal["add_rule"] = "add_rule"
    id: str | None = Field(None, pattern=ID_PATTERN)  # None: the next free "r<N>"
    text: str = Field(min_length=1)
    scope: str = "general"
    origin: str = "optimizer"

    def apply_to(self, data: Data) -> None:
        rule_id = self.id or _next_id(data["rules"], "r")
        if any(rule["id"] == rule_id for rule in data["rules"]):
            raise _Miss(f"rule {rule_id!r} already exists; use update_rule")
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


class UpdateRule(_Op):
    op: Literal["update_rule"] = "update_rule"
    id: str
    text: str | None = Field(None, min_length=1)
    scope: str | None = None

    def apply_to(self, data: Data) -> None:
        if self.text is None and self.scope is None:
            raise _Miss("nothing to update: give text and/or scope")
        rule = _find(data["rules"], "id", self.id, "rule")
        rule.update({k: v for k, v in (("text", self.text), ("scope", self.scope)) if v is not None})


class RemoveRule(_Op):
    op: Literal["remove_rule"] = "remove_rule"
    id: str

    def apply_to(self, data: Data) -> None:
        data["rules"].remove(_find(data["rules"], "id", self.id, "rule"))


class AddTool(_Op):
    op: Literal["add_tool"] = "add_tool"
    name: str = Field(pattern=TOOL_NAME_PATTERN)
    description: str = Field(min_length=1)
    args: dict[str, Any] = Field(default_factory=lambda: {"type": "object", "properties": {}})
    smoke: SmokeTest
    language: Language = "python"
    code: str = Field(min_length=1)

    def apply_to(self, data: Data) -> None:
        if any(tool["name"] == self.name for tool in data["tools"]):
            raise _Miss(f"tool {self.name!r} already exists; use update_tool")
        data["tools"].append(
            self.model_dump(include={"name", "description", "args", "smoke", "language", "code"})
        )


class UpdateTool(_Op):
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
            raise _Miss("nothing to update: give description, args, smoke, language and/or code")
        _find(data["tools"], "name", self.name, "tool").update(changes)


class RemoveTool(_Op):
    op: Literal["remove_tool"] = "remove_tool"
    name: str

    def apply_to(self, data: Data) -> None:
        data["tools"].remove(_find(data["tools"], "name", self.name, "tool"))


class AddMemory(_Op):
    """A memory item; its evidence is the op's evidence."""

    op: Literal["add_memory"] = "add_memory"
    id: str | None = Field(None, pattern=ID_PATTERN)  # None: the next free "m<N>"
    title: str = Field(min_length=1)
    content: str = Field(min_length=1)
    tags: list[str] = Field(default_factory=list)

    def apply_to(self, data: Data) -> None:
        item_id = self.id or _next_id(data["memory"], "m")
        if any(item["id"] == item_id for item in data["memory"]):
            raise _Miss(f"memory item {item_id!r} already exists")
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


class RemoveMemory(_Op):
    op: Literal["remove_memory"] = "remove_memory"
    id: str

    def apply_to(self, data: Data) -> None:
        data["memory"].remove(_find(data["memory"], "id", self.id, "memory item"))


class AddExample(_Op):
    """A worked example (task, then each step: a `command` with its `output`, or a final `submit`),
    shown to the agent as earlier turns of its conversation. Typically a passing training run kept as
    a method to imitate; its evidence is that run."""

    op: Literal["add_example"] = "add_example"
    task: str = Field(min_length=1)
    steps: list[ExampleStep] = Field(min_length=1)

    def apply_to(self, data: Data) -> None:
        if any(example["task"] == self.task for example in data["examples"]):
            raise _Miss(f"an example of task {self.task[:60]!r} already exists")
        data["examples"].append({"task": self.task, "steps": [step.model_dump() for step in self.steps]})


class RemoveExample(_Op):
    """Remove the worked example at `index` (0 is the first)."""

    op: Literal["remove_example"] = "remove_example"
    index: int = Field(ge=0)

    def apply_to(self, data: Data) -> None:
        if self.index >= len(data["examples"]):
            raise _Miss(f"no example {self.index}: the scaffold has {len(data['examples'])}")
        del data["examples"][self.index]


class Vote(_Op):
    """Add to a rule's or memory item's helpful/harmful counters."""

    op: Literal["vote"] = "vote"
    target: Literal["rule", "memory"]
    id: str
    helpful: int = Field(0, ge=0)
    harmful: int = Field(0, ge=0)

    def apply_to(self, data: Data) -> None:
        if self.helpful == 0 and self.harmful == 0:
            raise _Miss("an empty vote: give helpful and/or harmful > 0")
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
_adapter: TypeAdapter[Any] = TypeAdapter(EditOp)


def ops_json_schema() -> dict[str, Any]:
    """JSON schema of a list of edit ops: give it to a model as a structured-output or tool schema."""
    schema = TypeAdapter(list[EditOp]).json_schema()
    for definition in schema["$defs"].values():
        if "op" in definition.get("properties", {}):  # a default in Python, but a model must always say it
            definition["required"] = [
                "op",
                *(name for name in definition.get("required", []) if name != "op"),
            ]
    return schema


def apply(
    scaffold: Scaffold,
    ops: Any,
    *,
    sandbox: Sandbox | None = None,
    bounds: Bounds | None = None,
    spec: SandboxSpec | None = None,
) -> Scaffold:
    """A new validated scaffold with `ops` (anything `parse_ops` takes) applied in order; `scaffold`
    itself is never changed."""
    ops = parse_ops(ops)
    data = scaffold.model_dump()
    for index, op in enumerate(ops):
        try:
            op.apply_to(data)
        except _Miss as exc:
            raise OpError(str(exc), index=index, op=op.op) from None
    try:
        result = Scaffold.model_validate(data)
    except ValidationError as exc:
        raise ScaffoldValidationError(
            _data_problems(exc, data), source=scaffold.ref or scaffold.name
        ) from None
    validate_scaffold(result, sandbox=sandbox, bounds=bounds, spec=spec)
    return result


def _data_problems(exc: ValidationError, data: Data) -> list[Problem]:
    problems = []
    for err in exc.errors():
        loc = list(err["loc"])
        file = SCAFFOLD_FILE
        if len(loc) >= 2 and loc[0] == "tools" and isinstance(loc[1], int):
            file, loc = f"{TOOLS_DIR}/{data['tools'][loc[1]].get('name')}/{TOOL_FILE}", loc[2:]
        elif len(loc) >= 2 and loc[0] == "memory" and isinstance(loc[1], int):
            file, loc = f"{MEMORY_FILE} ({data['memory'][loc[1]].get('id')})", loc[2:]
        problems.append(Problem(file, ".".join(str(part) for part in loc), err["msg"]))
    return problems


def parse_ops(source: Any) -> list[Any]:
    """Edit ops from JSON text (code fences allowed), a dict ({"ops": [...]} or one op), a list of
    dicts, or op objects. Raises OpError listing every malformed op with its index and field."""
    if isinstance(source, str):
        source = _loads(source)
    if isinstance(source, dict):
        source = source["ops"] if isinstance(source.get("ops"), list) else [source]
    if isinstance(source, BaseModel):
        source = [source]
    if not isinstance(source, list | tuple):
        raise OpError(f"edit ops must be a JSON list of objects, got {type(source).__name__}")
    ops, errors = [], []
    for index, item in enumerate(source):
        if isinstance(item, _Op):
            ops.append(item)
            continue
        if not isinstance(item, dict):
            errors.append(f"op {index}: must be an object with an 'op' field, got {type(item).__name__}")
            continue
        name = item.get("op")
        if name not in OP_NAMES:
            close = difflib.get_close_matches(str(name), OP_NAMES, n=1)
            hint = f"did you mean {close[0]!r}? " if close else ""
            errors.append(f"op {index}: unknown op {name!r}; {hint}known: {', '.join(OP_NAMES)}")
            continue
        try:
            ops.append(_adapter.validate_python(item))
        except ValidationError as exc:
            for err in exc.errors():
                field = ".".join(str(part) for part in err["loc"][1:]) or "(op)"
                message = "unknown field" if err["type"] == "extra_forbidden" else err["msg"]
                errors.append(f"op {index} ({name}): {field}: {message}")
    if errors:
        raise OpError("invalid edit ops:\n" + "\n".join(f"  - {e}" for e in errors))
    return ops


def ops_to_json(ops: list[Any]) -> list[dict[str, Any]]:
    return [op.model_dump(mode="json") for op in parse_ops(ops)]


def _loads(text: str) -> Any:
    fenced = re.search(r"```(?:json)?\s*\n(.*?)```", text, flags=re.DOTALL)
    if fenced:
        text = fenced.group(1)
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise OpError(
            f"edit ops are not valid JSON: {exc.msg} at line {exc.lineno}, column {exc.colno}"
        ) from None
