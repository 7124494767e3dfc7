"""Logged trajectories (schema v1) -> training tensors.

Two ways to turn a trajectory into tokens:
- token-in/token-out: an assistant turn whose step carries `token_ids` (+ `logprobs`) is used exactly as
  the endpoint produced it, with no re-tokenisation; the behaviour log-probs come from the log.
- template: otherwise the turn is rendered with the tokenizer's chat template.
Either way the environment parts (system, user, tool messages, template glue) are rendered turn by turn
and every rendered prefix must be a prefix of the next rendering, else the template is not append-only
and the tokens would not be what the model saw. Only assistant tokens get mask 1; reward = evaluation.score.

Token lists are position-aligned: `behaviour_logprobs[t]` is log mu(input_ids[t] | input_ids[:t]).
"""

from __future__ import annotations

import json
import math
from collections import Counter, defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import torch

from recreate.experience.schema import EXAMPLE_NAME, SchemaError, Trajectory, load_trajectory
from tapo_backend.advantages import group_advantages


class DataError(ValueError):
    """Input the user can fix (missing path, no usable trajectories, a template that is not append-only)."""


class TemplateError(DataError):
    """The chat template rewrites earlier turns: no trajectory can be tokenised faithfully with it."""


@dataclass
class Skipped:
    source: str  # file path, or "path:line" for JSONL
    reason: str


@dataclass
class Example:
    trajectory_id: str
    group: str  # task id: advantages are normalised within a group
    reward: float
    input_ids: list[int]
    mask: list[int]  # 1 = token the model generated
    behaviour_logprobs: list[float] | None  # None = not logged: computed by the model before training
    token_in_token_out: bool
    advantage: float = 0.0
    iteration_logprobs: list[float] | None = None  # the model's, taken by the trainer at each iteration start
    ref_logprobs: list[float] | None = None  # the initial model's, taken by the trainer when a KL term is set

    @property
    def model_tokens(self) -> int:
        return sum(self.mask)


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
            "dropped_groups": dict(Counter(self.dropped_groups.values())),
            "skipped": len(self.skipped),
        }


# -- loading -----------------------------------------------------------------------------------------


def _files(path: Path) -> list[Path]:
    if path.is_file():
        return [path]
    return sorted([*path.rglob("*.json"), *path.rglob("*.jsonl")])


def _documents(file: Path) -> Iterator[tuple[str, Any]]:
    """(source, parsed JSON or an exception) for each document in a file; never raises."""
    try:
        text = file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        yield str(file), exc
        return
    if file.suffix == ".jsonl":
        for number, line in enumerate(text.splitlines(), 1):
            if line.strip():
                yield from _parse(f"{file}:{number}", line)
    else:
        yield from _parse(str(file), text)


def _parse(source: str, text: str) -> Iterator[tuple[str, Any]]:
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        yield source, exc
        return
    if isinstance(doc, list):
        for i, item in enumerate(doc):
            yield f"{source}[{i}]", item
    else:
        yield source, doc


def load_trajectories(path: str | Path) -> tuple[list[Trajectory], list[Skipped]]:
    """Every trajectory under `path` (a file, a directory tree, an experience store), and what was skipped."""
    path = Path(path)
    if not path.exists():
        raise DataError(f"no such file or directory: {path}")
    trajectories: list[Trajectory] = []
    skipped: list[Skipped] = []
    seen: set[str] = set()
    for file in _files(path):
        for source, doc in _documents(file):
            if isinstance(doc, Exception):
                skipped.append(Skipped(source, f"unreadable: {type(doc).__name__}: {doc}"))
                continue
            if not isinstance(doc, dict) or "task_id" not in doc or "messages" not in doc:
                skipped.append(Skipped(source, "not a trajectory"))
                continue
            try:
                traj = load_trajectory(doc)
            except SchemaError as exc:
                skipped.append(Skipped(source, f"invalid trajectory: {' '.join(str(exc).split())[:300]}"))
                continue
            if traj.evaluation is None:
                skipped.append(Skipped(source, "no evaluation (reward unknown)"))
            elif traj.trajectory_id in seen:
                skipped.append(Skipped(source, f"duplicate trajectory id {traj.trajectory_id}"))
            else:
                seen.add(traj.trajectory_id)
                trajectories.append(traj)
    return trajectories, skipped


# -- tokenisation ------------------------------------------------------------------------------------


def _render(tokenizer: Any, messages: list[dict[str, Any]], generation_prompt: bool) -> str:
    return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=generation_prompt)


def _encode(tokenizer: Any, text: str) -> list[int]:
    return list(tokenizer(text, add_special_tokens=False)["input_ids"]) if text else []


