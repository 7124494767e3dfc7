"""The evolve report: `report.html`, a static export of the run's page in `recreate ui` (the same
templates, the same numbers): both axes of the evolution (scaffold versions and model versions with their
gates' improvement, 95% interval and n), the scaffold × model grid, the fine-tuning steps, the final
test, cost per role, edits with their evidence, and every reflection with its errors and messages."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

from recreate.text import clip_middle
from recreate.ui.pairs import version_grid

__all__ = ["component_of", "op_content", "version_grid", "write_report"]

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


def write_report(result: Any, out_dir: Path) -> Path:
    """Write `out_dir`/report.html, one self-contained file (charts inline); returns its path."""
    from recreate.ui.evolution import run_view
    from recreate.ui.render import render_run
    from recreate.ui.runs import EvolveRun

    doc = json.loads(json.dumps(dataclasses.asdict(result), default=str))
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / "report.html"
    path.write_text(render_run(run_view(EvolveRun.of_result(Path(result.run_dir), doc))), encoding="utf-8")
    return path


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
