"""Settings: one home for all state, config from env vars and `recreate.toml`.

Precedence (highest first): explicit arguments, environment variables, `recreate.toml` in the
current directory (or the file named by RECREATE_CONFIG), defaults. API keys are never read from
the config file: only from the environment.
"""

from __future__ import annotations

import os
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


class ConfigError(ValueError):
    """Bad configuration; the message names the problem and the fix."""


@dataclass
class Settings:
    home: Path = Path(".recreate")
    model: str | None = None  # agent model spec
    optimizer_model: str | None = None
    base_url: str | None = None  # OpenAI-compatible endpoint (vLLM, Ollama, llama.cpp)
    sandbox: str = "bwrap"
    chroma_url: str | None = None  # Chroma server; None = embedded PersistentClient
    embedding: str = "minilm"  # "minilm" (semantic, offline) or "hash" (fast, no semantics)
    prices: dict[str, dict[str, float]] = field(default_factory=dict)  # model -> {input, output} $/1M tok
    max_retries: int = 6
    request_timeout_s: float = 120.0

    def path(self, *parts: str) -> Path:
        """A path under the home directory, created on demand for its parent."""
        p = self.home.joinpath(*parts)
        p.parent.mkdir(parents=True, exist_ok=True)
        return p


_ENV = {
    "RECREATE_HOME": "home",
    "RECREATE_MODEL": "model",
    "RECREATE_OPTIMIZER_MODEL": "optimizer_model",
    "OPENAI_BASE_URL": "base_url",
    "RECREATE_SANDBOX": "sandbox",
    "RECREATE_CHROMA_URL": "chroma_url",
    "RECREATE_EMBEDDING": "embedding",
}
_SECRET_WORDS = ("key", "token", "secret", "password")


def _read_toml(path: Path) -> dict[str, Any]:
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: malformed TOML ({exc}); fix the file or remove it") from exc
    section = data.get("recreate", data)
    secrets = [k for k in section if any(w in k.lower() for w in _SECRET_WORDS)]
    if secrets:
        raise ConfigError(
            f"{path}: {', '.join(secrets)} must not be in a config file; set API keys in the environment"
        )
    return section


def load_settings(
    home: str | Path | None = None, config_file: str | Path | None = None, **overrides: Any
) -> Settings:
    values: dict[str, Any] = {}
    cfg = Path(config_file or os.environ.get("RECREATE_CONFIG", "recreate.toml"))
    if cfg.is_file():
        values.update(_read_toml(cfg))
    for env, key in _ENV.items():
        if os.environ.get(env):
            values[key] = os.environ[env]
    if home is not None:
        values["home"] = home
    values.update({k: v for k, v in overrides.items() if v is not None})
    known = set(Settings.__dataclass_fields__)
    unknown = sorted(set(values) - known)
    if unknown:
        raise ConfigError(f"unknown setting(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}")
    values["home"] = Path(values.get("home", ".recreate")).expanduser()
    return Settings(**values)
