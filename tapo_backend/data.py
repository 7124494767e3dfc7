"""Logged trajectories (schema v1) -> training tensors.

Two ways to turn a trajectory into tokens:
- token-in/token-out: an assistant turn whose step carries `token_ids` (+ `logprobs`) is used exactly as
  the endpoint produced it, with no re-tokenisation; the behaviour log-probs come from the log.
- template: otherwise the turn is rendered with the tokenizer's chat template.
Either way the environment parts (system, user, tool messages, template glue) are rendered turn by turn
and every rendered prefix must be a prefix of the next rendering, else the template is not append-only
and the tokens would not be what the model saw. Only assistant tokens get mask 1; reward = evaluation.score.

Token lists are position-aligned: `behaviour_logprobs[t]` is log mu(input_ids[t] | input_ids[:t]); a
model token whose turn was logged without log-probs holds NaN there (the trainer fills in the model's),
so one turn without them does not discard the others. See `tapo_backend.logged` for how logged ids
are checked against the stored text (`on_mismatch`), the stop token, and the recorded sampling settings.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections import Counter, defaultdict
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

import jinja2
import torch

from recreate.experience.schema import Trajectory

if TYPE_CHECKING:
    from tapo_backend.config import TrainConfig
from tapo_backend.advantages import group_advantages
from tapo_backend.load import UNTOKENIZABLE, Skipped, read_logs, refuse
from tapo_backend.load import load_trajectories as load_trajectories
from tapo_backend.logged import (
    ON_MISMATCH,
    UNLOGGED,
    DataError,
    Sampling,
    logged_or_model,
    logged_turns,
    model_turn,
    read_turn,
    warn_about_logs,
)

DEFAULT_MAX_LENGTH = 8192  # tokens per trajectory when the config sets none; longer ones are cut
# what a tokenizer or chat template raises for one odd trajectory (a template's raise_exception included)
TOKENIZER_ERRORS: tuple[type[Exception], ...] = (TypeError, ValueError, LookupError, jinja2.TemplateError)


class TemplateError(DataError):
    """The chat template rewrites earlier turns: no trajectory can be tokenised faithfully with it."""


@dataclass
class Example:
    trajectory_id: str
    group: str  # task id: advantages are normalised within a group
    reward: float
    input_ids: list[int]
    mask: list[int]  # 1 = token the model generated
    behaviour_logprobs: list[float] | None  # None = none logged; NaN = this token's turn was not logged
    token_in_token_out: bool
    advantage: float = 0.0
    temperature: float | None = None  # the recorded sampling temperature (None: the config's)
    mismatched_turns: int = 0  # logged turns whose ids do not decode to the stored text (trusted)
    cut: bool = False  # longer than max_length: the tail was not kept
    raw_logprobs_under_sampling: bool = False  # logged log-probs are raw logits' under T/top-p/bias
    iteration_logprobs: list[float] | None = None  # the model's, taken by the trainer at each iteration start
    ref_logprobs: list[float] | None = None  # the initial model's, taken by the trainer when a KL term is set

    @property
    def model_tokens(self) -> int:
        return sum(self.mask)

    @property
    def needs_model_logprobs(self) -> bool:
        """Some model token has no logged behaviour log-prob: the trainer computes them."""
        if self.behaviour_logprobs is None:
            return True
        return any(m and math.isnan(lp) for m, lp in zip(self.mask, self.behaviour_logprobs, strict=True))


@dataclass
class Dataset:
    examples: list[Example]
    skipped: list[Skipped] = field(default_factory=list)
    dropped_groups: dict[str, str] = field(default_factory=dict)  # task id -> why

    def summary(self) -> dict[str, Any]:
        rewards = [e.reward for e in self.examples]
        tokens = sum(len(e.input_ids) for e in self.examples)
        model_tokens = sum(e.model_tokens for e in self.examples)
        mean = sum(rewards) / len(rewards) if rewards else 0.0
        return {
            "groups": len({e.group for e in self.examples}),
            "trajectories": len(self.examples),
            "tokens": tokens,
            "model_tokens": model_tokens,
            "mask_ratio": model_tokens / tokens if tokens else 0.0,
            "reward_min": min(rewards, default=0.0),
            "reward_mean": mean,
            "reward_max": max(rewards, default=0.0),
            "reward_std": math.sqrt(sum((r - mean) ** 2 for r in rewards) / len(rewards)) if rewards else 0.0,
            "token_in_token_out": sum(e.token_in_token_out for e in self.examples),
            "logged_logprobs": sum(e.behaviour_logprobs is not None for e in self.examples),
            "partly_logged_logprobs": sum(
                e.behaviour_logprobs is not None and e.needs_model_logprobs for e in self.examples
            ),
            "token_text_mismatches": sum(e.mismatched_turns for e in self.examples),
            "raw_logprobs_under_sampling": sum(e.raw_logprobs_under_sampling for e in self.examples),
            "cut_at_max_length": sum(e.cut for e in self.examples),
            "dropped_groups": dict(Counter(self.dropped_groups.values())),
            "skipped": len(self.skipped),
            "skipped_by_kind": dict(Counter(s.kind for s in self.skipped)),
        }


# -- tokenisation ------------------------------------------------------------------------------------


def _render(tokenizer: Any, messages: list[dict[str, Any]], generation_prompt: bool) -> str:
    return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=generation_prompt)


def _encode(tokenizer: Any, text: str) -> list[int]:
    return list(tokenizer(text, add_special_tokens=False)["input_ids"]) if text else []


def _not_append_only(index: int, role: str) -> TemplateError:
    return TemplateError(
        f"the chat template is not append-only: rendering the conversation up to message {index} ({role}) "
        "changes text rendered for earlier messages (e.g. it drops earlier reasoning); train from logs "
        "with token ids, or use a template that only appends"
    )


def tokenize_trajectory(
    traj: Trajectory, tokenizer: Any, max_length: int | None = None, on_mismatch: str = "trust"
) -> Example:
    """Token ids, model-token mask and behaviour log-probs for one trajectory (DataError if impossible).

    `on_mismatch` (trust, drop, retokenize): what to do with logged ids that do not decode to the
    stored message text (see `tapo_backend.logged`); `drop` raises DataError.
    """
    if on_mismatch not in ON_MISMATCH:
        raise DataError(f"on_mismatch must be one of {', '.join(ON_MISMATCH)}; got {on_mismatch!r}")
    messages = traj.messages
    if not any(model_turn(m) for m in messages):
        raise DataError("no assistant messages")
    _require_text(messages)
    logged = logged_turns(traj)
    ids: list[int] = []
    mask: list[int] = []
    logprobs: list[float] = []
    mismatched = 0
    rendered = ""  # text covered by `ids` so far

    def append(text_ids: list[int], is_model: bool, lps: list[float] | None = None) -> None:
        ids.extend(text_ids)
        mask.extend([int(is_model)] * len(text_ids))
        logprobs.extend(lps if lps is not None else [0.0] * len(text_ids))

    for i, message in enumerate(messages):
        if not model_turn(message):  # worked examples shown to the model are context, like the prompt
            continue
        context = _render(tokenizer, messages[:i], generation_prompt=True)
        full = _render(tokenizer, messages[: i + 1], generation_prompt=False)
        if not context.startswith(rendered) or not full.startswith(context):
            raise _not_append_only(i, "assistant")
        append(_encode(tokenizer, context[len(rendered) :]), False)
        turn_text = full[len(context) :]
        turn = None
        if i in logged:
            turn = read_turn(tokenizer, turn_text, *logged[i], on_mismatch, lambda t: _encode(tokenizer, t))
            if turn is not None and turn.mismatch and on_mismatch == "drop":
                raise DataError(f"message {i}: the logged token ids do not decode to the stored text")
        if turn is not None:
            mismatched += turn.mismatch
            append(turn.ids, True, turn.logprobs)
            tail = turn.tail  # what the template adds after the generated tokens is environment text
        else:
            body = turn_text[: len(turn_text) - len(_trailing_space(turn_text))]
            tail = turn_text[len(body) :]
            mismatched += i in logged  # retokenized
            ids_before = len(ids)
            append(_encode(tokenizer, body), True)
            logprobs[ids_before:] = [UNLOGGED] * (len(ids) - ids_before)
        append(_encode(tokenizer, tail), False)
        rendered = full
    cut = max_length is not None and len(ids) > max_length
    if cut:
        ids, mask, logprobs = ids[:max_length], mask[:max_length], logprobs[:max_length]
    if mask[0] == 1:
        mask[0] = 0  # the first token has no context to be scored under
    if not any(mask):
        raise DataError("no model tokens left (all beyond max_length)")
    any_logged = any(m and not math.isnan(lp) for m, lp in zip(mask, logprobs, strict=True))
    sampling = Sampling.of(traj)
    return Example(
        trajectory_id=traj.trajectory_id,
        group=traj.task_id,
        reward=float(traj.evaluation.score) if traj.evaluation else 0.0,
        input_ids=ids,
        mask=mask,
        behaviour_logprobs=logprobs if any_logged else None,
        token_in_token_out=bool(logged),
        temperature=sampling.temperature,
        mismatched_turns=mismatched if on_mismatch == "trust" else 0,
        cut=cut,
        raw_logprobs_under_sampling=any_logged and sampling.non_trivial and not sampling.processed_logprobs,
    )


def _require_text(messages: list[dict[str, Any]]) -> None:
    """DataError for a message no tokenizer can encode: an unpaired surrogate (JSON's "\\ud800" escape,
    left by a logger that cut a character in half) is no text."""
    for index, message in enumerate(messages):
        content = message.get("content")
        if isinstance(content, str) and _has_surrogate(content):
            raise DataError(
                f"message {index} ({message.get('role')}) holds an unpaired UTF-16 surrogate, not text; "
                "re-log it as UTF-8 or drop the trajectory"
            )


def _has_surrogate(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def _trailing_space(text: str) -> str:
    return text[len(text.rstrip()) :]


# -- dataset -----------------------------------------------------------------------------------------


def build_dataset(
    source: str | Path,
    tokenizer: Any,
    *,
    advantage: str = "grpo",
    min_group_size: int = 2,
    drop_zero_variance: bool = True,
    max_length: int | None = None,
    on_mismatch: str = "trust",
    strict: bool = False,
) -> Dataset:
    """Load, check, tokenise, group by task, filter groups, attach advantages. Bad files are skipped and
    named with their reason (`tapo_backend.load`), or with `strict` refused (DataError). Trajectories
    longer than `max_length` tokens (None: DEFAULT_MAX_LENGTH) are cut.

    Warns (UserWarning) when logged ids do not decode to their text, and when logged log-probs are raw
    ones under non-trivial sampling (they are then not the sampling distribution's).
    """
    if on_mismatch not in ON_MISMATCH:
        raise DataError(f"--on-mismatch must be one of {', '.join(ON_MISMATCH)}; got {on_mismatch!r}")
    logs, skipped = read_logs(source, vocab_size=len(tokenizer))
    limit = max_length or DEFAULT_MAX_LENGTH
    examples: list[Example] = []
    for logged in sorted(logs, key=lambda log: _content_order(log.trajectory)):
        try:
            examples.append(
                tokenize_trajectory(logged.trajectory, tokenizer, max_length=limit, on_mismatch=on_mismatch)
            )
        except TemplateError:
            raise
        except DataError as exc:
            skipped.append(Skipped(logged.source, str(exc), UNTOKENIZABLE))
        except TOKENIZER_ERRORS as exc:  # the tokenizer or the template refused this one trajectory
            reason = f"the tokenizer refused it ({type(exc).__name__}: {' '.join(str(exc).split())[:200]})"
            skipped.append(Skipped(logged.source, reason, UNTOKENIZABLE))
    if strict:
        refuse(skipped)
    warn_about_logs(examples, skipped, on_mismatch)
    groups: dict[str, list[Example]] = defaultdict(list)
    for example in examples:
        groups[example.group].append(example)
    kept: list[Example] = []
    dropped: dict[str, str] = {}
    for task_id, members in groups.items():
        rewards = [m.reward for m in members]
        if len(members) < min_group_size:
            dropped[task_id] = f"fewer than {min_group_size} trajectories"
        elif drop_zero_variance and max(rewards) == min(rewards):
            dropped[task_id] = "all rewards equal"
        else:
            kept.extend(members)
    if kept:
        rewards = torch.tensor([e.reward for e in kept], dtype=torch.float64)
        values = group_advantages(rewards, [e.group for e in kept], mode=advantage)
        for example, value in zip(kept, values.tolist(), strict=True):
            example.advantage = value
    return Dataset(examples=kept, skipped=skipped, dropped_groups=dropped)


@dataclass
class Batch:
    """Right-padded tensors; the loss-side tensors are shifted by one (they score input_ids[:, 1:])."""

    input_ids: torch.Tensor  # [B, T] long
    attention_mask: torch.Tensor  # [B, T] long
    mask: torch.Tensor  # [B, T-1] float: 1 where input_ids[:, 1:] is a model token
    old_logprobs: torch.Tensor  # [B, T-1] log mu: logged, or the model's at the start of the iteration
    behavior_logprobs: torch.Tensor | None  # [B, T-1] logged log-probs when old_logprobs are recomputed
    ref_logprobs: torch.Tensor | None  # [B, T-1], when every example has them
    advantages: torch.Tensor  # [B] float

    def to(self, device: torch.device | str) -> Batch:
        moved = {f.name: getattr(self, f.name) for f in fields(self)}
        return Batch(**{k: v.to(device) if v is not None else None for k, v in moved.items()})


def pad_ids(examples: list[Example], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-padded input ids and attention mask [B, T]."""
    width = max(len(e.input_ids) for e in examples)
    ids = torch.full((len(examples), width), pad_id, dtype=torch.long)
    attention = torch.zeros((len(examples), width), dtype=torch.long)
    for row, example in enumerate(examples):
        ids[row, : len(example.input_ids)] = torch.tensor(example.input_ids)
        attention[row, : len(example.input_ids)] = 1
    return ids, attention


def _shifted(rows: list[list[float]] | list[list[int]], width: int) -> torch.Tensor:
    out = torch.zeros((len(rows), width), dtype=torch.float32)
    for row, values in enumerate(rows):
        out[row, : len(values)] = torch.tensor(values, dtype=torch.float32)
    return out[:, 1:]


def collate(examples: list[Example], pad_id: int, recompute_old: bool = False) -> Batch:
    """Tensors for the loss. Old log-probs are the logged ones unless missing or `recompute_old`."""
    input_ids, attention_mask = pad_ids(examples, pad_id)
    width = input_ids.shape[1]
    old = []
    for e in examples:
        if (recompute_old or e.needs_model_logprobs) and e.iteration_logprobs is None:
            raise ValueError(f"{e.trajectory_id}: behaviour log-probs were neither logged nor computed")
        old.append(e.iteration_logprobs if recompute_old else logged_or_model(e))
    logged = recompute_old and all(e.behaviour_logprobs is not None for e in examples)
    has_ref = all(e.ref_logprobs is not None for e in examples)
    batch = Batch(
        input_ids=input_ids,
        attention_mask=attention_mask,
        mask=_shifted([e.mask for e in examples], width),
        old_logprobs=_shifted(old, width),
        behavior_logprobs=_shifted([logged_or_model(e) for e in examples], width) if logged else None,
        ref_logprobs=_shifted([e.ref_logprobs for e in examples], width) if has_ref else None,
        advantages=torch.tensor([e.advantage for e in examples], dtype=torch.float32),
    )
    _require_finite(batch, examples)
    return batch


def _require_finite(batch: Batch, examples: list[Example]) -> None:
    """Nothing non-finite reaches the loss (the checks at load keep it out of the logs; a model that
    returns it is caught here too). Raises DataError naming the trajectories."""
    rows = {
        "advantages": batch.advantages.unsqueeze(1),
        "old log-probs": batch.old_logprobs,
        "behaviour log-probs": batch.behavior_logprobs,
        "reference log-probs": batch.ref_logprobs,
    }
    for name, values in rows.items():
        if values is None:
            continue
        bad = (~torch.isfinite(values)).any(dim=1).tolist()
        if any(bad):
            ids = [e.trajectory_id for e, flag in zip(examples, bad, strict=True) if flag]
            raise DataError(f"non-finite {name} for trajectory(ies) {', '.join(ids[:5])}: refusing to train")


def _content_order(traj: Trajectory) -> tuple[str, str, float, str]:
    """An order the runs' content decides, not their random ids (the files' names): the trainer's seeded
    shuffle then trains the same adapter on the same runs."""
    text = json.dumps(traj.messages, sort_keys=True, default=str).encode("utf-8", "surrogatepass")
    score = traj.evaluation.score if traj.evaluation else 0.0
    return traj.task_id, str(traj.seed), score, hashlib.sha256(text).hexdigest()


def dataset_for(config: TrainConfig, source: str | Path, tokenizer: Any) -> Dataset:
    """`build_dataset` with the data settings of `config` (its algorithm's advantages and filters)."""
    return build_dataset(
        source,
        tokenizer,
        advantage=config.advantage or "grpo",
        min_group_size=config.min_group_size,
        drop_zero_variance=config.drop_zero_variance is not False,
        max_length=config.max_length,
        on_mismatch=config.on_mismatch,
        strict=config.strict,
    )
