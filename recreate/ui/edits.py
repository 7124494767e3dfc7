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


def component_of(op: Any) -> str:
    if not isinstance(op, dict):
        return "?"
    if op.get("op") in COMPONENT:
        return COMPONENT[op["op"]]
    return str(op.get("field", "field")).split(".")[0]


def op_content(op: Any) -> str:
    """What an edit op changes, in one clipped line (the rationale says why); an op missing a field (a
    hand-edited file) shows what it has."""
    if not isinstance(op, dict):
        return clip_middle(str(op), 300)
    kind, field = op.get("op"), op.get("field")
    if kind == "replace_text":
        old, new = str(op.get("old", "")), str(op.get("new", ""))
        return f"{field}: {clip_middle(old, 120)!r} -> {clip_middle(new, 300)!r}"
    if kind == "set_field":
        return f"{field} = {clip_middle(str(op.get('value')), 300)}"
    if kind == "add_example":
        steps = op.get("steps") if isinstance(op.get("steps"), list) else []
        shown = [str(x.get("command") or x.get("submit") or "") for x in steps if isinstance(x, dict)]
        done = " ; ".join(shown)
        return f"{clip_middle(str(op.get('task', '')), 200)} => {clip_middle(done, 300)}"
    keys = ("id", "name", "title", "text", "description", "content", "index")
    return " · ".join(clip_middle(str(op[k]), 300) for k in keys if op.get(k))
