"""How an edit op reads on a page: the scaffold component it changes and what it changes, in one line
(the run page, the report and the trajectory pages show ops this way)."""

from __future__ import annotations

from typing import Any

from recreate.text import clip_middle

COMPONENT = {
    "add_rule": "rules",
    "update_rule": "rules",
    "remove_rule": "rules",
    "add_tool": "tools",
    "update_tool": "tools",
    "remove_tool": "tools",
    "add_memory": "memory",
    "remove_memory": "memory",
    "vote": "counters",
    "add_example": "examples",
    "remove_example": "examples",
}


def component_of(op: dict[str, Any]) -> str:
    if op["op"] in COMPONENT:
        return COMPONENT[op["op"]]
    return str(op.get("field", "field")).split(".")[0]


def op_content(op: dict[str, Any]) -> str:
    """What an edit op changes, in one clipped line (the rationale says why)."""
    if op["op"] == "replace_text":
        return f"{op['field']}: {clip_middle(op['old'], 120)!r} -> {clip_middle(op['new'], 300)!r}"
    if op["op"] == "set_field":
        return f"{op['field']} = {clip_middle(str(op['value']), 300)}"
    if op["op"] == "add_example":
        steps = " ; ".join(str(x.get("command") or x.get("submit") or "") for x in op.get("steps", []))
        return f"{clip_middle(op['task'], 200)} => {clip_middle(steps, 300)}"
    keys = ("id", "name", "title", "text", "description", "content", "index")
    return " · ".join(clip_middle(str(op[k]), 300) for k in keys if op.get(k))
