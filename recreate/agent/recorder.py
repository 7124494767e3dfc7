"""Trajectory recording: per-step records from model replies, and the Trajectory v1 document.

A step is one model call: its usage and cost, the completion's token ids and logprobs when the
endpoint returned them (vLLM with `return_tokens_as_token_ids` sends tokens as "token_id:N", llama.cpp
sends an `id` beside each token), the
action taken and what the sandbox observed. The whole document is redacted before it touches disk.
"""

from __future__ import annotations

import functools
import json
import math
import subprocess
import time
from pathlib import Path
from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, convert_to_openai_messages

from recreate import __version__
from recreate.experience.schema import (
    ModelInfo,
    Outcome,
    SandboxInfo,
    ScaffoldRef,
    Step,
    Totals,
    Trajectory,
    Usage,
    utcnow,
)
from recreate.models import endpoint_host, price_call
from recreate.redact import redact_data

STEP_LOG_SUFFIX = ".steps.jsonl"
SAMPLING_FIELDS = (
    "temperature", "top_p", "top_k", "max_tokens", "max_completion_tokens", "seed", "presence_penalty",
    "frequency_penalty", "logprobs", "top_logprobs", "n", "stop", "reasoning_effort",
)  # fmt: skip


def sampling_params(model: BaseChatModel) -> dict[str, Any]:
    """The model's sampling settings, as far as the chat model object exposes them."""
    params = {
        name: getattr(model, name) for name in SAMPLING_FIELDS if getattr(model, name, None) is not None
    }
    extra = getattr(model, "extra_body", None) or {}
    params.update({k: v for k, v in extra.items() if isinstance(v, int | float | str | bool)})
    model_kwargs = getattr(model, "model_kwargs", None) or {}
    params.update({k: v for k, v in model_kwargs.items() if k in SAMPLING_FIELDS})
    return params


def model_info(model: BaseChatModel, provider: str | None = None, policy: str | None = None) -> ModelInfo:
    name = getattr(model, "model_name", None) or getattr(model, "model", None) or type(model).__name__
    llm_type = getattr(model, "_llm_type", None)
    return ModelInfo(
        name=str(name),
        provider=provider or (llm_type.split("-", 1)[0] if isinstance(llm_type, str) else None),
        base_url_host=endpoint_host(model),
        sampling=sampling_params(model),
        policy=policy,
    )


def _token_ids_and_logprobs(message: AIMessage) -> tuple[list[int] | None, list[float] | None]:
    content = ((message.response_metadata or {}).get("logprobs") or {}).get("content") or []
    if not content:
        return None, None
    logprobs: list[float] | None = [_logprob(entry) for entry in content]
    if not all(map(math.isfinite, logprobs)):  # -inf/NaN from an endpoint: no JSON holds it; not trained on
        logprobs = None
    if all(isinstance(entry.get("id"), int) for entry in content):  # llama.cpp sends the ids beside
        return [int(entry["id"]) for entry in content], logprobs
    tokens = [str(entry.get("token", "")) for entry in content]
    if all(t.startswith("token_id:") for t in tokens):
        return [int(t.split(":", 1)[1]) for t in tokens], logprobs
    return None, logprobs


def _logprob(entry: dict[str, Any]) -> float:
    """The sampled token's log-probability. llama.cpp asked for `post_sampling_probs` sends `prob`
    under the distribution it sampled from (temperature applied) instead of the raw `logprob`."""
    if entry.get("logprob") is None and entry.get("prob") is not None:
        return math.log(max(float(entry["prob"]), 1e-45))
    return float(entry["logprob"])


def usage_of(
    message: AIMessage, model_name: str, prices: dict | None = None, base_url: str | None = None
) -> Usage:
    meta = message.usage_metadata or {}
    raw = (message.response_metadata or {}).get("token_usage") or {}
    prompt = int(meta.get("input_tokens", raw.get("prompt_tokens", 0)) or 0)
    completion = int(meta.get("output_tokens", raw.get("completion_tokens", 0)) or 0)
    cached = int((meta.get("input_token_details") or {}).get("cache_read", 0) or 0)
    if isinstance(raw.get("cost"), int | float):
        cost: float | None = float(raw["cost"])
    else:
        cost = price_call(model_name, prompt, cached, completion, prices, base_url=base_url)
    return Usage(prompt_tokens=prompt, completion_tokens=completion, cached_tokens=cached, cost_usd=cost)


def step_record(
    index: int,
    message: AIMessage,
    message_index: int,
    started_at: str,
    model_name: str,
    base_url: str | None = None,
) -> Step:
    token_ids, logprobs = _token_ids_and_logprobs(message)
    finish_reason = (message.response_metadata or {}).get("finish_reason")
    return Step(
        index=index,
        usage=usage_of(
            message, (message.response_metadata or {}).get("model_name") or model_name, base_url=base_url
        ),
        token_ids=token_ids,
        logprobs=logprobs,
        message_index=message_index,
        finish_reason=str(finish_reason) if finish_reason is not None else None,
        started_at=started_at,
    )


def openai_messages(messages: list[BaseMessage]) -> list[dict[str, Any]]:
    """OpenAI chat format, keeping tool calls whose arguments did not parse (they were sent verbatim,
    and the tool message answering them must follow a call with the same id)."""
    converted: list[dict[str, Any]] = convert_to_openai_messages(messages)  # type: ignore[assignment]
    for message, doc in zip(messages, converted, strict=True):
        if isinstance(message, AIMessage) and message.invalid_tool_calls:
            doc.setdefault("tool_calls", []).extend(
                {"type": "function", "id": bad.get("id"),
                 "function": {"name": bad.get("name") or "", "arguments": bad.get("args") or ""}}
                for bad in message.invalid_tool_calls
            )  # fmt: skip
    return converted


