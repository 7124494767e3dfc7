"""What the model can do: `bash`, the scaffold's own tools, `search_memory` and `submit`.

Every command runs inside the sandbox session; nothing the model writes runs on the host. A `ToolBox`
turns one action (tool name + JSON args) into a `ToolResult`: the text the model reads back, what the
sandbox observed, and the submission when the action was `submit`.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

import jsonschema

from recreate.experience.schema import Observation
from recreate.sandbox.base import Result, Session
from recreate.scaffold.args_schema import MAX_SCHEMA_DEPTH, needs_bounding, nesting_depth, schema_problem
from recreate.scaffold.bounded import schema_errors_bounded
from recreate.scaffold.errors import ScaffoldError
from recreate.scaffold.files import TOOL_FILE, TOOLS_DIR
from recreate.scaffold.model import MemoryItem, Scaffold, Tool
from recreate.scaffold.validate import install_tools
from recreate.text import clip_middle

# mini-swe-agent's convention: a command whose output starts with this line submits the rest of its output
SUBMIT_MARKER = "COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"
OBSERVATION_CHARS = 10_000  # what the model reads back per command (head + tail); the step keeps more

BASH_SPEC = {
    "name": "bash",
    "description": "Run a bash command in the task's workspace (a sandbox without network). "
    "Each call starts a fresh shell in the workspace directory.",
    "parameters": {
        "type": "object",
        "properties": {"command": {"type": "string", "description": "the command line to run"}},
        "required": ["command"],
    },
}
SUBMIT_SPEC = {
    "name": "submit",
    "description": "Submit the final answer and end the task. Call it exactly once, when done.",
    "parameters": {
        "type": "object",
        "properties": {"answer": {"type": "string", "description": "the final answer or solution"}},
        "required": ["answer"],
    },
}
MEMORY_SPEC = {
    "name": "search_memory",
    "description": "Search lessons learned on earlier tasks of this domain; returns the best matches.",
    "parameters": {
        "type": "object",
        "properties": {"query": {"type": "string", "description": "what you want to know"}},
        "required": ["query"],
    },
}


class ActionError(ValueError):
    """The model asked for something malformed (unknown tool, arguments not matching the schema)."""


@dataclass
class ToolResult:
    text: str  # what the model reads back
    observation: Observation | None = None  # what the sandbox observed (None for memory/submit)
    submission: str | None = None  # set by `submit`


def tool_specs(scaffold: Scaffold) -> list[dict[str, Any]]:
    """Function specs (OpenAI format, without the outer "type") for every tool the model may call.
    Raises ScaffoldError naming the tool's file when its args schema is unusable: a scaffold loaded
    from a folder is not validated, and LangChain inlines a schema's $refs (2**40 values for a few
    hundred bytes) to show it to a model."""
    for tool in scaffold.tools:
        problem = _args_problem(tool.args)
        if problem:
            raise ScaffoldError(f"{TOOLS_DIR}/{tool.name}/{TOOL_FILE}: args: {problem}")
    specs = [BASH_SPEC]
    specs += [{"name": t.name, "description": t.description, "parameters": t.args} for t in scaffold.tools]
    if scaffold.memory:
        specs.append(MEMORY_SPEC)
    specs.append(SUBMIT_SPEC)
    return specs


_ARGS_PROBLEMS: dict[str, str | None] = {}  # schema JSON -> its problem: agents are built per run


def _args_problem(args: dict[str, Any]) -> str | None:
    if nesting_depth(args) > MAX_SCHEMA_DEPTH:  # before json.dumps, which recurses
        return schema_problem(args)
    key = json.dumps(args, default=repr)
    if key not in _ARGS_PROBLEMS:
        if len(_ARGS_PROBLEMS) >= 256:
            _ARGS_PROBLEMS.clear()
        _ARGS_PROBLEMS[key] = schema_problem(args)
    return _ARGS_PROBLEMS[key]


def observation_of(result: Result) -> Observation:
    return Observation(
        stdout=result.stdout,
        stderr=result.stderr,
        exit_code=result.exit_code,
        duration_s=round(result.duration_s, 4),
        timed_out=result.timed_out,
        stdout_truncated=result.stdout_truncated,
        stderr_truncated=result.stderr_truncated,
    )


def format_observation(result: Result, timeout: float) -> str:
    parts = [f"exit_code: {result.exit_code}"]
    if result.timed_out:
        parts.append(f"timed out after {timeout:g} s; the command was killed")
    if result.stdout:
        parts.append("stdout:\n" + clip_middle(result.stdout, OBSERVATION_CHARS))
    if result.stderr:
        parts.append("stderr:\n" + clip_middle(result.stderr, OBSERVATION_CHARS))
    if result.stdout_truncated or result.stderr_truncated:
        parts.append("(output was longer than the sandbox keeps; its middle was dropped)")
    return "\n".join(parts)


_WORD = re.compile(r"[a-z0-9_]+")


def search_memory(items: list[MemoryItem], query: str, k: int = 3) -> list[MemoryItem]:
    """Items ranked by shared words with the query (title and tags weigh double); ties keep file order."""
    words = set(_WORD.findall(query.lower()))
    scored = []
    for order, item in enumerate(items):
        head = set(_WORD.findall(f"{item.title} {' '.join(item.tags)}".lower()))
        body = set(_WORD.findall(item.content.lower()))
        score = 2 * len(words & head) + len(words & body)
        if score:
            scored.append((-score, order, item))
    return [item for _, _, item in sorted(scored, key=lambda s: s[:2])[:k]]


def format_memory(items: list[MemoryItem]) -> str:
    if not items:
        return "no memory item matches; try other words"
    return "\n\n".join(f"[{m.id}] {m.title}\n{m.content}" for m in items)


class ToolBox:
    """Runs actions in one sandbox session. `install()` puts the scaffold's tool scripts there first."""

    def __init__(self, scaffold: Scaffold, session: Session, *, command_timeout_s: float | None = None):
        self.scaffold = scaffold
        self.session = session
        self.timeout = command_timeout_s or scaffold.limits.command_timeout_s
        self._tools: dict[str, Tool] = {t.name: t for t in scaffold.tools}
        specs = tool_specs(scaffold)
        self._validators = {
            spec["name"]: jsonschema.Draft202012Validator(spec["parameters"]) for spec in specs
        }
        self._bounded = {spec["name"] for spec in specs if needs_bounding(spec["parameters"])}

    def install(self) -> None:
        install_tools(self.session, self.scaffold.tools)

    def names(self) -> list[str]:
        return list(self._validators)

    def check(self, name: str, args: Any) -> None:
        """Raise ActionError when `name` is unknown or `args` do not match its schema."""
        if name not in self._validators:
            raise ActionError(f"unknown tool {name!r}; available: {', '.join(self._validators)}")
        if not isinstance(args, dict):
            raise ActionError(f"arguments of {name!r} must be a JSON object, got {type(args).__name__}")
        if name in self._bounded:  # regexes, $refs: checked in a bounded process
            self._check_bounded(name, args)
            return
        validator = self._validators[name]
        if validator.is_valid(args):
            return
        error = jsonschema.exceptions.best_match(validator.iter_errors(args))
        if error is not None:
            raise ActionError(f"bad arguments for {name!r}: {error.message}")

    def _check_bounded(self, name: str, args: dict[str, Any]) -> None:
        try:
            errors = schema_errors_bounded(self._validators[name].schema, args, f"arguments of {name!r}")
        except ScaffoldError as exc:
            raise ActionError(str(exc)) from None
        if errors:
            raise ActionError(f"bad arguments for {name!r}: {errors[0][1]}")

    def run(self, name: str, args: dict[str, Any]) -> ToolResult:
        self.check(name, args)
        if name == "submit":
            return ToolResult("submitted", submission=str(args["answer"]))
        if name == "search_memory":
            return ToolResult(format_memory(search_memory(self.scaffold.memory, str(args["query"]))))
        command = args["command"] if name == "bash" else self._tools[name].command(args)
        result = self.session.run(command, timeout=self.timeout)
        text, observation = format_observation(result, self.timeout), observation_of(result)
        first, _, rest = result.stdout.lstrip("\n").partition("\n")
        if name == "bash" and first.strip() == SUBMIT_MARKER:
            problem = (
                "the command failed or timed out" if result.exit_code != 0 or result.timed_out
                else "the output after the marker was longer than the sandbox keeps"
                if result.stdout_truncated
                else "nothing followed the marker" if not rest.strip()
                else None
            )  # fmt: skip
            if problem is None:
                return ToolResult(text, observation, submission=rest.strip())
            text += f"\nNot submitted: {problem}."  # a cut patch or an error message is never an answer
        return ToolResult(text, observation)
