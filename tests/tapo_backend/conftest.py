"""Tiny models, tokenizers and synthetic multi-turn trajectories for the TAPO tests (all built locally)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from recreate.experience.schema import Evaluation, Step, Trajectory

CHATML = (
    "{{ bos_token }}{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
# Renders an assistant turn's reasoning only while it is the last message: not append-only.
DROPS_OLD_REASONING = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n"
    "{% if m['role'] == 'assistant' and not loop.last %}{{ m['content'].split('</think>')[-1] }}"
    "{% else %}{{ m['content'] }}{% endif %}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def make_tokenizer(chat_template: str = CHATML) -> Any:
    """Byte-level tokenizer (every byte is a token, no merges) with ChatML-style special tokens."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {ch: i for i, ch in enumerate(sorted(pre_tokenizers.ByteLevel.alphabet()))}
    backend = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend,
        bos_token="<|bos|>",
        eos_token="<|im_end|>",
        pad_token="<|pad|>",
        additional_special_tokens=["<|im_start|>"],
    )
    tokenizer.chat_template = chat_template
    return tokenizer


def save_tiny_model(directory: Path, chat_template: str = CHATML, seed: int = 0) -> Path:
    """A 2-layer random-init Llama + tokenizer saved as a local model directory."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    tokenizer = make_tokenizer(chat_template)
    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        tie_word_embeddings=False,
    )
    LlamaForCausalLM(config).save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory


@pytest.fixture(autouse=True)
def _fresh_accelerator_state() -> Iterator[None]:
    """Accelerate keeps one process-wide state; tests switch precision, so each starts from scratch."""
    yield
    from accelerate.state import AcceleratorState

    AcceleratorState._reset_state(reset_partial_state=True)


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return save_tiny_model(tmp_path_factory.mktemp("tiny-llama"))


@pytest.fixture(scope="session")
def tokenizer() -> Any:
    return make_tokenizer()


def synthetic_trajectory(
    task: int,
    answer: str,
    *,
    tokenizer: Any = None,
    logprob: float = -1.5,
    trajectory_id: str | None = None,
) -> Trajectory:
    """Two assistant turns with a tool result between; reward 1 when the final answer is "A".

    With `tokenizer`, the assistant steps carry token ids (content + end-of-turn) and logprobs, as an
    endpoint returning tokens would log them.
    """
    messages = [
        {"role": "system", "content": "Answer with one letter."},
        {"role": "user", "content": f"Task {task}: pick a letter."},
        {"role": "assistant", "content": f"look {task}"},
        {"role": "tool", "content": "A is right, B is wrong."},
        {"role": "assistant", "content": answer},
    ]
    steps = []
    for index, message_index in enumerate((2, 4)):
        ids = logprobs = None
        if tokenizer is not None:
            ids = tokenizer(messages[message_index]["content"] + "<|im_end|>", add_special_tokens=False)[
                "input_ids"
            ]
            logprobs = [logprob] * len(ids)
        steps.append(Step(index=index, message_index=message_index, token_ids=ids, logprobs=logprobs))
    score = 1.0 if answer == "A" else 0.0
    return Trajectory(
        trajectory_id=trajectory_id or f"t-{task}-{answer}-{id(steps)}",
        task_id=f"task-{task}",
        domain="synthetic",
        messages=messages,
        steps=steps,
        evaluation=Evaluation(score=score, passed=score > 0),
    )


@pytest.fixture
def write_logs(tmp_path: Path) -> Callable[..., Path]:
    """Write a balanced set of synthetic trajectories (A and B answers per task) into a log directory."""

    def write(tasks: int = 4, per_answer: int = 2, tokenizer: Any = None, name: str = "logs") -> Path:
        root = tmp_path / name
        for task in range(tasks):
            for answer in ("A", "B"):
                for k in range(per_answer):
                    traj = synthetic_trajectory(
                        task, answer, tokenizer=tokenizer, trajectory_id=f"t-{task}-{answer}-{k}"
                    )
                    traj.save(root / f"task-{task}" / f"{traj.trajectory_id}.json")
        return root

    return write
