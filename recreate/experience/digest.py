"""Small text digests of trajectories and steps, shared by the index and the inspection views."""

from __future__ import annotations

import json
import re
from typing import Any

from recreate.experience.schema import EXAMPLE_NAME, Step, Trajectory
from recreate.text import clip_middle

_EXCEPTION = re.compile(r"\b([A-Z][A-Za-z0-9_]*(?:Error|Exception|Exit|Interrupt))\b")
_PATH = re.compile(
    r"(?<![\w/.-])((?:[\w.-]+/)*[\w-]+\.(?:py|pyi|txt|json|jsonl|yaml|yml|toml|cfg|ini|md|rst|csv|"
    r"sh|js|ts|c|h|cpp|rs|go|java|html|css|sql|ipynb|png))\b"
)
_TEST_COMMAND = re.compile(r"\b(pytest|py\.test|unittest|tox|nox|npm test|go test|cargo test)\b")


def one_line(text: str) -> str:
    return " ".join(text.split())


def action_text(step: Step) -> str:
    """The step's action as a short command-like string."""
    action = step.action or {}
    if "format_error" in action:
        return f"<format error> {action['format_error']}"
    args = action.get("args", {})
    if isinstance(args, dict) and set(args) <= {"command", "cmd"} and args:
        return str(next(iter(args.values())))
    tool = action.get("tool", "?")
    return f"{tool} {json.dumps(args, ensure_ascii=False, sort_keys=True)}" if args else str(tool)


def collapse_repeats(text: str) -> str:
    """Runs of identical lines become one line with a count, so logs spend the budget on content."""
    out: list[str] = []
    lines = text.split("\n")
    position = 0
    while position < len(lines):
        run = position
        while run + 1 < len(lines) and lines[run + 1] == lines[position]:
            run += 1
        repeats = run - position + 1
        out += [f"{lines[position]}  [×{repeats}]"] if repeats > 2 else lines[position : run + 1]
        position = run + 1
    return "\n".join(out)


def observation_text(step: Step, limit: int = 1000) -> str:
    obs = step.observation
    if obs is None:
        return ""
    parts = []
    if obs.exit_code is not None:
        parts.append(f"[exit {obs.exit_code}{', timed out' if obs.timed_out else ''}]")
    if obs.stdout:
        parts.append(obs.stdout)
    if obs.stderr:
        parts.append(f"[stderr] {obs.stderr}")
    return clip_middle(collapse_repeats("\n".join(parts)), limit)


def error_type(step: Step) -> str:
    """A coarse error label: an exception class name if one is visible, else the kind of failure."""
    action = step.action or {}
    if "format_error" in action:
        return "format_error"
    obs = step.observation
    texts = [step.error or ""]
    if obs is not None:
        texts += [obs.stderr[-4000:], obs.stdout[-4000:]]
    for text in texts:
        names = _EXCEPTION.findall(text)
        if names:
            return names[-1]
    if step.error:
        return "runtime_error"
    if obs is not None and obs.timed_out:
        return "timeout"
    if obs is not None and obs.exit_code not in (None, 0):
        return "nonzero_exit"
    return "none"


def is_failure(step: Step) -> bool:
    return error_type(step) != "none"


def task_statement(traj: Trajectory) -> str:
    """The first user message that is not a worked example: the task as the agent saw it."""
    for message in traj.messages:
        if message.get("role") == "user" and message.get("name") != EXAMPLE_NAME:
            content = message.get("content")
            return content if isinstance(content, str) else json.dumps(content, ensure_ascii=False)
    return ""


def outcome_label(traj: Trajectory) -> str:
    if traj.evaluation is None:
        return "unevaluated"
    return "passed" if traj.evaluation.passed else "failed"


def files_touched(traj: Trajectory) -> list[str]:
    seen: dict[str, None] = {}
    for step in traj.steps:
        args = (step.action or {}).get("args", {})
        if isinstance(args, dict):
            for key in ("path", "file", "filename", "file_path"):
                if isinstance(args.get(key), str):
                    seen.setdefault(args[key], None)
        for match in _PATH.findall(action_text(step)):
            seen.setdefault(match, None)
    return list(seen)


def test_summary(step: Step) -> str | None:
    """'pytest: 3 passed, 1 failed' when the step ran tests and the output says how it went."""
    command = action_text(step)
    found = _TEST_COMMAND.search(command)
    if not found:
        return None
    out = observation_text(step, limit=20000)
    counts = [f"{n} {word}" for n, word in re.findall(r"(\d+) (passed|failed|errors?|skipped)\b", out)]
    ran = re.search(r"Ran (\d+) tests?", out)
    if ran:
        counts.insert(0, f"{ran.group(1)} ran")
        failures = re.search(r"FAILED \((.*?)\)", out)
        counts.append(f"failed: {failures.group(1)}" if failures else ("ok" if "\nOK" in out else ""))
    label = ", ".join(c for c in counts if c) or (
        "exit 0" if step.observation and step.observation.exit_code == 0 else "no result"
    )
    return f"{found.group(1)}: {label}"


def cap_observations(traj: Trajectory, limit: int, truncated: list[str]) -> Trajectory:
    """`traj`, or a copy whose observations and messages over `limit` chars are cut in the middle
    (each cut is listed in `truncated`)."""
    if all(
        s.observation is None or (len(s.observation.stdout) <= limit and len(s.observation.stderr) <= limit)
        for s in traj.steps
    ) and not any(_too_long(m, limit) for m in traj.messages):
        return traj
    traj = traj.model_copy(deep=True)
    for step in traj.steps:
        obs = step.observation
        for name in ("stdout", "stderr") if obs else ():
            text = getattr(obs, name)
            if len(text) > limit:
                truncated.append(f"{traj.trajectory_id} step {step.index}: {name} {len(text)} chars")
                setattr(obs, name, clip_middle(text, limit))
                setattr(obs, f"{name}_truncated", True)
    for position, message in enumerate(traj.messages):
        if _too_long(message, limit):
            truncated.append(f"{traj.trajectory_id} message {position}: {len(message['content'])} chars")
            message["content"] = clip_middle(message["content"], limit)
    return traj


def _too_long(message: dict[str, Any], limit: int) -> bool:
    return isinstance(message.get("content"), str) and len(message["content"]) > limit
