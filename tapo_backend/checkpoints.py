"""Training state on disk: `checkpoints/step-NNNNNNN/` under a run's output dir.

A checkpoint is accelerate's state (weights, optimizer, scheduler, RNGs) plus the log-probs computed so
far (`logprobs.pt`) and `trainer_state.json` (the step and the model the run started from), written
last: a folder without it is a save that was cut short, never resumed from. Without FSDP or DeepSpeed
(which save in their own layouts) the weights are only those training changes: with LoRA the adapter,
not a copy of the frozen base at every save; a resume takes the rest from the model it loads, so it must
be the same model. After a save, older checkpoints beyond the newest `keep` are deleted.
"""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path
from typing import Any

import torch
from accelerate import Accelerator
from accelerate.utils import DistributedType

from tapo_backend.data import DataError, Example

STATE = "trainer_state.json"


class _TiedHeadNotice(logging.Filter):
    """accelerate warns at every checkpoint that it saved a tied lm_head once (models that tie it to
    the input embeddings, as SmolLM2 does): expected, and the tie restores it on load."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        return not ("Removed shared tensor" in message and "lm_head" in message)


logging.getLogger("accelerate.utils.other").addFilter(_TiedHeadNotice())


def latest_checkpoint(output_dir: Path) -> Path | None:
    done = [p for p in checkpoint_folders(output_dir) if (p / STATE).is_file()]
    return done[-1] if done else None


def checkpoint_folders(output_dir: Path) -> list[Path]:
    """Every step-* folder (complete or cut short), oldest step first."""
    return [p for p in sorted((output_dir / "checkpoints").glob("step-*")) if p.is_dir()]


def model_identity(model: str) -> str:
    path = Path(model).expanduser()
    return str(path.resolve()) if path.exists() else model


def _saves_own_layout(accelerator: Accelerator) -> bool:
    return accelerator.distributed_type in (DistributedType.FSDP, DistributedType.DEEPSPEED)


def keep_trainable_weights(accelerator: Accelerator) -> None:
    """Checkpoints hold only the weights training changes (see the module's docstring)."""

    def only_trainable(models: list[Any], weights: list[dict[str, Any]], output_dir: str) -> None:
        for model, state in zip(models, weights, strict=False):  # FSDP/DeepSpeed: no weights listed here
            trainable = {_bare(name) for name, p in model.named_parameters() if p.requires_grad}
            for name in [name for name in state if _bare(name) not in trainable]:
                del state[name]

    accelerator.register_save_state_pre_hook(only_trainable)


def _bare(name: str) -> str:
    """A weight's name without DDP's wrapper prefix (its parameters have it, its state dict not)."""
    return name.removeprefix("module.")


def save_checkpoint(
    accelerator: Accelerator, output_dir: Path, step: int, examples: list[Example], *, model: str, keep: int
) -> Path:
    """Save the training state at `step`; then delete the checkpoints of earlier steps beyond the newest
    `keep` (0: none), and earlier saves that were cut short. A later one (cut short, redone by this resumed
    run) is left."""
    directory = output_dir / "checkpoints" / f"step-{step:07d}"
    accelerator.save_state(str(directory))
    if accelerator.is_main_process:
        computed = {e.trajectory_id: (e.iteration_logprobs, e.ref_logprobs) for e in examples}
        torch.save(computed, directory / "logprobs.pt")
    accelerator.wait_for_everyone()  # every process's files are written before the save counts as done
    if accelerator.is_main_process:
        (directory / STATE).write_text(json.dumps({"step": step, "model": model_identity(model)}))
        earlier = [p for p in checkpoint_folders(output_dir) if p.name < directory.name]
        finished = [p for p in earlier if (p / STATE).is_file()]
        doomed = [p for p in earlier if not (p / STATE).is_file()] + (
            finished[: len(finished) - keep + 1] if keep else []
        )
        for folder in doomed:
            shutil.rmtree(folder, ignore_errors=True)
    accelerator.wait_for_everyone()
    return directory


def load_checkpoint(
    accelerator: Accelerator, policy: Any, directory: Path, examples: list[Example], *, model: str
) -> int:
    state = json.loads((directory / STATE).read_text())
    saved_from = state.get("model")  # absent in checkpoints written before it was recorded
    if saved_from is not None and saved_from != model_identity(model):
        raise DataError(
            f"--resume: {directory} continues a run of the model {saved_from}, not {model_identity(model)}: "
            "resume with the run's own --model"
        )
    if _saves_own_layout(accelerator):
        accelerator.load_state(str(directory))
    else:
        _check_weights(policy, directory)
        # not strict: the frozen weights are not in the checkpoint; they are the model's as loaded
        accelerator.load_state(str(directory), strict=False)
    computed = torch.load(directory / "logprobs.pt")
    for example in examples:
        example.iteration_logprobs, example.ref_logprobs = computed[example.trajectory_id]
    return state["step"]


def _check_weights(policy: Any, directory: Path) -> None:
    """The checkpoint holds every weight this run trains, in its shape, and nothing the model lacks."""
    weights = directory / "model.safetensors"
    if not weights.is_file():
        return
    from safetensors import safe_open

    with safe_open(str(weights), "pt") as saved:
        shapes = {_bare(name): tuple(saved.get_slice(name).get_shape()) for name in saved.keys()}  # noqa: SIM118
    known = {_bare(name): tuple(t.shape) for name, t in policy.state_dict().items()}
    trained = [_bare(name) for name, p in policy.named_parameters() if p.requires_grad]
    problems = [f"lacks {name}" for name in trained if name not in shapes]
    problems += [f"has {name} {shapes[name]}, the model {known[name]}" for name in trained
                 if name in shapes and shapes[name] != known[name]]  # fmt: skip
    problems += [f"has {name}, which the model lacks" for name in shapes if name not in known]
    if problems:
        raise DataError(
            f"--resume: {directory} does not fit this run ({len(problems)} weights; e.g. it {problems[0]}): "
            "it was saved with another model or lora setting; resume with the run's own settings"
        )
