"""A Scaffold out as a mini-swe-agent (2.x) config: `recreate scaffold export SCAFFOLD CONFIG.yaml
--format mini-swe-agent`.

The templates come back without the import prelude (mini-swe-agent supplies its own names); a template
that reads recreate's names (workdir, limits, domain, ...) gets an export prelude that computes them from
mini-swe-agent's. What the scaffold learned and mini-swe-agent has no place for is rendered as text
into the system template: the rules, the memory items (in full: there is no search_memory tool), the
worked examples and the tools, whose scripts are written beside the config (`<stem>_tools/<name>/`) for
an environment that can run them (local: by their path; docker: mounted read-only). A scaffold that did
not come from mini-swe-agent also gets mini-swe-agent's way of acting and submitting. Everything else of
an imported config (environment, model, other agent keys) is restored from its metadata; limits are
written back as imported unless the scaffold changed them.
"""

from __future__ import annotations

import copy
import json
import math
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from recreate.scaffold.errors import ScaffoldError
from recreate.scaffold.files import _dump_yaml
from recreate.scaffold.mini_swe import (
    EXPORT_BEGIN,
    EXPORT_END,
    IMPORT_BEGIN,
    IMPORT_END,
    KEY,
    SUBMIT_COMMAND,
    TEMPLATES,
    check_config_templates,
    jinja_literal,
    jinja_text,
    prelude,
    split_prelude,
)
from recreate.scaffold.model import INTERPRETERS, Scaffold
from recreate.scaffold.render import render_rules, template_variables

DOCKER_TOOL_ROOT = "/opt/recreate_tools"
TEXT_ACTION_REGEX = r"```(?:bash|mswea_bash_command)\s*\n(.*?)\n```"  # recreate's text blocks too


@dataclass
class Exported:
    path: Path
    tools_dir: Path | None = None
    notes: list[str] = field(default_factory=list)


def _ours(scaffold: Scaffold) -> dict[str, str]:
    """recreate's template names as expressions over mini-swe-agent's."""
    return {
        "workdir": '(cwd or ".")',
        "limits": '{"max_steps": step_limit, "max_cost_usd": cost_limit, "command_timeout_s": timeout}',
        "task_id": '""',
        "files": "[]",
        "domain": jinja_literal(scaffold.domain),
        "name": jinja_literal(scaffold.name),
        "description": jinja_literal(scaffold.description),
        "action_format": jinja_literal(scaffold.action_format),
        "tools": jinja_literal([{"name": t.name, "description": t.description} for t in scaffold.tools]),
    }


def export_template(scaffold: Scaffold, source: str) -> str:
    """A scaffold template as mini-swe-agent template source."""
    _, body = split_prelude(source, IMPORT_BEGIN, IMPORT_END)
    _, body = split_prelude(body, EXPORT_BEGIN, EXPORT_END)
    ours = _ours(scaffold)
    needed = {name: ours[name] for name in template_variables(body) if name in ours}
    return prelude(needed, EXPORT_BEGIN, EXPORT_END) + body


def _acting(scaffold: Scaffold) -> str:
    how = (
        "Reply with exactly one fenced ```bash block holding one command."
        if scaffold.action_format == "text"
        else "Call the `bash` tool with one command per reply."
    )
    return (
        f"## How to act\n{how} When you are done, run `{SUBMIT_COMMAND}` on its own, or with your final "
        f"answer printed on the lines after it (`{SUBMIT_COMMAND}; echo 42`): its output after the first "
        "line is your submission."
    )


def _tools_section(scaffold: Scaffold, root: str) -> str:
    lines = ["## Tools (scripts; pass the arguments as one JSON object)"]
    for tool in scaffold.tools:
        run = f"{INTERPRETERS[tool.language]} {root}/{tool.name}/{tool.entry_file} '<JSON arguments>'"
        schema = json.dumps(tool.args, separators=(",", ":"))
        lines.append(f"- `{tool.name}`: {tool.description} Run: `{run}`; arguments schema: {schema}")
    return "\n".join(lines)


def _memory_section(scaffold: Scaffold) -> str:
    items = "\n".join(f"- [{m.id}] {m.title}: {m.content}" for m in scaffold.memory)
    return f"## Memory (lessons from earlier tasks)\n{items}"


def _examples_section(scaffold: Scaffold) -> str:
    parts = ["## Worked examples"]
    for n, example in enumerate(scaffold.examples, start=1):
        lines = [f"### Example {n}", f"Task: {example.task}"]
        for step in example.steps:
            if step.command is not None:
                lines.append(f"$ {step.command}" + (f"\n{step.output}" if step.output else ""))
            else:
                lines.append(f"$ {SUBMIT_COMMAND}; echo {json.dumps(step.submit)}")
        parts.append("\n".join(lines))
    return "\n\n".join(parts)


