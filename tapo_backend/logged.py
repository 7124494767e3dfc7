"""Reading what the endpoint logged as it was logged: one assistant turn's token ids against its stored
text, the stop token that ended the turn, and the sampling settings the behaviour log-probs belong to.

A logged turn's ids are what the model generated; its message text may have been edited afterwards
(stripped, a parser's rewrite) or the ids may belong to another tokenizer. `ON_MISMATCH` says what to do
when the ids do not decode to the stored text: `trust` the ids (default; counted and warned about),
`drop` the trajectory, or `retokenize` the turn from its text (its log-probs then come from the model).
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from typing import Any

from recreate.experience.schema import EXAMPLE_NAME, Trajectory

ON_MISMATCH = ("trust", "drop", "retokenize")
UNLOGGED = math.nan  # a model token's behaviour log-prob the log lacks: the trainer takes the model's
PROCESSED_MODES = ("processed_logprobs", "processed_logits")  # vLLM --logprobs-mode values after sampling


class DataError(ValueError):
    """Input the user can fix (missing path, no usable trajectories, a template that is not append-only)."""


def model_turn(message: dict[str, Any]) -> bool:
    """An assistant turn the model produced (a scaffold's worked examples are shown as context)."""
    return message.get("role") == "assistant" and message.get("name") != EXAMPLE_NAME


def logged_turns(traj: Trajectory) -> dict[int, tuple[list[int], list[float] | None, bool]]:
    """message index -> (token ids, logprobs, cut) for the assistant turns the endpoint returned tokens
    for; `cut` when the endpoint stopped the turn at its token cap (no stop token was generated)."""
    steps = [s for s in traj.steps if s.token_ids]
    if any(s.message_index is None for s in steps):
        assistant = [i for i, m in enumerate(traj.messages) if model_turn(m)]
        if len(assistant) != len(steps):
            raise DataError(
                "steps carry token ids without message_index and do not pair with assistant turns"
            )
        indices = assistant
    else:
        indices = [s.message_index for s in steps]
    turns = {}
    for index, step in zip(indices, steps, strict=True):
        if not 0 <= index < len(traj.messages) or traj.messages[index].get("role") != "assistant":
            raise DataError(f"step {step.index}: message_index {index} is not an assistant message")
        if step.logprobs is not None and len(step.logprobs) != len(step.token_ids):
            raise DataError(
                f"step {step.index}: {len(step.token_ids)} token ids but {len(step.logprobs)} logprobs"
            )
        turns[index] = (list(step.token_ids), step.logprobs, step.finish_reason == "length")
    return turns


@dataclass(frozen=True)
class Sampling:
    """The settings a trajectory was sampled with (`trajectory.model.sampling`), as far as recorded."""

    temperature: float | None
    non_trivial: bool  # temperature ≠ 1, top_p < 1, top_k > 0 or a logit bias: μ ≠ softmax(logits)
    processed_logprobs: bool  # the log says its log-probs are the sampling distribution's

    @classmethod
    def of(cls, traj: Trajectory) -> Sampling:
        params: dict[str, Any] = dict(traj.model.sampling) if traj.model is not None else {}
        temperature = params.get("temperature")
        top_p, top_k = params.get("top_p"), params.get("top_k")
        non_trivial = (
            (temperature is not None and float(temperature) != 1.0)
            or (top_p is not None and float(top_p) < 1.0)
            or (top_k is not None and int(top_k) > 0)
            or bool(params.get("logit_bias"))
        )
        mode = params.get("logprobs_mode")
        return cls(
            temperature=float(temperature) if temperature is not None and temperature > 0 else None,
            non_trivial=non_trivial,
            # llama.cpp's post_sampling_probs: each token's probability under softmax(logits / T)
            processed_logprobs=mode in PROCESSED_MODES or bool(params.get("post_sampling_probs")),
        )


def stop_token_ids(tokenizer: Any) -> set[int]:
    """Ids that end a turn: the tokenizer's EOS and the generation config's, when the tokenizer knows it."""
    ids = {tokenizer.eos_token_id} if tokenizer.eos_token_id is not None else set()
    extra = getattr(tokenizer, "generation_eos_token_ids", None) or []
    return ids | set(extra)


@dataclass
class LoggedTurn:
    """One assistant turn's model tokens and the environment text the template adds after them."""

    ids: list[int]
    logprobs: list[float]  # UNLOGGED where the log has no value
    tail: str  # template glue after the generated tokens (mask 0)
    mismatch: bool  # the ids did not decode to the stored text


def read_turn(
    tokenizer: Any,
    turn_text: str,
    ids: list[int],
    logprobs: list[float] | None,
    cut: bool,
    on_mismatch: str,
    encode: Any,
) -> LoggedTurn | None:
    """The turn as logged, or None when `on_mismatch` is `retokenize` and the ids do not match.

    `turn_text` is the template's rendering of the assistant message (its text and end-of-turn glue).
    A stop token the server emitted but left out of the returned ids (it ended the turn, the template
    renders it) is a generated token: it keeps mask 1, with an unlogged log-prob. A turn `cut` at the
    token cap generated no stop token: the one the template renders after it is environment text.
    """
    # a log-prob a hair above 0 is the endpoint's rounding (larger ones are refused at load)
    lps = [min(lp, 0.0) for lp in logprobs] if logprobs is not None else [UNLOGGED] * len(ids)
    decoded = tokenizer.decode(ids, skip_special_tokens=False)
    if turn_text.startswith(decoded):
        tail = turn_text[len(decoded) :]
        stops = stop_token_ids(tokenizer)
        if not cut and not (ids and ids[-1] in stops):
            glue = encode(tail)
            if glue and glue[0] in stops:
                stop_text = tokenizer.decode(glue[:1], skip_special_tokens=False)
                return LoggedTurn(ids + glue[:1], lps + [UNLOGGED], tail[len(stop_text) :], False)
        return LoggedTurn(list(ids), lps, tail, False)
    if on_mismatch == "retokenize":
        return None
    # trusted ids whose text differs: the template glue is whatever trailing whitespace follows
    tail = turn_text[len(turn_text.rstrip()) :]
    return LoggedTurn(list(ids), lps, tail, True)


def warn_about_logs(examples: list[Any], skipped: list[Any], on_mismatch: str) -> None:
    """One warning per kind of logged data that is not what it claims to be (counts in the summary)."""
    mismatched = sum(e.mismatched_turns for e in examples)
    dropped = sum("do not decode to the stored text" in s.reason for s in skipped)
    if mismatched or dropped:
        warnings.warn(
            f"{mismatched + dropped} logged turn(s) have token ids that do not decode to the stored message "
            f"text ({'dropped' if on_mismatch == 'drop' else 'ids trusted'}); "
            "choose with --on-mismatch drop|trust|retokenize",
            UserWarning,
            stacklevel=3,
        )
    raw = sum(e.raw_logprobs_under_sampling for e in examples)
    if raw:
        warnings.warn(
            f"{raw} trajectory(ies) logged raw log-probs under non-trivial sampling (temperature, top_p, "
            "top_k or logit_bias): they are not the sampling distribution's, so the importance ratios are "
            "off; "
            "serve with vLLM's --logprobs-mode processed_logprobs (and record logprobs_mode in the sampling "
            "settings), or set recompute_old_logprobs",
            UserWarning,
            stacklevel=3,
        )


def logged_or_model(example: Any) -> list[float]:
    """Logged behaviour log-probs, the model's (`iteration_logprobs`) where a turn was not logged."""
    if example.behaviour_logprobs is None:
        return example.iteration_logprobs
    if example.iteration_logprobs is None:
        return example.behaviour_logprobs
    return [
        model if math.isnan(logged) else logged
        for logged, model in zip(example.behaviour_logprobs, example.iteration_logprobs, strict=True)
    ]
