"""Trajectory recording: per-step records from model replies, and the Trajectory v1 document.

A step is one model call: its usage and cost, the completion's token ids and logprobs when the
endpoint returned them (vLLM with `return_tokens_as_token_ids` sends tokens as "token_id:N"), the
action taken and what the sandbox observed. The whole document is redacted before it touches disk.
"""

from __future__ import annotations

import functools
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
from recreate.redact import redact

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


def model_info(model: BaseChatModel, provider: str | None = None) -> ModelInfo:
    name = getattr(model, "model_name", None) or getattr(model, "model", None) or type(model).__name__
    llm_type = getattr(model, "_llm_type", None)
    return ModelInfo(
        name=str(name),
        provider=provider or (llm_type.split("-", 1)[0] if isinstance(llm_type, str) else None),
        base_url_host=endpoint_host(model),
        sampling=sampling_params(model),
    )


def _token_ids_and_logprobs(message: AIMessage) -> tuple[list[int] | None, list[float] | None]:
    content = ((message.response_metadata or {}).get("logprobs") or {}).get("content") or []
    if not content:
        return None, None
    logprobs = [float(entry["logprob"]) for entry in content]
    tokens = [str(entry.get("token", "")) for entry in content]
    if all(t.startswith("token_id:") for t in tokens):
        return [int(t.split(":", 1)[1]) for t in tokens], logprobs
    return None, logprobs


def usage_of(message: AIMessage, model_name: str, prices: dict | None = None) -> Usage:
    meta = message.usage_metadata or {}
    raw = (message.response_metadata or {}).get("token_usage") or {}
    prompt = int(meta.get("input_tokens", raw.get("prompt_tokens", 0)) or 0)
    completion = int(meta.get("output_tokens", raw.get("completion_tokens", 0)) or 0)
    cached = int((meta.get("input_token_details") or {}).get("cache_read", 0) or 0)
    if isinstance(raw.get("cost"), int | float):
        cost: float | None = float(raw["cost"])
    else:
        cost = price_call(model_name, prompt, cached, completion, prices)
    return Usage(prompt_tokens=prompt, completion_tokens=completion, cached_tokens=cached, cost_usd=cost)


def step_record(index: int, message: AIMessage, message_index: int, started_at: str, model_name: str) -> Step:
    token_ids, logprobs = _token_ids_and_logprobs(message)
    return Step(
        index=index,
        usage=usage_of(message, (message.response_metadata or {}).get("model_name") or model_name),
        token_ids=token_ids,
        logprobs=logprobs,
        message_index=message_index,
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
    """Builds the Trajectory of one run from the agent's state and writes it atomically."""

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

    def build(self, state: dict[str, Any], messages: list[BaseMessage], *, final: bool = False) -> Trajectory:
        steps = [Step.model_validate(s) for s in state.get("records") or []]
        started = state.get("started_at") or utcnow()
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
            started_at=started,
            finished_at=utcnow() if final else None,
            code_version=code_version(),
            metadata=dict(state.get("metadata") or {}),
        )
        return Trajectory.model_validate_json(redact(traj.to_json()))

    def save(self, trajectory: Trajectory) -> Path | None:
        path = self.path_for(trajectory.trajectory_id)
        return trajectory.save(path) if path else None
