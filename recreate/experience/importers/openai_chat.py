"""OpenAI chat JSONL → schema v1: one conversation per line, `{"messages": [...], "metadata": {...}}`.

Each assistant tool call becomes a step (action = tool name + parsed arguments) whose observation is
the content of the `tool` message answering that call id. The last assistant message without tool calls
is the submission. Optional fields, on the line or in `metadata`: `id`/`trajectory_id`, `task_id`,
`domain`, `run_id`, `model`, `score`, `passed`, `feedback` (any other metadata is kept in `metadata`).
Corrupt or truncated lines are skipped and reported with their line number; the other lines import.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from recreate.experience.importers.common import (
    ImportBatch,
    ImportFormatError,
    as_text,
    clean_message,
    describe,
    parse_json_args,
    read_text,
    safe_id,
    split_lines,
    stable_id,
)
from recreate.experience.schema import Evaluation, ModelInfo, Observation, Outcome, Step, Totals, Trajectory

_KNOWN = ("id", "trajectory_id", "task_id", "domain", "run_id", "model", "score", "passed", "feedback")


def _steps(messages: list[dict[str, Any]]) -> list[Step]:
    answers = {
        m.get("tool_call_id"): m for m in messages if m.get("role") == "tool" and m.get("tool_call_id")
    }
    steps = []
    for position, message in enumerate(messages):
        calls = (message.get("tool_calls") or []) if message.get("role") == "assistant" else []
        for call in calls:
            function = call.get("function") or {}
            answer = answers.get(call.get("id"))
            steps.append(
                Step(
                    index=len(steps),
                    action={
                        "tool": function.get("name", "?"),
                        "args": parse_json_args(function.get("arguments")),
                    },
                    observation=Observation(stdout=as_text(answer.get("content"))) if answer else None,
                    message_index=position,
                )
            )
    return steps


def _shape_problem(record: dict[str, Any]) -> str | None:
    """What makes `record` no OpenAI chat conversation, with the fix, else None."""
    messages = record.get("messages")
    if not isinstance(messages, list) or not all(isinstance(m, dict) and "role" in m for m in messages):
        return "no 'messages' list of {role, content} objects"
    metadata = record.get("metadata") or {}
    if not isinstance(metadata, dict):
        return f"'metadata' is {type(metadata).__name__}; it must be an object"
    score = {**record, **metadata}.get("score")
    if score is not None and (isinstance(score, bool) or not isinstance(score, int | float)):
        return f"'score' is {score!r}; it must be a number"
    for number, message in enumerate(messages):
        calls = message.get("tool_calls") or []
        if not isinstance(calls, list) or not all(isinstance(c, dict) for c in calls):
            return f"messages[{number}].tool_calls must be a list of {{id, function}} objects"
        if not all(isinstance(c.get("function") or {}, dict) for c in calls):
            return f"messages[{number}].tool_calls[].function must be a {{name, arguments}} object"
    return None


def convert(record: dict[str, Any], *, source: str, domain: str = "chat") -> Trajectory:
    problem = _shape_problem(record)
    if problem:
        raise ImportFormatError(problem)
    messages = record["messages"]
    meta = {**record, **(record.get("metadata") or {})}
    meta.pop("messages", None)
    meta.pop("metadata", None)
    raw_id = meta.get("trajectory_id") or meta.get("id")
    final = next(
        (m for m in reversed(messages) if m.get("role") == "assistant" and not m.get("tool_calls")), None
    )
    evaluation = None
    if meta.get("score") is not None or meta.get("passed") is not None:
        score = float(meta.get("score", 1.0 if meta.get("passed") else 0.0))
        passed = bool(meta["passed"]) if meta.get("passed") is not None else score >= 1.0
        evaluation = Evaluation(score=score, passed=passed, feedback=str(meta.get("feedback", "")))
    steps = _steps(messages)
    model = meta.get("model")
    return Trajectory(
        trajectory_id=safe_id("oai", str(raw_id)) if raw_id else stable_id("oai", record),
        task_id=str(meta.get("task_id") or stable_id("task", messages[:2])),
        domain=str(meta.get("domain") or domain),
        run_id=str(meta["run_id"]) if meta.get("run_id") is not None else None,
        model=ModelInfo(name=str(model)) if model else None,
        messages=[clean_message(m) for m in messages],
        steps=steps,
        outcome=Outcome(
            exit_status="submitted" if final else "interrupted",
            submission=as_text(final.get("content")) if final else None,
        ),
        evaluation=evaluation,
        totals=Totals(steps=len(steps), cost_usd=None),
        metadata={"source": source, "source_format": "openai-chat-jsonl"}
        | {k: v for k, v in meta.items() if k not in _KNOWN},
    )


def read(path: Path, *, domain: str = "chat") -> ImportBatch:
    batch = ImportBatch()
    text = read_text(path)
    for number, line in enumerate(split_lines(text), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
            if not isinstance(record, dict):
                raise ImportFormatError("a line must be a JSON object")
            batch.trajectories.append(convert(record, source=f"{path}:{number}", domain=domain))
        except json.JSONDecodeError as exc:
            batch.errors.append(f"{path}:{number}: not valid JSON ({exc.msg} at column {exc.colno})")
        except (ImportFormatError, ValueError) as exc:
            batch.errors.append(f"{path}:{number}: {describe(exc)}")
        except Exception as exc:  # a shape no check foresaw: this line fails, the others import
            batch.errors.append(f"{path}:{number}: cannot import ({type(exc).__name__}: {exc})")
    return batch
