"""LangSmith run export → schema v1 (one trajectory per trace).

Input: runs as a JSON array, JSONL (one run per line) or `{"runs": [...]}`, each with the documented run
fields: `id`, `name`, `run_type` (chain|llm|tool|...), `inputs`, `outputs`, `error`, `start_time`,
`end_time`, `trace_id`, `parent_run_id`, `dotted_order`, `extra.metadata`, token counts
(`prompt_tokens`, `completion_tokens`, `total_cost`) and `feedback_stats`. Runs are grouped by
`trace_id`; the root run (no parent) is the trajectory, its `tool` runs in `dotted_order` are the steps,
its last `llm` run gives the chat messages. Feedback: the first key's `avg` is the score; passed means
score ≥ 0.5 unless the root's metadata says `passed`.
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path
from typing import Any

from recreate.experience.importers.common import (
    ImportBatch,
    ImportFormatError,
    as_text,
    describe,
    read_text,
    safe_id,
    split_lines,
)
from recreate.experience.schema import (
    Evaluation,
    ModelInfo,
    Observation,
    Outcome,
    Step,
    Totals,
    Trajectory,
    Usage,
)

_ROLES = {"human": "user", "ai": "assistant", "system": "system", "tool": "tool", "function": "tool"}
_LC_CLASSES = {
    "HumanMessage": "user",
    "AIMessage": "assistant",
    "SystemMessage": "system",
    "ToolMessage": "tool",
}


def _openai_tool_call(call: dict[str, Any]) -> dict[str, Any]:
    """LangChain's {name, args, id} tool calls in OpenAI's {id, type, function: {name, arguments}} form."""
    if "function" in call:
        return call
    arguments = json.dumps(call.get("args", {}), ensure_ascii=False)
    return {
        "id": call.get("id"),
        "type": "function",
        "function": {"name": call.get("name"), "arguments": arguments},
    }


def _message(raw: Any) -> dict[str, Any] | None:
    """An OpenAI-format message from the shapes LangSmith stores (OpenAI dicts, LangChain dicts, lc dumps)."""
    if not isinstance(raw, dict):
        return None
    if raw.get("lc") == 1 and isinstance(raw.get("kwargs"), dict):
        role = _LC_CLASSES.get((raw.get("id") or ["?"])[-1], "user")
        raw = {**raw["kwargs"], "role": role}
    role = raw.get("role") or _ROLES.get(raw.get("type", ""))
    if role is None:
        return None
    message: dict[str, Any] = {"role": _ROLES.get(role, role), "content": as_text(raw.get("content"))}
    if raw.get("tool_calls"):
        message["tool_calls"] = [_openai_tool_call(call) for call in raw["tool_calls"]]
    if raw.get("tool_call_id"):
        message["tool_call_id"] = raw["tool_call_id"]
    return message


def _messages(run: dict[str, Any]) -> list[dict[str, Any]]:
    raw = (run.get("inputs") or {}).get("messages") or []
    if raw and isinstance(raw[0], list):  # chat models log a batch: list of conversations
        raw = raw[0]
    out = [m for m in map(_message, raw) if m]
    outputs = run.get("outputs") or {}
    generations = outputs.get("generations") or []
    if generations and isinstance(generations[0], list):
        generations = generations[0]
    reply = None
    if generations and isinstance(generations[0], dict):
        reply = _message(
            generations[0].get("message") or {"role": "assistant", "content": generations[0].get("text")}
        )
    elif outputs.get("choices"):
        reply = _message(outputs["choices"][0].get("message"))
    return out + ([reply] if reply else [])


def _sorted(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return sorted(runs, key=lambda r: (str(r.get("dotted_order") or ""), str(r.get("start_time") or "")))


def _evaluation(root: dict[str, Any], metadata: dict[str, Any]) -> Evaluation | None:
    stats = root.get("feedback_stats") or {}
    if not stats:
        return None
    key, first = next(iter(stats.items()))
    score = float((first or {}).get("avg") or 0.0)
    passed = bool(metadata["passed"]) if "passed" in metadata else score >= 0.5
    return Evaluation(
        score=score, passed=passed, feedback=f"LangSmith feedback {key}", details={"feedback_stats": stats}
    )


def convert_trace(runs: list[dict[str, Any]], *, source: str, domain: str = "langsmith") -> Trajectory:
    roots = [r for r in runs if not r.get("parent_run_id")]
    if len(roots) != 1:
        raise ImportFormatError(f"trace has {len(roots)} root runs (runs without parent_run_id); expected 1")
    root = roots[0]
    metadata = ((root.get("extra") or {}).get("metadata")) or {}
    children = _sorted([r for r in runs if r is not root])
    steps = []
    for run in children:
        if run.get("run_type") != "tool":
            continue
        inputs = run.get("inputs") or {}
        error = run.get("error")
        steps.append(
            Step(
                index=len(steps),
                action={"tool": run.get("name", "?"), "args": inputs},
                observation=Observation(
                    stdout=as_text((run.get("outputs") or {}).get("output", run.get("outputs"))),
                    stderr=error or "",
                ),
                error=error,
                started_at=run.get("start_time"),
            )
        )
    llm_runs = [r for r in children if r.get("run_type") in ("llm", "chat")]
    for step, run in zip(steps, llm_runs, strict=False):  # usage of the call that chose each tool
        step.usage = Usage(
            prompt_tokens=int(run.get("prompt_tokens") or 0),
            completion_tokens=int(run.get("completion_tokens") or 0),
            cost_usd=float(run["total_cost"]) if run.get("total_cost") is not None else None,
        )
    model_name = next(
        (((r.get("extra") or {}).get("metadata") or {}).get("ls_model_name") for r in llm_runs), None
    )
    messages = _messages(llm_runs[-1]) if llm_runs else []
    if not messages:
        messages = [{"role": "user", "content": as_text(root.get("inputs"))}]
    error = root.get("error")
    costs = [r.get("total_cost") for r in llm_runs if r.get("total_cost") is not None]
    return Trajectory(
        trajectory_id=safe_id("ls", str(root.get("id"))),
        task_id=str(
            metadata.get("task_id") or root.get("reference_example_id") or root.get("name") or "task"
        ),
        domain=str(metadata.get("domain") or domain),
        run_id=str(metadata["run_id"]) if metadata.get("run_id") else root.get("session_id"),
        model=ModelInfo(name=model_name) if model_name else None,
        messages=messages,
        steps=steps,
        outcome=Outcome(
            exit_status="error" if error else "submitted",
            error=error,
            submission=None
            if error
            else as_text((root.get("outputs") or {}).get("output", root.get("outputs"))),
        ),
        evaluation=_evaluation(root, metadata),
        totals=Totals(
            steps=len(steps),
            prompt_tokens=sum(s.usage.prompt_tokens for s in steps),
            completion_tokens=sum(s.usage.completion_tokens for s in steps),
            cost_usd=float(sum(map(float, costs))) if costs else None,
        ),
        started_at=str(root.get("start_time") or ""),
        finished_at=root.get("end_time"),
        metadata={
            "source": source,
            "source_format": "langsmith-runs",
            "langsmith_trace_id": root.get("trace_id"),
        },
    )


def load_runs(path: Path) -> tuple[list[dict[str, Any]], list[str]]:
    text = read_text(path)
    try:
        data = json.loads(text)
    except json.JSONDecodeError:
        runs, errors = [], []
        for number, line in enumerate(split_lines(text), start=1):
            if line.strip():
                try:
                    runs.append(json.loads(line))
                except json.JSONDecodeError as exc:
                    errors.append(f"{path}:{number}: not valid JSON ({exc.msg} at column {exc.colno})")
        return runs, errors
    if isinstance(data, dict) and "runs" not in data and "run_type" in data:
        data = [data]  # a JSONL export of a single run
    runs = data.get("runs") if isinstance(data, dict) else data
    if not isinstance(runs, list):
        raise ImportFormatError(f"{path}: expected a list of runs or {{'runs': [...]}}")
    return runs, []


def read(path: Path, *, domain: str = "langsmith") -> ImportBatch:
    runs, errors = load_runs(path)
    batch = ImportBatch(errors=errors)
    traces: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for run in runs:
        if isinstance(run, dict) and run.get("id"):
            traces[str(run.get("trace_id") or run["id"])].append(run)
        else:
            batch.errors.append(f"{path}: skipped a run without an id")
    for trace_id, trace_runs in traces.items():
        try:
            batch.trajectories.append(convert_trace(trace_runs, source=f"{path}#{trace_id}", domain=domain))
        except (ImportFormatError, ValueError) as exc:
            batch.errors.append(f"{path}: trace {trace_id}: {describe(exc)}")
        except Exception as exc:  # a shape no check foresaw: this trace fails, the others import
            batch.errors.append(f"{path}: trace {trace_id}: cannot import ({type(exc).__name__}: {exc})")
    return batch
