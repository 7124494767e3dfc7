"""Validation: everything a scaffold must satisfy before it is stored or run.

Static checks (always): templates parse, name no Python internals in any branch (`template_safety`),
and render under StrictUndefined with sample values, the instance template uses {{ task }}, limits
and sizes inside `Bounds`, names and ids unique and well-formed, tool argument schemas valid, Python
tool code compiles (compile() only parses).
Sandbox checks (when a sandbox is given, for every tool without static problems): shell tools pass
`bash -n` and every tool's smoke test passes, each tool in a fresh session. The sandbox is an opened
backend object: naming one ("bwrap") is resolved by the caller (`recreate.sandbox.get_sandbox`), so this
package sits below the sandbox registry and imports only its base types.
All problems are collected, then raised together.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING

from jinja2 import TemplateSyntaxError

from recreate.sandbox.base import SandboxSpec
from recreate.scaffold.args_schema import MAX_SCHEMA_DEPTH, argument_errors, nesting_depth, schema_problem
from recreate.scaffold.errors import Problem, ScaffoldError, ScaffoldValidationError
from recreate.scaffold.files import MEMORY_FILE, SCAFFOLD_FILE, TOOL_FILE, TOOLS_DIR
from recreate.scaffold.model import RESERVED_TOOL_NAMES, TOOL_ROOT, Scaffold, Tool
from recreate.scaffold.render import (
    SAMPLE_TASK,
    instance_variables,
    render_template,
    system_variables,
    template_variables,
)
from recreate.scaffold.template_safety import unsafe_reason

if TYPE_CHECKING:
    from recreate.sandbox.base import Sandbox, Session


@dataclass(frozen=True)
class Bounds:
    """Limits set outside the scaffold: no edit can raise a scaffold's budget or size past them."""

    max_steps: int = 250
    max_cost_usd: float = 10.0
    command_timeout_s: float = 900.0
    max_prompt_chars: int = 40_000  # system prompt + instance template + all rule texts
    max_rules: int = 200
    max_tools: int = 32
    max_memory: int = 5_000
    max_tool_code_chars: int = 100_000
    smoke_timeout_s: float = 60.0


def validate_scaffold(
    scaffold: Scaffold,
    sandbox: Sandbox | None = None,
    bounds: Bounds | None = None,
    spec: SandboxSpec | None = None,
) -> None:
    """Raise ScaffoldValidationError listing every problem; return None when all checks pass."""
    bounds = bounds or Bounds()
    problems = static_problems(scaffold, bounds)
    if sandbox is not None:
        broken = {p.file.split("/")[1] for p in problems if p.file.startswith(f"{TOOLS_DIR}/")}
        sound = [tool for tool in scaffold.tools if tool.name not in broken]
        problems += sandbox_problems(scaffold.model_copy(update={"tools": sound}), sandbox, bounds, spec)
    if problems:
        raise ScaffoldValidationError(problems, source=scaffold.ref or scaffold.name)


def static_problems(scaffold: Scaffold, bounds: Bounds) -> list[Problem]:
    return [
        *_template_problems(scaffold),
        *_bound_problems(scaffold, bounds),
        *_uniqueness_problems(scaffold),
        *[p for tool in scaffold.tools for p in _tool_problems(tool, bounds)],
    ]


def _template_problems(scaffold: Scaffold) -> list[Problem]:
    problems = []
    samples = {
        "system_prompt": system_variables(scaffold),
        "instance_template": instance_variables(
            scaffold, SAMPLE_TASK, task_id="sample-1", files=["input.txt"]
        ),
    }
    for field, variables in samples.items():
        source = getattr(scaffold, field)
        try:
            used = template_variables(source)
        except TemplateSyntaxError as exc:
            problems.append(
                Problem(SCAFFOLD_FILE, field, f"template syntax error at line {exc.lineno}: {exc.message}")
            )
            continue
        except ScaffoldError as exc:  # a bound hit while reading its variables
            problems.append(Problem(SCAFFOLD_FILE, field, str(exc)))
            continue
        unsafe = unsafe_reason(source)  # every branch, taken or not: exports render it unsandboxed
        if unsafe:
            problems.append(
                Problem(SCAFFOLD_FILE, field, f"{unsafe} (an export renders it unsandboxed): remove it")
            )
            continue
        unknown = sorted(used - set(variables))
        if unknown:
            problems.append(
                Problem(
                    SCAFFOLD_FILE,
                    field,
                    f"unknown template variable(s) {', '.join(unknown)}; "
                    f"available: {', '.join(sorted(variables))}",
                )
            )
            continue
        if field == "instance_template" and "task" not in used:
            problems.append(Problem(SCAFFOLD_FILE, field, "must use {{ task }} (the task text goes there)"))
        try:
            render_template(source, variables, field)
        except ScaffoldError as exc:
            problems.append(Problem(SCAFFOLD_FILE, field, f"does not render with sample values: {exc}"))
    return problems


