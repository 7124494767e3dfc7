"""Render untrusted Jinja templates under a time, memory and output bound.

A template may be written by a model, and the sandboxed Jinja environment keeps it away from host code
but not from the host's time and memory: nested `range(100000)` loops run for hours, and
`('x'*100000)*100000` asks for 10 GB. So templates render in small worker processes
(`_render_worker.py`: capped address space, dead with their parent), reused across renders; a render
that overruns its time is killed with its worker, and every bound it hits is a `ScaffoldError` that says
which one.
"""

from __future__ import annotations

import atexit
import json
import os
import select
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from recreate.redact import safe_env
from recreate.scaffold.errors import ScaffoldError

RENDER_TIMEOUT_S = 10.0  # per render, once the worker has started
_START_TIMEOUT_S = 120.0
RENDER_MEMORY_BYTES = 512 * 2**20
RENDER_MAX_CHARS = 4_000_000  # far beyond any model's context
_WORKER = Path(__file__).with_name("_render_worker.py")
_MAX_IDLE_WORKERS = 8


class _Worker:
    def __init__(self) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-P", str(_WORKER), str(RENDER_MEMORY_BYTES), str(os.getpid())],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            encoding="utf-8",
            env=safe_env(dict(os.environ)),  # it renders model-written templates: no key reaches it
        )
        if self._read_line(_START_TIMEOUT_S) != '{"ready": true}\n':  # a loaded machine starts slowly
            self.kill()
            raise ScaffoldError(f"the template renderer did not start within {_START_TIMEOUT_S:g} s")

    def _read_line(self, timeout_s: float) -> str | None:
        """The worker's next line; None when none came within `timeout_s`, "" when it is gone."""
        assert self.proc.stdout is not None
        poller = select.poll()  # not select(): it fails on descriptors past 1023, as a busy process has
        poller.register(self.proc.stdout, select.POLLIN)
        deadline = time.monotonic() + timeout_s
        while (left := deadline - time.monotonic()) > 0:
            if poller.poll(left * 1000):
                return self.proc.stdout.readline()
        return None

    def ask(self, request: dict[str, Any], timeout_s: float) -> dict[str, Any] | None:
        """The worker's answer; None when it did not answer in time (it is then killed)."""
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.write(json.dumps(request, default=str) + "\n")
            self.proc.stdin.flush()
            line = self._read_line(timeout_s)
        except OSError:  # it died before reading the request
            line = ""
        if line:
            return json.loads(line)
        self.kill()
        if line is None:
            return None
        mib = RENDER_MEMORY_BYTES // 2**20
        return {"error": f"the rendering process died (exit code {self.proc.returncode}; {mib} MiB bound)"}

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        for pipe in (self.proc.stdin, self.proc.stdout):
            if pipe is not None:
                pipe.close()


class _Pool:
    def __init__(self) -> None:
        self._idle: list[_Worker] = []
        self._lock = threading.Lock()

    def ask(self, request: dict[str, Any], timeout_s: float) -> dict[str, Any] | None:
        with self._lock:
            while self._idle and self._idle[-1].proc.poll() is not None:
                self._idle.pop().kill()  # died while idle
            worker = self._idle.pop() if self._idle else None
        worker = worker or _Worker()
        reply = worker.ask(request, timeout_s)
        with self._lock:
            reuse = (
                reply is not None
                and not reply.get("bounded")  # a worker that hit a bound exits
                and worker.proc.poll() is None
                and len(self._idle) < _MAX_IDLE_WORKERS
            )
            if reuse:
                self._idle.append(worker)
        if not reuse:
            worker.kill()
        return reply

    def close(self) -> None:
        with self._lock:
            workers, self._idle = self._idle, []
        for worker in workers:
            worker.kill()


_pool = _Pool()
atexit.register(_pool.close)


def render_bounded(
    source: str, variables: dict[str, Any], what: str = "template", *, timeout_s: float | None = None
) -> str:
    """Render `source` with `variables` (JSON values) in a bounded worker; ScaffoldError names `what`
    and the problem: a template error (with its line), an expression's error, or the bound it hit."""
    request = {"source": source, "variables": variables, "max_chars": RENDER_MAX_CHARS}
    return _ask(request, what, timeout_s)["text"]


def names_bounded(source: str, what: str = "template") -> frozenset[str]:
    """The names a template reads from its context, found in a bounded worker: jinja2.meta evaluates
    the template's constant expressions (`('x'*100000)*100000`) while it looks."""
    return frozenset(_ask({"source": source, "names": True}, what, None)["names"])


def schema_errors_bounded(
    schema: dict[str, Any], instance: Any, what: str, *, timeout_s: float | None = None
) -> list[tuple[list[str | int], str]]:
    """(path, message) of every way `instance` fails the JSON `schema`, best match first, checked in a
    bounded worker: a schema's `pattern` is matched by a backtracking engine that a model-written
    regex (`^(a|a)*$`) keeps busy for hours, holding the GIL of whatever process runs it."""
    timeout_s = RENDER_TIMEOUT_S if timeout_s is None else timeout_s
    reply = _pool.ask({"schema": schema, "instance": instance}, timeout_s)
    if reply is None or "error" in reply:
        message = (
            f"checking the arguments against the schema took longer than {timeout_s:g} s (a regular "
            "expression that backtracks, like ^(a|a)*$?) and was stopped"
            if reply is None
            else f"the arguments cannot be checked against the schema: {reply['error']}"
        )
        raise ScaffoldError(f"{what}: {message}" if what else message)
    return [(path, message) for path, message in reply["errors"]]


def _ask(request: dict[str, Any], what: str, timeout_s: float | None) -> dict[str, Any]:
    timeout_s = RENDER_TIMEOUT_S if timeout_s is None else timeout_s
    reply = _pool.ask(request, timeout_s)
    if reply is None:
        raise ScaffoldError(
            f"{what}: rendering took longer than {timeout_s:g} s (a loop too large?) and was stopped"
        )
    if "error" in reply:
        where = f" (line {reply['line']})" if reply.get("line") else ""
        bound = f" (bound: {RENDER_MEMORY_BYTES // 2**20} MiB)" if "memory" in reply["error"] else ""
        raise ScaffoldError(f"{what}{where}: {reply['error']}{bound}")
    return reply
