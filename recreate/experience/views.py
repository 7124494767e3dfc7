"""Compact text views of trajectories for the meta-agent, each within a token budget.

Tokens are approximated as characters / 4 (no tokenizer needed; good enough for English and code).
Every view is hard-capped at `budget_tokens * 4` characters; long sections keep their first and most
telling lines and say how many were left out and which view shows them.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Sequence

from recreate.experience.digest import (
    action_text,
    error_type,
    files_touched,
    is_failure,
    observation_text,
    one_line,
    outcome_label,
    task_statement,
    test_summary,
)
from recreate.experience.schema import Trajectory
from recreate.text import clip_middle

CHARS_PER_TOKEN = 4
DEFAULT_BUDGET = 1500
VIEWS = ("index", "summary", "steps(a,b)", "window(step,w)", "failures", "submission", "evaluation")
_VIEW = re.compile(r"^\s*(\w+)\s*(?:\(\s*(-?\d+)\s*[,:-]\s*(-?\d+)\s*\))?\s*$")


def approx_tokens(text: str) -> int:
    return -(-len(text) // CHARS_PER_TOKEN)


def fit(text: str, budget_tokens: int) -> str:
    """Cut `text` to the budget at a line boundary, saying how much was left out."""
    limit = budget_tokens * CHARS_PER_TOKEN
    if len(text) <= limit:
        return text
    note = f"\n…[{len(text)} chars total; cut to the budget of {budget_tokens} tokens]"
    head = text[: max(limit - len(note), 0)]
    if "\n" in head[len(head) // 2 :]:
        head = head[: head.rindex("\n")]
    return head + note


def section(title: str, lines: Sequence[str], limit_chars: int, hint: str = "") -> str:
    """A titled list that keeps as many lines as fit in `limit_chars` and counts the rest."""
    out, used = [f"{title}:"], len(title) + 2
    reserve = 0 if sum(len(line) + 1 for line in lines) + used <= limit_chars else 20 + len(hint)
    for position, line in enumerate(lines):
        if used + len(line) + 1 > limit_chars - reserve:
            out.append(f"  … {len(lines) - position} more{hint}")
            break
        out.append(line)
        used += len(line) + 1
    if not lines:
        out.append("  (none)")
    return "\n".join(out)


def header(traj: Trajectory) -> str:
    scaffold = traj.scaffold
    ref = f"{scaffold.name}@{scaffold.version or '?'} #{(scaffold.hash or '')[:8]}" if scaffold else "-"
    score = f" score {traj.evaluation.score:g}" if traj.evaluation else ""
    cost = f"${traj.totals.cost_usd:.4f}" if traj.totals.cost_usd is not None else "cost unknown"
    return (
        f"trajectory {traj.trajectory_id} | task {traj.task_id} ({traj.domain}) | run {traj.run_id or '-'}\n"
        f"scaffold {ref} | model {traj.model.name if traj.model else '-'}\n"
        f"outcome {traj.outcome.exit_status}, {outcome_label(traj)}{score} | {len(traj.steps)} steps | {cost}"
    )


def parse_view(view: str) -> tuple[str, int, int]:
    match = _VIEW.match(view)
    name = match.group(1) if match else ""
    if name not in {v.split("(")[0] for v in VIEWS} or (name in ("steps", "window")) != bool(match.group(2)):
        raise ValueError(f"unknown view {view!r}; choose one of {', '.join(VIEWS)}")
    return name, int(match.group(2) or 0), int(match.group(3) or 0)


def render(traj: Trajectory, view: str = "index", budget_tokens: int = DEFAULT_BUDGET) -> str:
    name, a, b = parse_view(view)
    limit = budget_tokens * CHARS_PER_TOKEN
    if name == "index":
        text = index_view(traj, limit)
    elif name == "summary":
        text = summary_view(traj, limit)
    elif name == "steps":
        text = steps_view(traj, a, b, limit)
    elif name == "window":
        text = steps_view(traj, a - b, a + b, limit)
    elif name == "failures":
        text = failures_view(traj, limit)
    elif name == "submission":
        text = f"{header(traj)}\nsubmission:\n{traj.outcome.submission or '(none)'}"
    else:
        text = evaluation_view(traj)
    return fit(text, budget_tokens)


def _error_line(position: int, traj: Trajectory) -> str:
    step = traj.steps[position]
    obs = step.observation
    detail = step.error or (obs.stderr if obs and obs.stderr else obs.stdout if obs else "")
    last = next((line for line in reversed(detail.strip().splitlines()) if line.strip()), "")
    return f"  step {step.index}: {error_type(step)} — {clip_middle(one_line(last), 140)}"


def index_view(traj: Trajectory, limit: int) -> str:
    head = header(traj)
    rest = max(limit - len(head), 200)
    files = section("files touched", [f"  {f}" for f in files_touched(traj)], rest * 15 // 100)
    errors = section(
        "errors",
        [_error_line(i, traj) for i, s in enumerate(traj.steps) if is_failure(s)],
        rest * 30 // 100,
        hint=" (view=failures)",
    )
    tests = section(
        "tests",
        [f"  step {s.index}: {t}" for s in traj.steps if (t := test_summary(s))],
        rest * 15 // 100,
    )
    commands = [
        f"  {s.index}: {clip_middle(one_line(action_text(s)), 100)}"
        + (f"  [{error_type(s)}]" if is_failure(s) else "")
        for s in traj.steps
    ]
    used = len(files) + len(errors) + len(tests) + 8  # + the joining newlines and a little slack
    commands_text = section("commands (step: action)", commands, rest - used, hint=" (view=steps(a,b))")
    return "\n".join([head, files, errors, tests, commands_text])


def summary_view(traj: Trajectory, limit: int) -> str:
    parts = [header(traj), f"task: {clip_middle(one_line(task_statement(traj)), limit // 4)}"]
    if traj.evaluation is not None:
        feedback = clip_middle(traj.evaluation.feedback, limit // 5)
        parts.append(f"evaluation: {'passed' if traj.evaluation.passed else 'failed'}; {feedback}")
    if traj.outcome.error:
        parts.append(f"runtime error: {clip_middle(traj.outcome.error, limit // 10)}")
    errors = Counter(error_type(s) for s in traj.steps if is_failure(s))
    parts.append("errors by type: " + (", ".join(f"{k} ×{v}" for k, v in errors.most_common()) or "none"))
    parts.append("files touched: " + (", ".join(files_touched(traj)[:20]) or "none"))
    if traj.outcome.submission:
        parts.append(f"submission (start): {clip_middle(traj.outcome.submission, limit // 6)}")
    return "\n".join(parts)


def steps_view(traj: Trajectory, first: int, last: int, limit: int) -> str:
    chosen = [s for s in traj.steps if first <= s.index <= last]
    head = f"{header(traj)}\nsteps {first}..{last} ({len(chosen)} of {len(traj.steps)}):"
    per_step = max((limit - len(head)) // max(len(chosen), 1) - 20, 120)
    blocks = []
    for step in chosen:
        action = clip_middle(action_text(step), per_step // 3)
        observation = observation_text(step, per_step - len(action))
        error = f"\n  error: {clip_middle(step.error, 200)}" if step.error else ""
        blocks.append(
            f"— step {step.index}: {action}\n  {observation.replace(chr(10), chr(10) + '  ')}{error}"
        )
    return "\n".join([head, *blocks]) if blocks else f"{head}\n(no steps in this range)"


def failures_view(traj: Trajectory, limit: int) -> str:
    failing = [s for s in traj.steps if is_failure(s)]
    head = f"{header(traj)}\nfailing steps: {len(failing)}"
    per_step = max((limit - len(head)) // max(len(failing), 1) - 20, 160)
    blocks = [
        f"— step {s.index} [{error_type(s)}]: {clip_middle(action_text(s), per_step // 3)}\n"
        f"  {observation_text(s, per_step * 2 // 3).replace(chr(10), chr(10) + '  ')}"
        for s in failing
    ]
    return "\n".join([head, *blocks])


def evaluation_view(traj: Trajectory) -> str:
    if traj.evaluation is None:
        return f"{header(traj)}\nnot evaluated"
    ev = traj.evaluation
    details = json.dumps(ev.details, ensure_ascii=False, sort_keys=True, default=str)
    verdict = f"passed: {ev.passed} | score {ev.score:g}"
    return f"{header(traj)}\n{verdict}\nfeedback:\n{ev.feedback}\ndetails: {details}"