def _tool_root(scaffold: Scaffold, config: dict[str, Any], tools_dir: Path, notes: list[str]) -> str | None:
    """Where the exported tool scripts are inside the config's environment (None: it cannot carry them)."""
    environment = config.setdefault("environment", {})
    kind = str(environment.get("environment_class", "local"))
    if kind.endswith(("local", "LocalEnvironment")):
        return str(tools_dir.resolve())
    if kind.endswith(("docker", "DockerEnvironment")):
        mount = f"{tools_dir.resolve()}:{DOCKER_TOOL_ROOT}:ro"
        environment["run_args"] = [*environment.get("run_args", ["--rm"]), "-v", mount]
        notes.append(f"tools mounted read-only into the container at {DOCKER_TOOL_ROOT}")
        return DOCKER_TOOL_ROOT
    names = ", ".join(t.name for t in scaffold.tools)
    notes.append(
        f"cannot carry tools into environment_class {kind!r} (only local and docker receive the scripts); "
        f"left out: {names}"
    )
    return None


def _limits(scaffold: Scaffold, meta: dict[str, Any], config: dict[str, Any], notes: list[str]) -> None:
    if meta and meta.get("limits") == scaffold.limits.model_dump():
        return  # unchanged since the import: the config keeps its own values (0 = no limit, ...)
    limits = scaffold.limits
    config.setdefault("agent", {}).update(step_limit=limits.max_steps, cost_limit=limits.max_cost_usd)
    config.setdefault("environment", {})["timeout"] = math.ceil(limits.command_timeout_s)
    notes.append(
        f"limits: step_limit {limits.max_steps}, cost_limit {limits.max_cost_usd:g}, "
        f"timeout {math.ceil(limits.command_timeout_s)} s"
    )


def build_config(scaffold: Scaffold, tools_dir: Path) -> tuple[dict[str, Any], list[str], bool]:
    """The config data for `scaffold` (tools referenced under `tools_dir`), notes on what was done, and
    whether the tools' scripts are part of it."""
    meta = scaffold.metadata.get(KEY) or {}
    config = copy.deepcopy(meta.get("config") or {})
    notes: list[str] = []
    if not meta:  # a recreate scaffold: mini-swe-agent's defaults, with the action style it was built for
        config["model"] = (
            {"model_class": "litellm_textbased", "action_regex": TEXT_ACTION_REGEX}
            if scaffold.action_format == "text"
            else {}
        )
        notes.append(
            "no mini-swe-agent config behind this scaffold: its environment defaults to local (no sandbox)"
        )
    sections = [_acting(scaffold)] if not meta else []
    rules = render_rules(scaffold)
    sections += [rules] if rules else []
    sections += [_memory_section(scaffold)] if scaffold.memory else []
    sections += [_examples_section(scaffold)] if scaffold.examples else []
    root = _tool_root(scaffold, config, tools_dir, notes) if scaffold.tools else None
    sections += [_tools_section(scaffold, root)] if root else []
    agent = config.setdefault("agent", {})
    for ours, theirs in TEMPLATES.items():
        agent[theirs] = export_template(scaffold, getattr(scaffold, ours))
    if sections:
        added = jinja_text("\n\n".join(sections))
        agent["system_template"] = agent["system_template"].rstrip("\n") + "\n\n" + added + "\n"
        headings = ", ".join(section.split("\n", 1)[0].lstrip("# ") for section in sections)
        notes.append(f"rendered into agent.system_template: {headings}")
    _limits(scaffold, meta, config, notes)
    ordered = {key: config[key] for key in ("agent", "environment", "model", "run") if key in config}
    return ordered, notes, root is not None


def export_config(scaffold: Scaffold, dest: str | Path) -> Exported:
    """Write `scaffold` as a mini-swe-agent config at `dest` (a new file), its tools beside it."""
    dest = Path(dest)
    if dest.exists():
        raise ScaffoldError(f"{dest} already exists; choose a new path")
    tools_dir = dest.with_name(f"{dest.stem}_tools")
    if scaffold.tools and tools_dir.exists():
        raise ScaffoldError(f"{tools_dir} (for the tools) already exists; choose another config name")
    config, notes, carried = build_config(scaffold, tools_dir)
    check_config_templates(config, f"{scaffold.ref or scaffold.name}")  # mini-swe-agent renders unsandboxed
    dest.parent.mkdir(parents=True, exist_ok=True)
    if carried:
        for tool in scaffold.tools:
            script = tools_dir / tool.name / tool.entry_file
            script.parent.mkdir(parents=True, exist_ok=True)
            script.write_text(tool.code, encoding="utf-8")
    fd, tmp = tempfile.mkstemp(prefix=f".{dest.name}.", dir=dest.parent)
    with os.fdopen(fd, "wb") as out:
        out.write(_dump_yaml(config))
    os.replace(tmp, dest)
    return Exported(dest, tools_dir if carried else None, notes)
