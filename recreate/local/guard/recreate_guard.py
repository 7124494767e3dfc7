"""The guard vLLM runs in front of every route (`--middleware recreate_guard.Guard`), in vLLM's own
environment: this file alone is put on its PYTHONPATH, so it imports nothing of recreate's.

vLLM's own key check (VLLM_API_KEY) covers `/v1/*` only: `/invocations` answers completions and, with
runtime LoRA on, `/adapters` loads an adapter from any path, both without a key. And a web page whose
name was rebound to 127.0.0.1 is, to the browser, the server's own origin: it can read the answers. So:
- a server bound to a loopback address answers only requests addressed to a loopback name (Host
  127.0.0.1, localhost or [::1], any port: an SSH tunnel forwards another): a rebound name gets 421;
- when RECREATE_SERVER_KEY is set (recreate starts every server with one), every route but GET /health
  and CORS preflights needs `Authorization: Bearer KEY`: else 401.
The key travels under a name vLLM does not read: every VLLM_* variable is part of vLLM's compile-cache
key, and a new key each start would recompile the model each start.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

KEY_ENV = "RECREATE_SERVER_KEY"
LOOPBACK = ("127.0.0.1", "localhost", "::1")
OPEN = (("GET", "/health"),)

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


class Guard:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        key = os.environ.pop(KEY_ENV, "")  # not for the processes this one starts
        self.digest = hashlib.sha256(key.encode()).digest() if key else None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        refusal = self.refusal(scope) if scope["type"] in ("http", "websocket") else None
        if refusal is None:
            await self.app(scope, receive, send)
        elif scope["type"] == "websocket":
            await send({"type": "websocket.close", "code": 1008})
        else:
            status, message = refusal
            body = json.dumps({"error": {"message": message, "code": status}}).encode()
            headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
            await send({"type": "http.response.start", "status": status, "headers": headers})
            await send({"type": "http.response.body", "body": body})

    def refusal(self, scope: Scope) -> tuple[int, str] | None:
        """(status, why) for a request this server must not answer, else None."""
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers") or []}
        bound = (scope.get("server") or ("",))[0]
        if bound in LOOPBACK and _hostname(headers.get("host", "")) not in LOOPBACK:
            return 421, "this server answers only to its loopback address"
        method, path = scope.get("method", ""), scope.get("path", "")
        if self.digest is None or method == "OPTIONS" or (method, path) in OPEN:
            return None
        scheme, _, token = headers.get("authorization", "").partition(" ")
        given = hashlib.sha256(token.strip().encode()).digest()
        if scheme.lower() != "bearer" or not hmac.compare_digest(given, self.digest):
            return 401, "this server needs its key: recreate's clients find it; others: `recreate model key`"
        return None


def _hostname(host: str) -> str:
    """The name in a Host header, without its port (any port: an SSH tunnel forwards another one)."""
    host = host.strip().lower()
    if host.startswith("["):
        return host[1 : host.find("]")] if "]" in host else ""
    return host.rsplit(":", 1)[0] if ":" in host else host