def _logged_turns(traj: Trajectory) -> dict[int, tuple[list[int], list[float] | None]]:
    """message index -> (token ids, logprobs) for the assistant turns the endpoint returned tokens for."""
    steps = [s for s in traj.steps if s.token_ids]
    if any(s.message_index is None for s in steps):
        assistant = [i for i, m in enumerate(traj.messages) if _model_turn(m)]
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
        turns[index] = (list(step.token_ids), step.logprobs)
    return turns


def _not_append_only(index: int, role: str) -> TemplateError:
    return TemplateError(
        f"the chat template is not append-only: rendering the conversation up to message {index} ({role}) "
        "changes text rendered for earlier messages (e.g. it drops earlier reasoning); train from logs "
        "with token ids, or use a template that only appends"
    )


def tokenize_trajectory(traj: Trajectory, tokenizer: Any, max_length: int | None = None) -> Example:
    """Token ids, model-token mask and behaviour log-probs for one trajectory (DataError if impossible)."""
    messages = traj.messages
    if not any(_model_turn(m) for m in messages):
        raise DataError("no assistant messages")
    logged = _logged_turns(traj)
    ids: list[int] = []
    mask: list[int] = []
    logprobs: list[float] = []
    all_logged = True
    rendered = ""  # text covered by `ids` so far

    def append(text_ids: list[int], is_model: bool, lps: list[float] | None = None) -> None:
        ids.extend(text_ids)
        mask.extend([int(is_model)] * len(text_ids))
        logprobs.extend(lps if lps is not None else [0.0] * len(text_ids))

    for i, message in enumerate(messages):
        if not _model_turn(message):  # worked examples shown to the model are context, like the prompt
            continue
        context = _render(tokenizer, messages[:i], generation_prompt=True)
        full = _render(tokenizer, messages[: i + 1], generation_prompt=False)
        if not context.startswith(rendered) or not full.startswith(context):
            raise _not_append_only(i, "assistant")
        append(_encode(tokenizer, context[len(rendered) :]), False)
        turn_text = full[len(context) :]
        if i in logged:
            turn_ids, turn_lps = logged[i]
            decoded = tokenizer.decode(turn_ids, skip_special_tokens=False)
            # what the template adds after the generated tokens (end-of-turn glue) is environment text
            tail = turn_text[len(decoded) :] if turn_text.startswith(decoded) else _trailing_space(turn_text)
            all_logged &= turn_lps is not None
            append(turn_ids, True, turn_lps)
        else:
            body = turn_text[: len(turn_text) - len(_trailing_space(turn_text))]
            tail = turn_text[len(body) :]
            all_logged = False
            append(_encode(tokenizer, body), True)
        append(_encode(tokenizer, tail), False)
        rendered = full
    if max_length is not None and len(ids) > max_length:
        ids, mask, logprobs = ids[:max_length], mask[:max_length], logprobs[:max_length]
    if mask[0] == 1:
        mask[0] = 0  # the first token has no context to be scored under
    if not any(mask):
        raise DataError("no model tokens left (all beyond max_length)")
    return Example(
        trajectory_id=traj.trajectory_id,
        group=traj.task_id,
        reward=float(traj.evaluation.score) if traj.evaluation else 0.0,
        input_ids=ids,
        mask=mask,
        behaviour_logprobs=logprobs if all_logged else None,
        token_in_token_out=bool(logged),
    )


def _model_turn(message: dict[str, Any]) -> bool:
    return message.get("role") == "assistant" and message.get("name") != EXAMPLE_NAME


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
) -> Dataset:
    """Load, tokenise, group by task, filter groups, attach advantages. Bad files are skipped, not fatal."""
    trajectories, skipped = load_trajectories(source)
    examples: list[Example] = []
    for traj in trajectories:
        try:
            examples.append(tokenize_trajectory(traj, tokenizer, max_length=max_length))
        except TemplateError:
            raise
        except DataError as exc:
            skipped.append(Skipped(traj.trajectory_id, str(exc)))
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
        values = (
            e.iteration_logprobs if recompute_old or e.behaviour_logprobs is None else e.behaviour_logprobs
        )
        if values is None:
            raise ValueError(f"{e.trajectory_id}: behaviour log-probs were neither logged nor computed")
        old.append(values)
    logged = recompute_old and all(e.behaviour_logprobs is not None for e in examples)
    has_ref = all(e.ref_logprobs is not None for e in examples)
    return Batch(
        input_ids=input_ids,
        attention_mask=attention_mask,
        mask=_shifted([e.mask for e in examples], width),
        old_logprobs=_shifted(old, width),
        behavior_logprobs=_shifted([e.behaviour_logprobs for e in examples], width) if logged else None,
        ref_logprobs=_shifted([e.ref_logprobs for e in examples], width) if has_ref else None,
        advantages=torch.tensor([e.advantage for e in examples], dtype=torch.float32),
    )
