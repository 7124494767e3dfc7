"""mini-swe-agent (PyPI `mini-swe-agent`, 2.x) configs in: a YAML config becomes a Scaffold.

A config has the sections `agent` (system_template, instance_template, step_limit, cost_limit, ...),
`environment` (cwd, timeout, env, environment_class, ...), `model` (model_name, model_class,
observation_template, format_error_template, action_regex, ...) and `run`. Several files merge the way
mini-swe-agent merges its `-c` options (later keys win, mappings merge), so an overlay such as
`swebench_modal.yaml` imports on top of the config it extends.

What maps: the two templates, step_limit -> limits.max_steps, cost_limit -> limits.max_cost_usd,
environment.timeout -> limits.command_timeout_s, and the action style (tool calls, or a text-based model
class). Everything else stays verbatim in `metadata["mini-swe-agent"]` so an export restores it.

Template variables: mini-swe-agent renders its templates with the task, its config fields, the host's
`platform.uname()` and counters; recreate renders ours with its own names. An imported template starts
with a prelude of `{% set %}` lines (between the VARIABLES markers) that gives each mini-swe-agent name the
template reads a value from recreate's names (cwd -> workdir, step_limit -> limits.max_steps, ...), from
the config, or a constant; the export strips it. A name nothing can supply (the model's settings, the
process environment) is refused with a one-line error. Nothing is executed: YAML is read safely.
"""

from __future__ import annotations

import copy
import math
import platform
import re
from pathlib import Path
from typing import Any

import yaml

from recreate.scaffold.errors import ScaffoldError
from recreate.scaffold.model import NAME_PATTERN, Limits, Scaffold
from recreate.scaffold.render import template_variables
from recreate.scaffold.template_safety import unsafe_reason
from recreate.scaffold.validate import Bounds, validate_scaffold

KEY = "mini-swe-agent"  # the metadata entry
SECTIONS = ("agent", "environment", "model", "run")
TEXT_BLOCK = "```mswea_bash_command"  # the text-based action block of mini-swe-agent's own configs
SUBMIT_COMMAND = "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"  # mini-swe-agent's end-of-task protocol
IMPORT_BEGIN, IMPORT_END = "{#recreate: mini-swe-agent variables#}", "{#/recreate#}"
EXPORT_BEGIN, EXPORT_END = "{#mini-swe-agent: recreate variables#}", "{#/mini-swe-agent#}"
MAPPED = {"agent.step_limit", "agent.cost_limit", "environment.timeout"}  # the limits
MAX_CONFIG_BYTES = 1_000_000
MAX_CONFIG_DEPTH = 50
TEMPLATES = {"system_prompt": "system_template", "instance_template": "instance_template"}

# mini-swe-agent's own defaults (minisweagent/agents/default.py AgentConfig, environments/local.py)
AGENT_DEFAULTS: dict[str, Any] = {
    "step_limit": 0,
    "cost_limit": 3.0,
    "wall_time_limit_seconds": 0,
    "max_consecutive_format_errors": 3,
    "output_path": None,
}
ENVIRONMENT_DEFAULTS: dict[str, Any] = {"cwd": "", "env": {}, "timeout": 30}
UNAME = ("system", "node", "release", "version", "machine", "processor")
AT_START = {"n_model_calls": 0, "model_cost": 0.0, "elapsed_seconds": 0}  # their values when prompts render
# mini-swe-agent name -> recreate expression, and the namespaces (system / instance) that supply it
LIVE = {
    "task": ("task", {"instance_template"}),
    "cwd": ("workdir", {"instance_template"}),
    "step_limit": ("limits.max_steps", {"system_prompt", "instance_template"}),
    "cost_limit": ("limits.max_cost_usd", {"system_prompt", "instance_template"}),
    "timeout": ("limits.command_timeout_s", {"system_prompt", "instance_template"}),
}


class MiniSweConfigError(ScaffoldError):
    """A file that is not a mini-swe-agent config, or one recreate cannot represent; one line."""


