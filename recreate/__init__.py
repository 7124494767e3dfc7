"""recreate: create and improve domain agents from their own experience."""

from typing import Any

__version__ = "0.1.0"

__all__ = ["__version__", "create_domain_agent"]


def __getattr__(name: str) -> Any:
    # imported on first use so `import recreate` (and the CLI) stays fast
    if name == "create_domain_agent":
        from recreate.agent import create_domain_agent

        return create_domain_agent
    raise AttributeError(f"module 'recreate' has no attribute {name!r}")
