"""`recreate ui`: a read-only local web app over RECREATE_HOME (runs, lineage, versions with the
evidence behind each edit, trajectories side by side, experience search, training metrics).

Needs the `ui` extra (Starlette, uvicorn); importing this package does not, so the CLI loads without it."""

from __future__ import annotations

from typing import Any

__all__ = ["create_app", "serve"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from recreate.ui import app

        return getattr(app, name)
    raise AttributeError(name)
