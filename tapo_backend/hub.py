"""Where a model comes from: a local directory, the Hugging Face cache, or the hub.

Light on purpose (no torch): `tapo train` checks its `--model` before importing the training stack.
"""

from __future__ import annotations

import socket
from pathlib import Path
from urllib.parse import urlparse


class ModelUnavailable(RuntimeError):
    """The model is neither a local directory nor in the Hugging Face cache, and the hub cannot be reached."""


HUB_PROBE_TIMEOUT_S = 3.0


def check_model_available(model: str) -> None:
    """Fail at once, in one line, when `model` cannot load: transformers would retry the hub for a minute
    or more on a machine that is offline before saying so."""
    if Path(model).expanduser().is_dir():
        return
    if model.startswith(("/", ".", "~")):
        raise ModelUnavailable(f"--model {model}: no such model directory")
    from huggingface_hub import constants, try_to_load_from_cache

    if isinstance(try_to_load_from_cache(model, "config.json"), str):
        return
    fix = "pass a local model directory, or run once online to fill the cache"
    where = f"not in the Hugging Face cache ({constants.HF_HUB_CACHE})"
    if constants.HF_HUB_OFFLINE:
        raise ModelUnavailable(f"--model {model}: {where} and HF_HUB_OFFLINE is set; {fix}")
    host = urlparse(constants.ENDPOINT).hostname or "huggingface.co"
    try:
        socket.create_connection((host, 443), timeout=HUB_PROBE_TIMEOUT_S).close()
    except OSError as exc:
        raise ModelUnavailable(f"--model {model}: {where} and {host} is unreachable ({exc}); {fix}") from exc