@functools.cache
def code_version() -> str:
    """The package version plus the git commit of the checkout it runs from, when there is one."""
    root = Path(__file__).resolve().parents[2]
    try:
        sha = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            timeout=5,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        sha = ""
    return f"{__version__}+g{sha}" if sha else __version__


def totals_of(steps: list[Step], format_errors: int, duration_s: float) -> Totals:
    costs = [s.usage.cost_usd for s in steps]
    return Totals(
        steps=len(steps),
        prompt_tokens=sum(s.usage.prompt_tokens for s in steps),
        completion_tokens=sum(s.usage.completion_tokens for s in steps),
        cost_usd=None if any(c is None for c in costs) else round(sum(costs), 8),  # type: ignore[arg-type]
        duration_s=round(duration_s, 3),
        format_errors=format_errors,
    )


class TrajectoryRecorder:
    """Writes one run's Trajectory: a step log while it runs, the whole document when it ends.

    While a run goes on, `<id>.steps.jsonl` gets one appended line per step (its new messages and
    step record): O(1) per step and no rename, so a kill -9 loses at most the step in flight and
    `recover_trajectory` turns the log back into a Trajectory. When the run ends (or a node is torn
    down) `<id>.json` is written atomically and the log removed."""

    def __init__(
        self,
        *,
        scaffold: ScaffoldRef,
        domain: str,
        model: ModelInfo,
        sandbox: SandboxInfo,
        directory: Path | None,
    ):
        self.scaffold, self.domain, self.model, self.sandbox = scaffold, domain, model, sandbox
        self.directory = directory

    def path_for(self, trajectory_id: str) -> Path | None:
        return self.directory / f"{trajectory_id}.json" if self.directory else None

    def log_path(self, trajectory_id: str) -> Path | None:
        return self.directory / f"{trajectory_id}{STEP_LOG_SUFFIX}" if self.directory else None

    def build(self, state: dict[str, Any], messages: list[BaseMessage], *, final: bool = False) -> Trajectory:
        """The run's Trajectory from the agent's state (redacted)."""
        steps = [Step.model_validate(s) for s in state.get("records") or []]
        sampling = dict(self.model.sampling)
        if state.get("seed") is not None:
            sampling["seed"] = state["seed"]
        traj = Trajectory(
            trajectory_id=state["trajectory_id"],
            task_id=state.get("task_id") or "adhoc",
            run_id=state.get("run_id"),
            domain=self.domain,
            scaffold=self.scaffold,
            model=self.model.model_copy(update={"sampling": sampling}),
            messages=openai_messages(messages),
            steps=steps,
            outcome=Outcome(
                exit_status=state.get("exit_status") or "running",
                submission=state.get("submission"),
                error=state.get("error"),
            ),
            totals=totals_of(
                steps, state.get("format_errors", 0), time.time() - state.get("started_ts", time.time())
            ),
            sandbox=self.sandbox,
            seed=state.get("seed"),
            started_at=state.get("started_at") or utcnow(),
            finished_at=utcnow() if final else None,
            code_version=code_version(),
            metadata=dict(state.get("metadata") or {}),
        )
        return Trajectory.model_validate(redact_data(traj.model_dump()))

    def begin(self, state: dict[str, Any], messages: list[BaseMessage]) -> None:
        """Start the step log: the run's header and its first messages."""
        path = self.log_path(state["trajectory_id"])
        if path is None:
            return
        header = self.build(state, messages).model_dump(mode="json", exclude={"steps", "outcome", "totals"})
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"header": header}) + "\n", encoding="utf-8")

    def log_step(self, trajectory_id: str, messages: list[BaseMessage], step: dict[str, Any]) -> None:
        path = self.log_path(trajectory_id)
        if path is None:
            return
        entry = redact_data({"messages": openai_messages(messages), "step": step})
        with path.open("a", encoding="utf-8") as log:
            log.write(json.dumps(entry, ensure_ascii=False) + "\n")

    def save(self, trajectory: Trajectory) -> Path | None:
        path = self.path_for(trajectory.trajectory_id)
        if path is None:
            return None
        trajectory.save(path)
        self.log_path(trajectory.trajectory_id).unlink(missing_ok=True)  # type: ignore[union-attr]
        return path


def recover_trajectory(log: str | Path) -> Trajectory:
    """The Trajectory of a run whose process died, from its step log (a torn last line is skipped)."""
    header: dict[str, Any] | None = None
    messages: list[dict[str, Any]] = []
    steps: list[Step] = []
    for line in Path(log).read_text(encoding="utf-8").splitlines():
        try:
            entry = json.loads(line)
        except json.JSONDecodeError:
            break
        if "header" in entry:
            header = entry["header"]
            messages = list(header.pop("messages", []))
            continue
        messages.extend(entry["messages"])
        steps.append(Step.model_validate(entry["step"]))
    if header is None:
        raise ValueError(f"{log}: not a step log (no header line)")
    reason = "the process died mid-run; recovered from the step log"
    return Trajectory.model_validate(
        header
        | {
            "messages": messages,
            "steps": [s.model_dump(mode="json") for s in steps],
            "outcome": {"exit_status": "interrupted", "error": reason},
            "totals": totals_of(
                steps, sum("format_error" in (s.action or {}) for s in steps), 0.0
            ).model_dump(),
        }
    )
