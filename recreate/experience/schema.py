"""Trajectory schema v1: one agent run on one task.

This is the contract between `recreate` (which writes trajectories) and `tapo_backend` (which trains
from them). Messages are OpenAI chat format; steps carry what the sandbox observed and what the
endpoint reported (usage, optional token ids and logprobs). Secrets never appear here.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

SCHEMA_VERSION = 1
# `name` of the messages that show a scaffold's worked examples: context, not the model's own turns
EXAMPLE_NAME = "example"

ExitStatus = Literal[
    "submitted",  # the agent called submit
    "max_steps",
    "max_cost",
    "format_errors",  # too many consecutive format errors
    "context_exceeded",  # the conversation outgrew the model's context window
    "error",  # an exception in the runtime (recorded in outcome.error)
    "interrupted",  # killed/cancelled; the trajectory holds the steps so far
    "running",
]


def new_id(prefix: str = "") -> str:
    return f"{prefix}{uuid.uuid4().hex[:16]}"


def utcnow() -> str:
    return datetime.now(UTC).isoformat()


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ScaffoldRef(_Model):
    name: str
    version: str | None = None  # "v7"
    hash: str | None = None


class ModelInfo(_Model):
    name: str
    provider: str | None = None
    base_url_host: str | None = None  # host only: never a full URL with credentials
    sampling: dict[str, Any] = Field(default_factory=dict)
    policy: str | None = None  # the policy version that answered (vLLM): "base" or the LoRA adapter's name


class Usage(_Model):
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0
    cost_usd: float | None = None  # None = unknown price, never silently 0


class Observation(_Model):
    stdout: str = ""
    stderr: str = ""
    exit_code: int | None = None
    duration_s: float = 0.0
    timed_out: bool = False
    stdout_truncated: bool = False
    stderr_truncated: bool = False


class Step(_Model):
    index: int
    action: dict[str, Any] | None = None  # {"tool": name, "args": {...}} or {"format_error": text}
    observation: Observation | None = None
    usage: Usage = Field(default_factory=Usage)
    token_ids: list[int] | None = None  # completion token ids, when the endpoint returned them
    logprobs: list[float] | None = None  # per completion token
    message_index: int | None = None  # index of the assistant message in `messages`
    finish_reason: str | None = None  # the endpoint's: "stop", "length" (cut at the token cap), ...
    started_at: str | None = None
    error: str | None = None


class Outcome(_Model):
    exit_status: ExitStatus = "running"
    submission: str | None = None
    error: str | None = None


class Evaluation(_Model):
    score: float
    passed: bool
    feedback: str = ""
    details: dict[str, Any] = Field(default_factory=dict)


class Totals(_Model):
    steps: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float | None = 0.0
    duration_s: float = 0.0
    format_errors: int = 0


class SandboxInfo(_Model):
    backend: str
    image: str | None = None


class Trajectory(_Model):
    schema_version: Literal[1] = SCHEMA_VERSION
    trajectory_id: str = Field(default_factory=lambda: new_id("t-"))
    task_id: str
    run_id: str | None = None
    domain: str
    scaffold: ScaffoldRef | None = None
    model: ModelInfo | None = None
    messages: list[dict[str, Any]] = Field(default_factory=list)
    steps: list[Step] = Field(default_factory=list)
    outcome: Outcome = Field(default_factory=Outcome)
    evaluation: Evaluation | None = None
    totals: Totals = Field(default_factory=Totals)
    sandbox: SandboxInfo | None = None
    seed: int | None = None
    started_at: str = Field(default_factory=utcnow)
    finished_at: str | None = None
    code_version: str | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)

    def to_json(self) -> str:
        return self.model_dump_json(indent=None)

    def save(self, path: str | Path) -> Path:
        """Atomic write (temp + rename) so a crash never leaves half a file."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex[:8]}.tmp")
        tmp.write_text(self.to_json(), encoding="utf-8")
        tmp.replace(path)
        return path


class SchemaError(ValueError):
    """A trajectory document that is not valid schema v1 (after migration)."""


# Migration hook: MIGRATIONS[n] turns a version-n document into a version-(n+1) one. v1 is the first
# version, so the table starts empty; a v2 schema adds MIGRATIONS[1].
MIGRATIONS: dict[int, Callable[[dict[str, Any]], dict[str, Any]]] = {}


def migrate(doc: dict[str, Any]) -> dict[str, Any]:
    """Bring an older document up to the current schema, one version at a time."""
    version = doc.get("schema_version")
    while version != SCHEMA_VERSION:
        step = MIGRATIONS.get(version) if isinstance(version, int) else None
        if isinstance(version, str) and version.strip() == str(SCHEMA_VERSION):
            raise SchemaError(f"schema_version is the text {version!r}; write the number {SCHEMA_VERSION}")
        if step is None:
            raise SchemaError(
                f"unknown trajectory schema_version {version!r} (this build reads {SCHEMA_VERSION})"
            )
        doc = step(dict(doc))
        version = doc.get("schema_version")
    return doc


def load_trajectory(source: str | Path | dict[str, Any]) -> Trajectory:
    """Parse a trajectory from a path, JSON text or dict, migrating older versions; SchemaError if bad."""
    if isinstance(source, dict):
        doc = source
    else:
        text = Path(source).read_text(encoding="utf-8") if isinstance(source, Path) else source
        if isinstance(source, str) and not source.lstrip().startswith("{"):
            text = Path(source).read_text(encoding="utf-8")
        try:
            doc = json.loads(text)
        except json.JSONDecodeError as exc:
            raise SchemaError(f"not valid JSON: {exc}") from exc
    if not isinstance(doc, dict):
        raise SchemaError("a trajectory must be a JSON object")
    try:
        return Trajectory.model_validate(migrate(doc))
    except SchemaError:
        raise
    except ValidationError as exc:
        raise SchemaError(validation_summary(exc)) from exc
    except Exception as exc:  # a migration that failed on an odd document: a schema problem too
        raise SchemaError(f"{type(exc).__name__}: {exc}") from exc


def validation_summary(exc: ValidationError, shown: int = 3) -> str:
    """A pydantic error in one line: `field.path: problem (got value)`, the first `shown` of them."""
    parts = []
    for error in exc.errors()[:shown]:
        where = ".".join(str(part) for part in error["loc"]) or "trajectory"
        if error["type"] == "missing":
            parts.append(f"{where}: {error['msg']}")
            continue
        got = repr(error.get("input"))
        got = got if len(got) <= 60 else got[:57] + "..."
        parts.append(f"{where}: {error['msg']} (got {got})")
    more = f" (and {exc.error_count() - shown} more)" if exc.error_count() > shown else ""
    return "; ".join(parts) + more


SCHEMA_FILE = Path(__file__).with_name("trajectory.schema.json")


def json_schema() -> dict[str, Any]:
    schema = Trajectory.model_json_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["$comment"] = f"recreate trajectory schema v{SCHEMA_VERSION}; generated by write_json_schema()"
    return schema


def write_json_schema(path: Path = SCHEMA_FILE) -> Path:
    """Regenerate the JSON Schema file shipped with the package (`python -m recreate.experience.schema`)."""
    path.write_text(json.dumps(json_schema(), indent=2, sort_keys=True) + "\n", encoding="utf-8")
    return path


if __name__ == "__main__":
    print(write_json_schema())
