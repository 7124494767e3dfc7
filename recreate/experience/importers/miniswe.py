"""mini-swe-agent `.traj.json` → schema v1.

The file is one JSON object: `messages` (chat messages, each with an optional `extra` dict), `info`
(`exit_status`, `submission`, `model_stats.instance_cost`, `config.model.model_name`, ...),
`trajectory_format` ("mini-swe-agent-1.1" for v2 tool-calling runs) and, from the batch runners,
`instance_id`, which becomes the task id. Actions come from `extra.actions` (v2) or, in the older
text format, from the ```bash (or ```mswea_bash_command) block of the assistant message; observations
from `extra.raw_output`/`extra.returncode` of the following tool/user message, or from its
`<returncode>`/`<output>` text in the older format. The final `exit` message carries the outcome.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from recreate.experience.importers.common import ImportFormatError, as_text, clean_message, stable_id
from recreate.experience.schema import ModelInfo, Observation, Outcome, Step, Totals, Trajectory, Usage

_BASH_BLOCK = re.compile(r"```(?:bash|mswea_bash_command)\s*\n(.*?)\n```", re.DOTALL)
_RETURNCODE = re.compile(r"<returncode>\s*(-?\d+)\s*</returncode>")
_OUTPUT = re.compile(r"<output>\n?(.*?)\n?</output>", re.DOTALL)
_EXIT_STATUS = {
    "Submitted": "submitted",
    "LimitsExceeded": "max_steps",
    "TimeExceeded": "interrupted",
    "RepeatedFormatError": "format_errors",
    "FormatError": "format_errors",
}


def _observation(message: dict[str, Any]) -> Observation:
    extra = message.get("extra") or {}
    if "raw_output" in extra or "returncode" in extra:
        stderr = extra.get("exception_info") or ""
        return Observation(
            stdout=as_text(extra.get("raw_output")), stderr=stderr, exit_code=extra.get("returncode")
        )
    content = as_text(message.get("content"))
    code = _RETURNCODE.search(content)
    output = _OUTPUT.search(content)
    if code is None and content.lstrip().startswith("{"):
        try:
            parsed = json.loads(content)
            return Observation(stdout=as_text(parsed.get("output", "")), exit_code=parsed.get("returncode"))
        except (json.JSONDecodeError, AttributeError):
            pass
    return Observation(
        stdout=output.group(1) if output else content, exit_code=int(code.group(1)) if code else None
    )


def _actions(message: dict[str, Any]) -> list[dict[str, Any]]:
    extra = message.get("extra") or {}
    if isinstance(extra.get("actions"), list):
        return extra["actions"]
    return [{"command": c.strip()} for c in _BASH_BLOCK.findall(as_text(message.get("content")))]


def _usage(message: dict[str, Any]) -> Usage:
    extra = message.get("extra") or {}
    usage = (
        ((extra.get("response") or {}).get("usage") or {}) if isinstance(extra.get("response"), dict) else {}
    )
    return Usage(
        prompt_tokens=int(usage.get("prompt_tokens") or 0),
        completion_tokens=int(usage.get("completion_tokens") or 0),
        cost_usd=extra.get("cost"),
    )


def _steps(messages: list[dict[str, Any]]) -> list[Step]:
    steps: list[Step] = []
    for position, message in enumerate(messages):
        if message.get("role") != "assistant":
            continue
        replies = []
        for later in messages[position + 1 :]:
            if later.get("role") in ("assistant", "exit"):
                break
            replies.append(later)
        format_error = next(
            (r for r in replies if (r.get("extra") or {}).get("interrupt_type") == "FormatError"), None
        )
        usage = _usage(message)
        if format_error is not None:
            action = {"format_error": as_text(format_error.get("content"))[:2000]}
            steps.append(Step(index=len(steps), action=action, usage=usage, message_index=position))
            continue
        by_call = {r.get("tool_call_id"): r for r in replies if r.get("tool_call_id")}
        for number, act in enumerate(_actions(message)):
            reply = by_call.get(act.get("tool_call_id")) if act.get("tool_call_id") else None
            if reply is None and number < len(replies):
                reply = replies[number]
            steps.append(
                Step(
                    index=len(steps),
                    action={"tool": "bash", "args": {"command": act.get("command", "")}},
                    observation=_observation(reply) if reply is not None else None,
                    usage=usage if number == 0 else Usage(),
                    message_index=position,
                )
            )
    return steps


def convert(doc: dict[str, Any], *, source: str, domain: str = "swe") -> Trajectory:
    if not isinstance(doc.get("messages"), list):
        raise ImportFormatError(f"{source}: no 'messages' list: not a mini-swe-agent trajectory")
    for number, message in enumerate(doc["messages"]):
        if not isinstance(message, dict):
            raise ImportFormatError(
                f"{source}: messages[{number}] is {type(message).__name__}, not a chat message object"
            )
    info = doc.get("info") or {}
    messages = doc["messages"]
    exit_message = next((m for m in reversed(messages) if m.get("role") == "exit"), {})
    exit_extra = exit_message.get("extra") or {}
    raw_status = info.get("exit_status") or exit_extra.get("exit_status") or ""
    status = _EXIT_STATUS.get(raw_status, "error" if raw_status else "interrupted")
    submission = info.get("submission", exit_extra.get("submission"))
    model_name = ((info.get("config") or {}).get("model") or {}).get("model_name")
    steps = _steps(messages)
    cost = (info.get("model_stats") or {}).get("instance_cost")
    task_id = doc.get("instance_id") or Path(source).name.removesuffix(".json").removesuffix(".traj")
    return Trajectory(
        trajectory_id=stable_id("mswea", doc),
        task_id=str(task_id),
        domain=domain,
        model=ModelInfo(name=model_name, provider="litellm") if model_name else None,
        messages=[clean_message(m) for m in messages if m.get("role") != "exit"],
        steps=steps,
        outcome=Outcome(
            exit_status=status,
            submission=submission or None,
            error=(info.get("exception_str") or raw_status) if status in ("error", "interrupted") else None,
        ),
        totals=Totals(
            steps=len(steps),
            prompt_tokens=sum(s.usage.prompt_tokens for s in steps),
            completion_tokens=sum(s.usage.completion_tokens for s in steps),
            cost_usd=cost,
            format_errors=sum(1 for s in steps if "format_error" in (s.action or {})),
        ),
        metadata={
            "source": source,
            "source_format": doc.get("trajectory_format", "mini-swe-agent"),
            "mini_version": info.get("mini_version"),
            "original_exit_status": raw_status,
        },
    )