def _bound_problems(scaffold: Scaffold, bounds: Bounds) -> list[Problem]:
    problems = []
    for field in ("max_steps", "max_cost_usd", "command_timeout_s"):
        value, bound = getattr(scaffold.limits, field), getattr(bounds, field)
        if value > bound:
            problems.append(
                Problem(SCAFFOLD_FILE, f"limits.{field}", f"{value} exceeds the configured bound {bound}")
            )
    prompt_chars = (
        len(scaffold.system_prompt)
        + len(scaffold.instance_template)
        + sum(len(r.text) for r in scaffold.rules)
    )
    counts = [
        (
            SCAFFOLD_FILE,
            "system_prompt",
            prompt_chars,
            bounds.max_prompt_chars,
            "prompt characters (incl. rules)",
        ),
        (SCAFFOLD_FILE, "rules", len(scaffold.rules), bounds.max_rules, "rules"),
        (SCAFFOLD_FILE, "tools", len(scaffold.tools), bounds.max_tools, "tools"),
        (MEMORY_FILE, "", len(scaffold.memory), bounds.max_memory, "memory items"),
    ]
    for file, field, value, bound, what in counts:
        if value > bound:
            problems.append(Problem(file, field, f"{value} {what} exceed the configured bound {bound}"))
    return problems


def _uniqueness_problems(scaffold: Scaffold) -> list[Problem]:
    problems = []
    for label, file, ids in (
        ("rule id", SCAFFOLD_FILE, [r.id for r in scaffold.rules]),
        ("tool name", SCAFFOLD_FILE, [t.name for t in scaffold.tools]),
        ("memory id", MEMORY_FILE, [m.id for m in scaffold.memory]),
    ):
        field = {"rule id": "rules", "tool name": "tools", "memory id": "id"}[label]
        for value, count in Counter(ids).items():
            if count > 1:
                problems.append(Problem(file, field, f"duplicate {label} {value!r} ({count} times)"))
    for i, tool in enumerate(scaffold.tools):
        if tool.name in RESERVED_TOOL_NAMES:
            problems.append(
                Problem(
                    SCAFFOLD_FILE,
                    f"tools[{i}]",
                    f"{tool.name!r} is reserved for the agent runtime "
                    f"({', '.join(sorted(RESERVED_TOOL_NAMES))})",
                )
            )
    return problems


def _tool_problems(tool: Tool, bounds: Bounds) -> list[Problem]:
    spec_file = f"{TOOLS_DIR}/{tool.name}/{TOOL_FILE}"
    code_file = f"{TOOLS_DIR}/{tool.name}/{tool.entry_file}"
    problems = []
    if len(tool.code) > bounds.max_tool_code_chars:
        problems.append(
            Problem(
                code_file, "", f"{len(tool.code)} characters exceed the bound {bounds.max_tool_code_chars}"
            )
        )
    if tool.language == "python":
        try:
            compile(tool.code, code_file, "exec", dont_inherit=True)
        except (SyntaxError, ValueError) as exc:
            line = getattr(exc, "lineno", None)
            problems.append(
                Problem(
                    code_file,
                    "",
                    f"Python syntax error{f' at line {line}' if line else ''}: {getattr(exc, 'msg', exc)}",
                )
            )
    if tool.args.get("type") != "object":
        problems.append(
            Problem(spec_file, "args.type", "the args schema must be a JSON schema with type: object")
        )
    unusable = schema_problem(tool.args)
    if unusable:
        problems.append(Problem(spec_file, "args", unusable))
        return problems
    if tool.smoke is None:
        return problems
    return problems + _smoke_args_problems(tool, spec_file)


