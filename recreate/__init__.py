"""recreate: create and improve domain agents from their own experience.

From Python: `optimize()` (a `recreate evolve` run), `load_run()` (a run read back) and
`create_domain_agent()` (a scaffold and a model as a LangGraph graph).
"""

from importlib import import_module
from typing import Any

__version__ = "0.1.0"

# imported on first use so `import recreate` (and the CLI) stays fast
_EXPORTS = {
    "EvolveResult": "recreate.runs",
    "create_domain_agent": "recreate.agent",
    "load_run": "recreate.runs",
    "optimize": "recreate.optimizer.run",
}
__all__ = ["__version__", *sorted(_EXPORTS)]


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'recreate' has no attribute {name!r}")
    return getattr(import_module(_EXPORTS[name]), name)
