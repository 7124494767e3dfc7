"""Render a scaffold's prompts for a task.

Templates are Jinja2 under StrictUndefined in an immutable sandboxed environment: prompts may be
written by a model, and rendering one must never reach host code, nor hang or exhaust the host (they
render in a bounded worker process, see `recreate.scaffold.bounded`).

System prompt variables: name, domain, description, action_format, limits, tools (name, description).
Instance template variables: task (required), task_id, workdir, files, domain, action_format, limits,
plus any extra keyword the caller passes.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from jinja2 import StrictUndefined
from jinja2.sandbox import ImmutableSandboxedEnvironment

from recreate.scaffold.bounded import names_bounded, render_bounded
from recreate.scaffold.errors import ScaffoldError
from recreate.scaffold.model import Scaffold

_env = ImmutableSandboxedEnvironment(undefined=StrictUndefined, keep_trailing_newline=True, autoescape=False)

SAMPLE_TASK = "Sample task: compute 2 + 2 and submit the result."


def system_variables(scaffold: Scaffold) -> dict[str, Any]:
    return {
        "name": scaffold.name,
        "domain": scaffold.domain,
        "description": scaffold.description,
        "action_format": scaffold.action_format,
        "limits": scaffold.limits.model_dump(),
        "tools": [{"name": t.name, "description": t.description} for t in scaffold.tools],
    }


def instance_variables(scaffold: Scaffold, task: str, **extra: Any) -> dict[str, Any]:
    values: dict[str, Any] = {
        "task_id": "",
        "workdir": "/workspace",
        "files": [],
        "domain": scaffold.domain,
        "action_format": scaffold.action_format,
        "limits": scaffold.limits.model_dump(),
    }
    values.update(extra)
    values["task"] = task
    return values


def render_template(source: str, variables: dict[str, Any], what: str = "template") -> str:
    """Render an (untrusted) template under the time, memory and output bounds of `render_bounded`."""
    return render_bounded(source, variables, what)


@lru_cache(maxsize=512)
def template_variables(source: str) -> frozenset[str]:
    """Names a template reads from its context (raises jinja2.TemplateSyntaxError, or ScaffoldError
    when finding them hits a bound)."""
    try:
        _env.parse(source)  # parsing evaluates nothing; a syntax error is raised here
    except RecursionError:  # Jinja's parser recurses per bracket: `{{ ((((...)))) }}` needs no loop
        raise ScaffoldError("the template is nested too deeply to parse (brackets or blocks)") from None
    return names_bounded(source)


def render_rules(scaffold: Scaffold) -> str:
    if not scaffold.rules:
        return ""
    lines = []
    for rule in scaffold.rules:
        scope = "" if rule.scope == "general" else f" (scope: {rule.scope})"
        lines.append(f"- [{rule.id}]{scope} {rule.text}")
    return "## Rules\n" + "\n".join(lines)


def render_system(scaffold: Scaffold) -> str:
    """The full system message: the rendered system prompt, then the rules."""
    prompt = render_template(scaffold.system_prompt, system_variables(scaffold), "system_prompt").strip()
    rules = render_rules(scaffold)
    return f"{prompt}\n\n{rules}" if rules else prompt


def render_instance(scaffold: Scaffold, task: str, **extra: Any) -> str:
    """The first user message for one task."""
    variables = instance_variables(scaffold, task, **extra)
    return render_template(scaffold.instance_template, variables, "instance_template").strip()
