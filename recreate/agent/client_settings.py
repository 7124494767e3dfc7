"""What a LangGraph server takes from a client: the values of a run's context or configurable values,
held to what the server allows, since the server's keys and machine serve them.

- a model reaches the server's own endpoint only: a model name or PROVIDER:MODEL, or NAME@URL where URL
  is the server's OPENAI_BASE_URL (any other URL, in any spelling, is refused);
- the sandbox is bwrap or docker (`local` too where the operator sets RECREATE_SERVER_ALLOW_LOCAL_SANDBOX=1);
- a path (a scaffold, a tasks file) resolves, symlinks followed, inside the server's working directory or
  RECREATE_HOME; a stored scaffold version (`name@vN`) does.

Each check takes the key as the error names it (`context.model`), the value and the server's settings,
and returns the value or raises a one-line ValueError naming the key and the fix. Values from the
server's own environment are the operator's and are not checked here.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from recreate.agent.local import is_local_spec
from recreate.config import Settings
from recreate.models import parse_spec
from recreate.redact import redact

ALLOW_LOCAL_SANDBOX = "RECREATE_SERVER_ALLOW_LOCAL_SANDBOX"
CLIENT_SANDBOXES = ("bwrap", "docker")
ClientCheck = Callable[[str, Any, Settings], Any]


def client_model(key: str, value: Any, settings: Settings) -> str:
    """A model spec a client sent: one that names an endpoint must name the server's own."""
    if not isinstance(value, str) or not value or any(c.isspace() or not c.isprintable() for c in value):
        raise ValueError(f"{key} {value!r} is not a model spec; pass a model name or PROVIDER:MODEL")
    if is_local_spec(value):
        return value  # graph_settings says how to serve it
    url = parse_spec(value)[2]
    if url is None and "://" not in value:
        return value  # the server's endpoint (OPENAI_BASE_URL) or the provider's own
    configured = _endpoint(settings.base_url) if settings.base_url else None
    if url is not None and configured is not None and _endpoint(url) == configured:
        return value
    raise ValueError(
        f"{key} {redact(value)!r}: a run may not choose the model endpoint; pass a model name or "
        "PROVIDER:MODEL (served by the server's own endpoint, its OPENAI_BASE_URL)"
    )


def _endpoint(url: str) -> tuple[Any, ...] | None:
    """A URL compared as an endpoint: scheme, credentials, host, port (the default one spelled out), path
    without its trailing slash, query and fragment; None when it has no valid port."""
    parts = urlsplit(url)
    try:
        port = parts.port or {"http": 80, "https": 443}.get(parts.scheme.lower())
    except ValueError:
        return None
    rest = (parts.username, parts.password, parts.hostname, port, parts.path.rstrip("/"), parts.query)
    return (parts.scheme.lower(), *rest, parts.fragment)


def client_sandbox(key: str, value: Any, settings: Settings) -> str:
    """A sandbox a client asked for: an isolating one, unless the operator allows `local`."""
    allowed = CLIENT_SANDBOXES + (("local",) if os.environ.get(ALLOW_LOCAL_SANDBOX) == "1" else ())
    if isinstance(value, str) and value in allowed:
        return value
    raise ValueError(
        f"{key} {value!r}: a run's sandbox is one of {', '.join(allowed)}; pass one of them "
        f"('local' does not isolate: the server's operator allows it with {ALLOW_LOCAL_SANDBOX}=1)"
    )


def client_scaffold(key: str, value: Any, settings: Settings) -> str:
    """A scaffold a client named: every path `load_scaffold` may read for it (the text, and the part
    before `@` of a ref) is one `client_path` allows; a stored `name@vN` is."""
    if (
        isinstance(value, str)
        and value.strip()
        and _inside(settings, value, value.rpartition("@")[0] or value)
    ):
        return value
    raise ValueError(
        f"{key} {value!r}: a run's scaffold is a stored version (name@vN) or a path inside the server's "
        "working directory or RECREATE_HOME; pass one of those"
    )


def client_path(key: str, value: Any, settings: Settings) -> str:
    """A file or folder a client named: it resolves (symlinks followed) inside the working directory or
    the home."""
    if isinstance(value, str | Path) and str(value).strip() and _inside(settings, str(value)):
        return str(value)
    raise ValueError(
        f"{key} {value!r}: a run's paths lie inside the server's working directory or RECREATE_HOME; "
        "pass a path there"
    )


def _inside(settings: Settings, *texts: str) -> bool:
    roots = [Path.cwd().resolve(), settings.home.resolve()]
    try:
        paths = [Path(text).expanduser().resolve() for text in texts]
    except (OSError, ValueError, RuntimeError):  # a NUL byte, an unknown ~user, a symlink loop
        return False
    return all(any(path.is_relative_to(root) for root in roots) for path in paths)
