"""Settings: one home for all state, config from env vars and `recreate.toml` (pydantic-settings).

Precedence (highest first): explicit arguments, environment variables, `recreate.toml` in the
current directory (or the file named by RECREATE_CONFIG), defaults. API keys are never read from
the config file: only from the environment. A bad value is a one-line `ConfigError` naming the setting,
where it came from (argument, environment variable or file) and what it must be.
"""

from __future__ import annotations

import os
import re
import tomllib
from contextvars import ContextVar
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, ValidationError
from pydantic_settings import BaseSettings, InitSettingsSource, PydanticBaseSettingsSource, SettingsConfigDict
from pydantic_settings.exceptions import SettingsError

from recreate.redact import redact


class ConfigError(ValueError):
    """Bad configuration; the message names the problem and the fix."""


ENV_PREFIX = "RECREATE_"  # every setting reads RECREATE_<NAME> (RECREATE_HOME, RECREATE_MAX_RETRIES, ...)
BASE_URL_ENV = "OPENAI_BASE_URL"  # the endpoint's one exception: the name the openai client reads too
_SECRET_WORDS = ("key", "token", "secret", "password")
_FILE_VALUES: ContextVar[dict[str, Any] | None] = ContextVar("recreate_config_file_values", default=None)
Embedding = Literal["minilm", "hash"]  # "minilm" (semantic, offline) or "hash" (fast, no semantics)
SandboxName = Literal["bwrap", "docker", "local"]  # recreate.sandbox.BACKENDS


class Settings(BaseSettings):
    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX, extra="forbid", env_ignore_empty=True, validate_by_name=True
    )

    home: Path = Path(".recreate")
    model: str | None = None  # agent model spec
    optimizer_model: str | None = None
    base_url: str | None = Field(None, validation_alias=BASE_URL_ENV)  # OpenAI-compatible endpoint
    sandbox: SandboxName = "bwrap"
    chroma_url: str | None = None  # Chroma server; None = embedded PersistentClient
    embedding: Embedding = "minilm"
    prices: dict[str, Any] = {}  # model -> {input, output} or [in, out(, cached)] $/1M tok (models.py checks)
    max_retries: int = Field(6, ge=0)  # retries of a failed model call (0: none)
    request_timeout_s: float = Field(120.0, gt=0, allow_inf_nan=False)

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        """Arguments, then the environment, then the config file `load_settings` read."""
        return init_settings, env_settings, InitSettingsSource(settings_cls, _FILE_VALUES.get() or {})

    def path(self, *parts: str) -> Path:
        """A path under the home directory, created on demand for its parent."""
        p = self.home.joinpath(*parts)
        p.parent.mkdir(parents=True, exist_ok=True)
        return p


def _read_toml(path: Path) -> dict[str, Any]:
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: malformed TOML ({exc}); fix the file or remove it") from exc
    except UnicodeDecodeError:
        raise ConfigError(f"{path}: not UTF-8 text (is it a TOML file?); fix the file or remove it") from None
    except OSError as exc:
        raise ConfigError(
            f"{path}: cannot be read ({exc.strerror or exc}); fix its permissions or remove it"
        ) from None
    section = data.get("recreate", data)
    if not isinstance(section, dict):
        raise ConfigError(f"{path}: [recreate] must be a table of settings; fix the file or remove it")
    secrets = [k for k in section if any(w in k.lower() for w in _SECRET_WORDS)]
    if secrets:
        raise ConfigError(
            f"{path}: {', '.join(secrets)} must not be in a config file; set API keys in the environment"
        )
    return section


def load_settings(
    home: str | Path | None = None, config_file: str | Path | None = None, **overrides: Any
) -> Settings:
    cfg = Path(config_file or os.environ.get("RECREATE_CONFIG", "recreate.toml"))
    from_file = _read_toml(cfg) if cfg.is_file() else {}
    given = {k: v for k, v in overrides.items() if v is not None} | (
        {"home": home} if home is not None else {}
    )
    known = set(Settings.model_fields)
    unknown = sorted((set(from_file) | set(given)) - known)
    if unknown:
        raise ConfigError(f"unknown setting(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}")
    token = _FILE_VALUES.set(from_file)
    try:
        settings = Settings(**given)
    except ValidationError as exc:
        raise ConfigError(_one_line(exc, given, cfg)) from None
    except SettingsError as exc:  # a structured value (e.g. prices) in the environment that is not JSON
        raise ConfigError(_not_json(exc)) from None
    finally:
        _FILE_VALUES.reset(token)
    settings.home = settings.home.expanduser()
    return settings


def env_names(name: str) -> list[str]:
    """The environment variables that set `name`."""
    return [ENV_PREFIX + name.upper(), *([BASE_URL_ENV] if name == "base_url" else [])]


def _not_json(exc: SettingsError) -> str:
    field = re.search(r'field "([^"]+)"', str(exc))
    name = field[1] if field else "?"
    env = ", ".join(env_names(name))
    return f"setting {name} from environment variable {env}: must be JSON (e.g. a JSON object); fix the value"


def _one_line(exc: ValidationError, given: dict[str, Any], cfg: Path) -> str:
    """'setting max_retries from recreate.toml: Input should be a valid integer (got 'six'); fix ...'."""
    error = exc.errors()[0]
    head, *rest = (str(part) for part in error["loc"])
    name = "base_url" if head == BASE_URL_ENV else head
    set_by = [env for env in env_names(name) if os.environ.get(env)]
    where = "argument" if name in given else f"environment variable {set_by[0]}" if set_by else str(cfg)
    field = ".".join([name, *rest])
    got = redact(repr(error["input"]))  # a misplaced key must not reach the terminal
    return f"setting {field} from {where}: {error['msg']} (got {got}); fix the value"
