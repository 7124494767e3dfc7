"""`create_domain_agent(..., model="local")`: the agent on a model served on this machine for the length
of a `with` block.

    with create_domain_agent("runs/first/scaffold", model="local") as agent:   # the embedded SmolLM2
        agent.invoke({"task": "Reply with the word: Alpha"})

`model="local:PATH"` serves a .gguf file or an HF model directory instead (e.g. a fine-tuned run's final
model: `load_run(...).model`). A server already serving that model (`recreate model serve`) is used and
left running; one started here stops when the block ends (and dies with this process in any case).
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from langgraph.graph.state import CompiledStateGraph

from recreate.errors import Arg, ArgumentError
from recreate.local import LOCAL_SPEC

log = logging.getLogger("recreate.local")


def is_local_spec(model: object) -> bool:
    """`local`, or `local:PATH`: a model this process serves for itself."""
    return isinstance(model, str) and (model == LOCAL_SPEC or model.startswith(f"{LOCAL_SPEC}:"))


def local_weights(model: str) -> Path | None:
    """The weights `local:PATH` names (None: the embedded model), checked to be servable."""
    path = model.removeprefix(LOCAL_SPEC).removeprefix(":").strip()
    if not path:
        return None
    weights = Path(path).expanduser()
    if (weights.is_file() and weights.suffix == ".gguf") or (weights / "config.json").is_file():
        return weights
    raise ArgumentError(
        f"{weights} is neither a .gguf file nor an HF model directory (with a config.json): pass {{model}}",
        model=Arg("model", "'local:PATH'", "local:PATH"),
    )


class LocalAgent:
    """A context manager: entering serves the model and returns the compiled agent graph; leaving
    stops the server this block started. Entered again while open (a nested `with`, or a helper that
    opens it too), it returns the same graph on the same server; the outermost exit stops the server.
    `build(model=spec, **options)` compiles the graph."""

    def __init__(self, model: str, build: Callable[..., CompiledStateGraph], options: dict[str, Any]):
        self.spec, self.weights = model, local_weights(model)
        self._build, self._options = build, options
        self._lock = threading.Lock()
        self._stack: contextlib.ExitStack | None = None
        self._graph: CompiledStateGraph | None = None
        self._depth = 0  # open blocks on this agent
        self.server: Any = None  # the ServerInfo while a block runs

    def __enter__(self) -> CompiledStateGraph:
        with self._lock:
            if self._depth == 0:
                self._graph = self._serve()
            self._depth += 1
            return self._graph

    def _serve(self) -> CompiledStateGraph:
        from recreate.config import load_settings
        from recreate.local import local_agent_options, local_endpoint

        with contextlib.ExitStack() as stack:
            stack.callback(setattr, self, "server", None)  # a failed build leaves no stale server
            self.server = stack.enter_context(
                local_endpoint(load_settings().home, model=self.weights, log=log.info)
            )
            graph = self._build(model=self.server.spec, **(local_agent_options(self.server) | self._options))
            self._stack = stack.pop_all()  # the server outlives this `with`, not the caller's block
        return graph

    def __exit__(self, *exc: object) -> None:
        with self._lock:
            if self._depth == 0:  # never entered, or already left
                return
            self._depth -= 1
            if self._depth == 0 and self._stack is not None:
                stack, self._stack, self._graph = self._stack, None, None
                stack.close()  # under the lock: an enter meanwhile waits, then starts its own

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        raise AttributeError(
            f"the agent on model={self.spec!r} runs inside a with-block, which serves the model and stops "
            f"it after: `with create_domain_agent(..., model={self.spec!r}) as agent: agent.{name}(...)`"
        )
