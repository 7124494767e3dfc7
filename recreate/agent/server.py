"""Graph factory for `langgraph dev` / LangGraph Server (see langgraph.json at the repo root).

The scaffold, model and sandbox come from the run's context (`scaffold`, `model`, `sandbox`: the graph's
context schema, which Studio shows as the run's settings), else its configurable values, else the
environment (RECREATE_SCAFFOLD, RECREATE_MODEL, RECREATE_SANDBOX), so one deployment serves any stored
version: `{"context": {"scaffold": "runs/x/scaffolds/ds1000@v7"}}`. The server brings its own
checkpointer; the graph is compiled without one.

What a client sends (the context, the configurable values) is held to what the server allows, since the
server's keys and machine serve it: a model reaches the server's own endpoint only (a model name,
PROVIDER:MODEL, or NAME@URL where URL is the server's OPENAI_BASE_URL), the sandbox is bwrap or docker
(`local` too where the operator sets RECREATE_SERVER_ALLOW_LOCAL_SANDBOX=1), and a scaffold resolves
(symlinks followed) inside the server's working directory or RECREATE_HOME. The environment's values are
the operator's and stay as they are.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from langchain_core.language_models import BaseChatModel
from langchain_core.outputs import ChatResult
from langchain_core.runnables import RunnableConfig
from langgraph.graph.state import CompiledStateGraph
from langgraph_sdk.runtime import ServerRuntime

from recreate.agent.factory import create_domain_agent
from recreate.agent.local import is_local_spec
from recreate.agent.state import context_value
from recreate.config import Settings, load_settings
from recreate.models import parse_spec
from recreate.redact import redact

ALLOW_LOCAL_SANDBOX = "RECREATE_SERVER_ALLOW_LOCAL_SANDBOX"
CLIENT_SANDBOXES = ("bwrap", "docker")
DEFAULT_SCAFFOLD = Path(__file__).resolve().parents[2] / "scaffolds" / "minimal"
NO_MODEL = "no model: set RECREATE_MODEL (e.g. openai:gpt-4.1-mini) or pass the run's context.model"
SERVE_LOCAL = (
    "model {model!r}: a LangGraph server does not start model servers of its own; serve the model "
    "(`recreate model serve --detach`) and set RECREATE_MODEL to the NAME@URL it prints"
)


class _NoModel(BaseChatModel):
    """Stands in while the server only reads the graph (schemas, drawing) and no model is configured."""

    @property
    def _llm_type(self) -> str:
        return "none"

    def bind_tools(self, tools: Any, **kwargs: Any) -> _NoModel:
        return self

    def _generate(
        self, messages: Any, stop: Any = None, run_manager: Any = None, **kwargs: Any
    ) -> ChatResult:
        raise ValueError(NO_MODEL)


GraphBuilder = Callable[[str, "str | BaseChatModel", str], CompiledStateGraph]


def server_factory(build: GraphBuilder) -> Callable[[RunnableConfig, ServerRuntime], Any]:
    """A langgraph.json factory around `build(scaffold, model, sandbox)`. The server calls factories on its
    event loop; building reads files and probes the sandbox (blocking calls, which `langgraph dev` refuses
    there), so it happens in a worker thread. A run's context is there only when the server builds the
    graph to execute a run."""

    async def factory(config: RunnableConfig, runtime: ServerRuntime) -> CompiledStateGraph:
        run = runtime.execution_runtime
        context = run.context if run is not None else None
        executing = run is not None
        return await asyncio.to_thread(lambda: build(*graph_settings(config, context, executing=executing)))

    return factory


def domain_agent_graph(scaffold: str, model: str | BaseChatModel, sandbox: str) -> CompiledStateGraph:
    return create_domain_agent(scaffold, model=model, sandbox=sandbox, name="domain_agent")


make_graph = server_factory(domain_agent_graph)


def graph_settings(
    config: RunnableConfig, context: Any = None, *, executing: bool = True
) -> tuple[str, str | BaseChatModel, str]:
    """(scaffold, model, sandbox) of a graph the server builds: the run's context, else its configurable
    values (both checked: a client sent them), else the environment. Without a model, a graph built only
    to be read gets a stand-in."""
    configurable = (config or {}).get("configurable") or {}
    settings = load_settings()

    def setting(key: str, check: ClientCheck, default: Any) -> Any:
        for where, value in (
            ("context", context_value(context, key)),
            ("configurable", configurable.get(key)),
        ):
            if value is not None:
                return check(f"{where}.{key}", value, settings)
        return default

    scaffold = setting(
        "scaffold", client_scaffold, os.environ.get("RECREATE_SCAFFOLD") or str(DEFAULT_SCAFFOLD)
    )
    model = setting("model", client_model, settings.model)
    if not model and executing:
        raise ValueError(NO_MODEL)
    if is_local_spec(model):  # create_domain_agent would hand back a context manager, not a graph
        raise ValueError(SERVE_LOCAL.format(model=model))
    return str(scaffold), model or _NoModel(), setting("sandbox", client_sandbox, settings.sandbox)


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
    before `@` of a ref) resolves inside the working directory or the home; a stored `name@vN` does."""
    roots = [Path.cwd().resolve(), settings.home.resolve()]
    if isinstance(value, str) and value.strip():
        location = value.rpartition("@")[0] or value
        try:
            paths = [Path(text).expanduser().resolve() for text in (value, location)]
        except (OSError, ValueError, RuntimeError):  # a NUL byte, an unknown ~user, a symlink loop
            paths = []
        if paths and all(any(p.is_relative_to(root) for root in roots) for p in paths):
            return value
    raise ValueError(
        f"{key} {value!r}: a run's scaffold is a stored version (name@vN) or a path inside the server's "
        "working directory or RECREATE_HOME; pass one of those"
    )
