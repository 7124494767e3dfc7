"""Typed edit ops: the only way a scaffold changes.

Every op is JSON-serialisable, discriminated by `op`, and carries `rationale` and `evidence`
(trajectory ids); the ops themselves are in op_models.py. `apply(scaffold, ops)` is all-or-nothing: it
works on a copy, raises OpError for an op that does not apply, and returns a new scaffold only if the
result validates. `parse_ops` reads them from JSON text or data, naming every malformed op.
"""

from __future__ import annotations

import difflib
import json
import re
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, TypeAdapter, ValidationError

from recreate.scaffold.errors import OpError, Problem, ScaffoldValidationError
from recreate.scaffold.files import MEMORY_FILE, SCAFFOLD_FILE, TOOL_FILE, TOOLS_DIR
from recreate.scaffold.model import Scaffold
from recreate.scaffold.op_models import (
    OP_NAMES,
    AddExample,
    AddMemory,
    AddRule,
    AddTool,
    BaseOp,
    Data,
    EditOp,
    OpMiss,
    RemoveExample,
    RemoveMemory,
    RemoveRule,
    RemoveTool,
    ReplaceText,
    SetField,
    UpdateRule,
    UpdateTool,
    Vote,
)
from recreate.scaffold.validate import Bounds, validate_scaffold

if TYPE_CHECKING:
    from recreate.sandbox.base import Sandbox, SandboxSpec

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
        except OpMiss as exc:
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
        if isinstance(item, BaseOp):
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
    except RecursionError:
        raise OpError("edit ops are nested too deeply to read; an op nests a few levels") from None


__all__ = [
    "OP_NAMES",
    "AddExample",
    "AddMemory",
    "AddRule",
    "AddTool",
    "EditOp",
    "RemoveExample",
    "RemoveMemory",
    "RemoveRule",
    "RemoveTool",
    "ReplaceText",
    "SetField",
    "UpdateRule",
    "UpdateTool",
    "Vote",
    "apply",
    "ops_json_schema",
    "ops_to_json",
    "parse_ops",
]