def _smoke_args_problems(tool: Tool, spec_file: str) -> list[Problem]:
    assert tool.smoke is not None
    if nesting_depth(tool.smoke.args) > MAX_SCHEMA_DEPTH:
        return [Problem(spec_file, "smoke.args", f"nested deeper than {MAX_SCHEMA_DEPTH} levels")]
    try:
        errors = argument_errors(tool.args, tool.smoke.args, "")
    except ScaffoldError as exc:  # a regex of the schema ran past its time
        return [Problem(spec_file, "smoke.args", str(exc))]
    return [
        Problem(
            spec_file,
            ".".join(["smoke.args", *(str(part) for part in path)]),
            f"does not match the args schema: {message}",
        )
        for path, message in errors
    ]


def install_tools(session: Session, tools: list[Tool], root: str = TOOL_ROOT) -> None:
    """Put the tools' files into a session's workspace so that `Tool.command` runs them."""
    for tool in tools:
        session.put(tool.sandbox_path(root), tool.code)


def sandbox_problems(
    scaffold: Scaffold, box: Sandbox, bounds: Bounds, spec: SandboxSpec | None = None
) -> list[Problem]:
    if isinstance(box, str):
        raise TypeError(f"sandbox={box!r}: pass a Sandbox object, e.g. recreate.sandbox.get_sandbox({box!r})")
    timeout = min(scaffold.limits.command_timeout_s, bounds.smoke_timeout_s)
    problems = []
    for tool in scaffold.tools:
        key = _smoke_key(box, spec, tool, timeout)
        if key in _PASSED_SMOKE:
            continue
        with box.open(spec or SandboxSpec()) as session:
            found = _smoke_problems(session, tool, timeout)
        if not found:
            _PASSED_SMOKE.add(key)
        problems.extend(found)
    return problems


# Smoke tests that passed in this process, by (backend, spec, tool content, timeout): an evolve run
# validates the same tools many times (proposal dry runs, synthesis, commit), and they do not change.
_PASSED_SMOKE: set[str] = set()


def _smoke_key(box: Sandbox, spec: SandboxSpec | None, tool: Tool, timeout: float) -> str:
    ident = [getattr(box, "name", type(box).__name__), repr(spec), tool.model_dump(mode="json"), timeout]
    return hashlib.sha256(json.dumps(ident, sort_keys=True, default=str).encode()).hexdigest()


def _smoke_problems(session: Session, tool: Tool, timeout: float) -> list[Problem]:
    code_file = f"{TOOLS_DIR}/{tool.name}/{tool.entry_file}"
    spec_file = f"{TOOLS_DIR}/{tool.name}/{TOOL_FILE}"
    install_tools(session, [tool])
    if tool.language == "bash":
        check = session.run(f"bash -n {tool.sandbox_path()}", timeout=timeout)
        if not check.ok:
            return [Problem(code_file, "", f"shell syntax error: {_tail(check.stderr or check.stdout)}")]
    smoke = tool.smoke
    if smoke is None:
        return []
    result = session.run(tool.command(smoke.args), timeout=timeout)
    if result.timed_out:
        return [Problem(spec_file, "smoke", f"smoke test timed out after {timeout:g} s")]
    if result.exit_code != smoke.exit_code:
        return [
            Problem(
                spec_file,
                "smoke.exit_code",
                f"smoke test exited {result.exit_code}, expected "
                f"{smoke.exit_code}; stderr: {_tail(result.stderr)}",
            )
        ]
    if smoke.expect not in result.stdout:
        return [
            Problem(
                spec_file,
                "smoke.expect",
                f"smoke test stdout lacks {smoke.expect!r}; got: {_tail(result.stdout)}",
            )
        ]
    return []


def _tail(text: str, limit: int = 300) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else "..." + text[-limit:]
