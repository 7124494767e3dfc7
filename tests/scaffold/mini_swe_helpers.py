"""mini-swe-agent's own loader and renderer for the tests: it must be imported quietly (no banner, no
config directory in the user's home, no price list fetched), so every test imports it from here."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

os.environ.setdefault("MSWEA_SILENT_STARTUP", "1")
os.environ.setdefault("MSWEA_GLOBAL_CONFIG_DIR", tempfile.mkdtemp(prefix="mswea-config-"))
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import minisweagent  # noqa: E402
from minisweagent.agents import get_agent  # noqa: E402
from minisweagent.agents.default import AgentConfig, DefaultAgent  # noqa: E402
from minisweagent.config import get_config_from_spec  # noqa: E402
from minisweagent.environments import get_environment  # noqa: E402
from minisweagent.environments.local import LocalEnvironment, LocalEnvironmentConfig  # noqa: E402
from minisweagent.models import get_model  # noqa: E402
from minisweagent.models.litellm_model import LitellmModel, LitellmModelConfig  # noqa: E402
from minisweagent.utils.serialize import recursive_merge  # noqa: E402

PACKAGE_CONFIGS = Path(minisweagent.__file__).parent / "config"
SHIPPED = sorted(PACKAGE_CONFIGS.glob("*.yaml")) + sorted(PACKAGE_CONFIGS.glob("benchmarks/*.yaml"))


def only(fields: dict[str, Any], section: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in section.items() if k in fields}


def mini_agent(config: dict[str, Any], **model: Any) -> DefaultAgent:
    """mini-swe-agent's DefaultAgent for a loaded config, on its local environment (whatever the config's
    environment_class: the environment's own config fields are what the templates read)."""
    model_config = {"model_name": "openai/scripted", **only(LitellmModelConfig.model_fields, config["model"])}
    model_config.update(model)
    return DefaultAgent(
        LitellmModel(**model_config),
        LocalEnvironment(**only(LocalEnvironmentConfig.model_fields, config.get("environment") or {})),
        **only(AgentConfig.model_fields, config["agent"]),
    )


def mini_prompts(path: Path, task: str) -> tuple[str, str]:
    """The system and first user messages mini-swe-agent renders from the config file at `path`."""
    agent = mini_agent({"model": {}, **get_config_from_spec(str(path))})
    agent.extra_template_vars |= {"task": task}
    return agent._render_template(agent.config.system_template), agent._render_template(
        agent.config.instance_template
    )


__all__ = [
    "PACKAGE_CONFIGS",
    "SHIPPED",
    "get_agent",
    "get_config_from_spec",
    "get_environment",
    "get_model",
    "mini_agent",
    "mini_prompts",
    "minisweagent",
    "recursive_merge",
]