def jinja_literal(value: Any) -> str:
    """`value` (YAML data) as a Jinja expression that evaluates to it."""
    if value is None:
        return "none"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value) if math.isfinite(value) else jinja_literal(str(value))
    if isinstance(value, list | tuple):
        return "[" + ", ".join(jinja_literal(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{jinja_literal(str(k))}: {jinja_literal(v)}" for k, v in value.items()) + "}"
    text = str(value).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n").replace("\r", "\\r")
    return f'"{text}"'


def jinja_text(text: str) -> str:
    """Plain text as template source that renders to exactly `text`: every `{` becomes an expression, and
    so does every carriage return (Jinja would turn it into a newline)."""
    return text.replace("{", '{{ "{" }}').replace("\r", '{{ "\\r" }}')


def split_prelude(source: str, begin: str, end: str) -> tuple[str, str]:
    """(prelude, body) when `source` starts with a marked prelude, else ("", source)."""
    if source.startswith(begin) and end in source:
        cut = source.index(end) + len(end)
        return source[:cut], source[cut:]
    return "", source


def prelude(assignments: dict[str, str], begin: str, end: str) -> str:
    if not assignments:
        return ""
    return begin + "".join(f"{{% set {n} = {e} %}}" for n, e in sorted(assignments.items())) + end


def check_config_templates(config: dict[str, Any], where: str) -> None:
    """Refuse a config any of whose strings (mini-swe-agent renders its templates unsandboxed) reaches
    Python internals: MiniSweConfigError naming the file and key."""
    for key, value in _strings(config):
        reason = unsafe_reason(value)
        if reason:
            raise MiniSweConfigError(
                f"{where}: {key}: {reason} (mini-swe-agent renders it unsandboxed): remove it"
            )


def _strings(value: Any, key: str = "") -> list[tuple[str, str]]:
    """(dotted key, string) for every string in YAML data."""
    if isinstance(value, str):
        return [(key, value)]
    if isinstance(value, dict):
        return [s for k, v in value.items() for s in _strings(v, f"{key}.{k}" if key else str(k))]
    if isinstance(value, list):
        return [s for i, v in enumerate(value) for s in _strings(v, f"{key}[{i}]")]
    return []


# -- reading ---------------------------------------------------------------------------------------
def merge(*configs: dict[str, Any]) -> dict[str, Any]:
    """mini-swe-agent's merge of several configs: later values win, mappings merge recursively."""
    result: dict[str, Any] = {}
    for config in configs:
        for key, value in config.items():
            if isinstance(value, dict) and isinstance(result.get(key), dict):
                result[key] = merge(result[key], value)
            else:
                result[key] = copy.deepcopy(value)
    return result


def read_config(path: Path) -> dict[str, Any]:
    """One config file as data; MiniSweConfigError when it is not one. The file is at most MAX_CONFIG_BYTES
    and may use no YAML aliases (`*name`): they expand, so a few hundred bytes can become gigabytes."""
    try:
        with path.open("rb") as file:
            raw = file.read(MAX_CONFIG_BYTES + 1)
        if len(raw) > MAX_CONFIG_BYTES:
            raise MiniSweConfigError(
                f"{path}: larger than {MAX_CONFIG_BYTES // 1_000_000} MB; a mini-swe-agent config is a "
                "few kB of YAML: pass the right file"
            )
        text = raw.decode("utf-8")
        _check_events(text, path)
        data = yaml.safe_load(text)
    except OSError as exc:
        raise MiniSweConfigError(f"{path}: cannot read ({exc.strerror or exc})") from None
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        raise MiniSweConfigError(f"{path}: not YAML ({str(exc).splitlines()[0]})") from None
    found = sorted(data) if isinstance(data, dict) else type(data).__name__
    if not isinstance(data, dict) or not data or set(data) - set(SECTIONS):
        hint = "; a recreate scaffold is a directory with scaffold.yaml" if isinstance(data, dict) else ""
        raise MiniSweConfigError(
            f"{path}: not a mini-swe-agent config (expected top-level sections {', '.join(SECTIONS)}; "
            f"found {found}){hint}"
        )
    for section, value in data.items():
        if value is not None and not isinstance(value, dict):
            raise MiniSweConfigError(f"{path}: `{section}:` must be a mapping, got {type(value).__name__}")
    return {section: value or {} for section, value in data.items()}


def _check_events(text: str, path: Path) -> None:
    """Refuse, before anything is built, YAML aliases and nesting deeper than MAX_CONFIG_DEPTH (which
    PyYAML parses in quadratic time and composes recursively)."""
    depth = 0
    for event in yaml.parse(text, Loader=yaml.SafeLoader):
        if isinstance(event, yaml.AliasEvent):
            raise MiniSweConfigError(
                f"{path}: uses YAML aliases (*name), which recreate does not expand: write the values out"
            )
        depth += isinstance(event, yaml.CollectionStartEvent) - isinstance(event, yaml.CollectionEndEvent)
        if depth > MAX_CONFIG_DEPTH:
            raise MiniSweConfigError(
                f"{path}: nested deeper than {MAX_CONFIG_DEPTH} levels; not a mini-swe-agent config"
            )


def is_config(path: Path) -> bool:
    """Whether `path` is a file that reads as a mini-swe-agent config."""
    try:
        return path.is_file() and bool(read_config(path))
    except MiniSweConfigError:
        return False


# -- importing -------------------------------------------------------------------------------------
def _mini_value(name: str, config: dict[str, Any]) -> tuple[str, str] | None:
    """(Jinja expression, note) for a mini-swe-agent name whose value does not depend on our runtime."""
    if name in AT_START:
        return jinja_literal(AT_START[name]), f"{{{{{name}}}}} is {AT_START[name]} when the prompts render"
    if name in UNAME:
        value = getattr(platform.uname(), name)
        return jinja_literal(value), f"{{{{{name}}}}} fixed at import to {value!r} (this machine's)"
    for section, defaults in (("agent", AGENT_DEFAULTS), ("environment", ENVIRONMENT_DEFAULTS)):
        values = {**defaults, **config.get(section, {})}
        if name in values and name not in TEMPLATES.values():
            return jinja_literal(values[name]), f"{{{{{name}}}}} fixed to the config's {section}.{name}"
    return None


def _template_prelude(field: str, source: str, config: dict[str, Any], where: str) -> tuple[str, list[str]]:
    """The import prelude of one template and a note per variable it maps."""
    key = f"agent.{TEMPLATES[field]}"
    try:  # the names a template reads and does not set itself (an export's prelude sets recreate's)
        used = template_variables(source)
    except Exception as exc:  # a syntax error or a bound hit: say where
        raise MiniSweConfigError(f"{where}: {key} is not a valid template ({exc})") from None
    assignments, notes = {}, []
    for name in sorted(used):
        if name in LIVE:
            expression, fields = LIVE[name]
            if field not in fields:
                raise MiniSweConfigError(
                    f"{where}: {key} uses {{{{{name}}}}}, which recreate gives only to the instance "
                    f"template; move it to agent.instance_template"
                )
            if expression != name:
                assignments[name] = expression
                notes.append(f"{{{{{name}}}}} -> {{{{{expression}}}}}")
            continue
        fixed = _mini_value(name, config)
        if fixed is None:
            source_of = (
                "the model's settings, which recreate chooses when it runs the agent"
                if name in config.get("model", {})
                else "mini-swe-agent's process environment or a run argument"
            )
            raise MiniSweConfigError(
                f"{where}: {key} uses {{{{{name}}}}}, which recreate cannot supply (it comes from "
                f"{source_of}); replace it with text"
            )
        assignments[name], note = fixed
        notes.append(note)
    if field == "instance_template" and "task" not in used:  # the task lives elsewhere (e.g. the workspace)
        assignments["task"] = "task"
        notes.append("never shows {{task}}, as in mini-swe-agent (the prelude reads it, as recreate needs)")
    return prelude(assignments, IMPORT_BEGIN, IMPORT_END) + source, notes


def _limit(value: Any, default: float, bound: float, key: str, field: str, notes: list[str]) -> float:
    """A mini-swe-agent limit (0: none) as ours (positive for steps, inside recreate's bounds)."""
    number = float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None
    whole = field != "max_steps" or number is None or number.is_integer()
    if number is None or not math.isfinite(number) or number < 0 or not whole:
        kind = "a whole number" if field == "max_steps" else "a number"
        raise MiniSweConfigError(f"{key} must be {kind} >= 0 (0: no limit), got {value!r}")
    if number == 0 and field != "max_cost_usd":
        notes.append(f"{key} {value} (no limit) -> limits.{field} {default:g} (recreate's default)")
        return default
    if number > bound:
        notes.append(f"{key} {value} exceeds recreate's bound -> limits.{field} {bound:g}")
        return bound
    notes.append(f"{key} {value} -> limits.{field}")
    return number


def _limits(agent: dict[str, Any], environment: dict[str, Any], notes: list[str]) -> Limits:
    """The config's limits as ours; MiniSweConfigError naming the key of a bad one."""
    bounds, defaults = Bounds(), Limits()
    return Limits(
        max_steps=int(
            _limit(agent.get("step_limit", 0), defaults.max_steps, bounds.max_steps,
                   "agent.step_limit", "max_steps", notes)
        ),
        max_cost_usd=_limit(agent.get("cost_limit", AGENT_DEFAULTS["cost_limit"]), 0, bounds.max_cost_usd,
                            "agent.cost_limit", "max_cost_usd", notes),
        command_timeout_s=_limit(environment.get("timeout", ENVIRONMENT_DEFAULTS["timeout"]),
                                 defaults.command_timeout_s, bounds.command_timeout_s,
                                 "environment.timeout", "command_timeout_s", notes),
    )  # fmt: skip


def scaffold_name(paths: list[Path]) -> str:
    stem = re.sub(r"[^a-z0-9_.-]+", "-", paths[0].stem.lower()).strip("-._") or "imported"
    name = stem[:64]
    if not re.match(NAME_PATTERN, name):
        raise MiniSweConfigError(f"{paths[0]}: cannot name the scaffold after it; pass --name")
    return name


def import_config(
    paths: list[Path], *, name: str | None = None, domain: str = "swe"
) -> tuple[Scaffold, list[str]]:
    """Merged mini-swe-agent configs as a validated Scaffold, with one note per mapping decision."""
    where = " + ".join(str(p) for p in paths)
    config = merge(*(read_config(p) for p in paths))
    check_config_templates(config, where)
    agent = config.get("agent", {})
    missing = [k for k in TEMPLATES.values() if not isinstance(agent.get(k), str) or not agent[k].strip()]
    if missing:
        raise MiniSweConfigError(
            f"{where}: no agent.{' or agent.'.join(missing)}; an overlay config imports after the config "
            f"it extends (recreate scaffold import BASE.yaml {paths[-1].name} DIR)"
        )
    notes: list[str] = []
    templates = {}
    for field, key in TEMPLATES.items():
        templates[field], mapped = _template_prelude(field, agent[key], config, where)
        notes.append(f"agent.{key} -> {field}" + (f" ({'; '.join(mapped)})" if mapped else ""))
    environment, model = config.get("environment", {}), config.get("model", {})
    try:
        limits = _limits(agent, environment, notes)
    except MiniSweConfigError as exc:
        raise MiniSweConfigError(f"{where}: {exc}") from None
    text = "textbased" in str(model.get("model_class", "")) or "action_regex" in model
    asked = any(TEXT_BLOCK in agent[key] for key in TEMPLATES.values())
    if text or asked:
        how = "the model class or action_regex" if text else f"the templates ask for {TEXT_BLOCK} blocks"
        notes.append(f"action style: text ({how})")
    else:
        notes.append("action style: tool calls")
    kept = copy.deepcopy(config)
    for key in TEMPLATES.values():
        del kept["agent"][key]
    listed = [f"{s}.{k}" for s in SECTIONS for k in kept.get(s, {}) if f"{s}.{k}" not in MAPPED]
    if listed:
        notes.append(f"kept for export only (no recreate equivalent): {', '.join(listed)}")
    scaffold = Scaffold(
        name=name or scaffold_name(paths),
        domain=domain,
        description=f"Imported from the mini-swe-agent config {', '.join(p.name for p in paths)}.",
        system_prompt=templates["system_prompt"],
        instance_template=templates["instance_template"],
        action_format="text" if text or asked else "tool_calls",
        limits=limits,
        metadata={KEY: {"config": kept, "limits": limits.model_dump()}},
    )
    try:
        validate_scaffold(scaffold)
    except ScaffoldError as exc:
        problems = getattr(exc, "problems", None)
        detail = "; ".join(str(p) for p in problems) if problems else str(exc)
        raise MiniSweConfigError(f"{where}: {detail}") from None
    return scaffold, notes
