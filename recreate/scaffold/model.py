"""The Scaffold: everything about a domain agent except the model.

In memory a scaffold is one pydantic object; on disk it is a directory (see `recreate.scaffold.files`):
`scaffold.yaml` (with the worked `examples`, when it has any), `tools/<name>/{tool.yaml, main.py|main.sh}`
and `memory.jsonl`. This module is plain data at the bottom of the package: it imports no other
scaffold module (validation is `recreate.scaffold.validate.validate_scaffold`).
"""

from __future__ import annotations

import hashlib
import json
import shlex
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, model_validator

from recreate.experience.schema import ScaffoldRef

NAME_PATTERN = r"^[a-z0-9][a-z0-9_.-]{0,63}$"  # scaffold names: no "@" or "/" so refs stay unambiguous
TOOL_NAME_PATTERN = r"^[a-z][a-z0-9_]{0,47}$"  # also a valid function name for every tool-calling API
ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$"
RESERVED_TOOL_NAMES = frozenset({"bash", "submit", "search_memory"})  # given by the agent runtime
TOOL_ROOT = ".recreate_tools"  # where tool files live inside the sandbox workspace
ActionFormat = Literal["tool_calls", "text"]
Language = Literal["python", "bash"]
ENTRY_FILES: dict[str, str] = {"python": "main.py", "bash": "main.sh"}
INTERPRETERS: dict[str, str] = {"python": "python3", "bash": "bash"}


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Rule(_Model):
    id: str = Field(pattern=ID_PATTERN)
    text: str = Field(min_length=1)
    scope: str = "general"  # "general", or where it applies (a task family, a library, a tool)
    origin: str = "seed"  # "seed", "optimizer", "human", ...
    helpful: int = Field(0, ge=0)
    harmful: int = Field(0, ge=0)


class Limits(_Model):
    # strict: `true` or "7" from a model-written set_field read as 1 and 7 steps
    max_steps: int = Field(50, gt=0, strict=True)
    max_cost_usd: float = Field(1.0, ge=0, strict=True)
    command_timeout_s: float = Field(60.0, gt=0, strict=True)


class SmokeTest(_Model):
    """Run the tool once with `args`; it must exit with `exit_code` and print `expect` on stdout."""

    args: dict[str, Any] = Field(default_factory=dict)
    expect: str = ""
    exit_code: int = 0


class Tool(_Model):
    """A scaffold tool: a script run INSIDE the sandbox with its arguments as one JSON argv item
    (`sys.argv[1]` in main.py, `$1` in main.sh)."""

    name: str = Field(pattern=TOOL_NAME_PATTERN)
    description: str = Field(min_length=1)
    args: dict[str, Any] = Field(default_factory=lambda: {"type": "object", "properties": {}})
    smoke: SmokeTest | None = None  # optional in a hand-written tool; edit ops always give one
    language: Language
    code: str = Field(min_length=1)

    @property
    def entry_file(self) -> str:
        return ENTRY_FILES[self.language]

    def sandbox_path(self, root: str = TOOL_ROOT) -> str:
        """Path of the entry script inside the sandbox workspace."""
        return f"{root}/{self.name}/{self.entry_file}"

    def command(self, args: dict[str, Any], root: str = TOOL_ROOT) -> str:
        """The shell command that runs this tool in a session where `install_tools` put its files."""
        payload = json.dumps(args, ensure_ascii=False, separators=(",", ":"))
        return f"{INTERPRETERS[self.language]} {shlex.quote(self.sandbox_path(root))} {shlex.quote(payload)}"


class MemoryItem(_Model):
    id: str = Field(pattern=ID_PATTERN)
    title: str = Field(min_length=1)
    content: str = Field(min_length=1)
    tags: list[str] = Field(default_factory=list)
    evidence: list[str] = Field(default_factory=list)  # trajectory ids
    helpful: int = Field(0, ge=0)
    harmful: int = Field(0, ge=0)


class ExampleStep(_Model):
    """One step of a worked example: a command and what it printed, or the final answer."""

    command: str | None = Field(None, min_length=1)
    output: str = ""
    submit: str | None = None

    @model_validator(mode="after")
    def _one_action(self) -> ExampleStep:
        if (self.command is None) == (self.submit is None):
            raise ValueError("an example step has either `command` (with its `output`) or `submit`")
        return self


class Example(_Model):
    """A worked example, shown to the agent as earlier turns of the conversation (few-shot): the task
    through the instance template, then each step as the agent's reply and the sandbox's answer, in the
    run's action format."""

    task: str = Field(min_length=1)
    steps: list[ExampleStep] = Field(min_length=1)

    @model_validator(mode="after")
    def _submit_last(self) -> Example:
        if any(step.submit is not None for step in self.steps[:-1]):
            raise ValueError("only the last step of an example may submit")
        return self


class Scaffold(_Model):
    name: str = Field(pattern=NAME_PATTERN)
    domain: str = Field(min_length=1)
    description: str = ""
    system_prompt: str = Field(min_length=1)  # Jinja2 template (see recreate.scaffold.render)
    instance_template: str = Field(min_length=1)  # Jinja2 template; must use {{ task }}
    action_format: ActionFormat = "tool_calls"
    limits: Limits = Field(default_factory=Limits)
    tools: list[Tool] = Field(default_factory=list)
    rules: list[Rule] = Field(default_factory=list)
    memory: list[MemoryItem] = Field(default_factory=list)
    examples: list[Example] = Field(default_factory=list)
    # what another agent's config holds that has no field here, kept so an export restores it
    # (e.g. {"mini-swe-agent": {...}}); never rendered into prompts
    metadata: dict[str, Any] = Field(default_factory=dict)

    _ref: str | None = PrivateAttr(None)  # "name@v7" when loaded from a store

    def __eq__(self, other: object) -> bool:
        """Equal content, wherever each came from (the store ref is not content)."""
        if not isinstance(other, Scaffold):
            return NotImplemented
        return self.model_dump() == other.model_dump()

    __hash__ = None  # type: ignore[assignment]  # mutable, like every pydantic model

    @property
    def ref(self) -> str | None:
        """`name@vN` when this object came out of a store, else None."""
        return self._ref

    def content_hash(self) -> str:
        """sha256 of the content in canonical JSON: equal for scaffolds with the same content."""
        return content_hash(self)

    def scaffold_ref(self) -> ScaffoldRef:
        """The trajectory's record of which scaffold ran."""
        version = self._ref.split("@", 1)[1] if self._ref else None
        return ScaffoldRef(name=self.name, version=version, hash=self.content_hash())

    def tool(self, name: str) -> Tool:
        for tool in self.tools:
            if tool.name == name:
                return tool
        raise KeyError(f"scaffold {self.name!r} has no tool {name!r}")


def scaffold_data(scaffold: Scaffold, exclude: set[str] | None = None) -> dict[str, Any]:
    """The scaffold as JSON data; `examples` and `metadata` only when there are some, so a scaffold
    without them keeps the files and the hash it had before scaffolds could hold them."""
    data = scaffold.model_dump(mode="json", exclude=exclude)
    for optional in ("examples", "metadata"):
        if not data.get(optional, True):
            del data[optional]
    return data


def content_hash(scaffold: Scaffold) -> str:
    """sha256 of the content in canonical JSON (sorted keys): the same for equal scaffolds on any
    machine, whatever YAML emitter wrote their files."""
    canonical = json.dumps(scaffold_data(scaffold), sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()
