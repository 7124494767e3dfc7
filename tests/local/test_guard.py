"""vLLM's guard (recreate/local/guard/recreate_guard.py) as an ASGI app, called directly: which requests
reach vLLM and which are refused, with or without a key, on loopback or not."""

from __future__ import annotations

import asyncio
import sys
from typing import Any

import pytest

from recreate.local.vllm import GUARD, GUARD_DIR

sys.path.insert(0, str(GUARD_DIR))
recreate_guard = pytest.importorskip("recreate_guard")

PORT = 8123


def _call(key: str | None, monkeypatch, *, method="POST", path="/v1/chat/completions", headers=(),
          bound="127.0.0.1", kind="http") -> tuple[int | None, list[dict[str, Any]]]:  # fmt: skip
    """(status sent, what reached the app) for one request."""
    monkeypatch.delenv(recreate_guard.KEY_ENV, raising=False)
    if key:
        monkeypatch.setenv(recreate_guard.KEY_ENV, key)
    reached: list[dict[str, Any]] = []
    sent: list[dict[str, Any]] = []

    async def app(scope, receive, send):
        reached.append(scope)

    async def send(message):
        sent.append(message)

    guard = recreate_guard.Guard(app)
    scope = {"type": kind, "method": method, "path": path, "server": (bound, PORT),
             "headers": [(k.lower().encode(), v.encode()) for k, v in headers]}  # fmt: skip
    asyncio.run(guard(scope, None, send))
    status = next((m["status"] for m in sent if m["type"] == "http.response.start"), None)
    if any(m["type"] == "websocket.close" for m in sent):
        status = 1008
    return status, reached


OWN = ("Host", f"127.0.0.1:{PORT}")


def test_the_guard_is_what_the_command_names():
    assert f"{recreate_guard.__name__}.{recreate_guard.Guard.__name__}" == GUARD


@pytest.mark.parametrize(
    "path", ["/v1/chat/completions", "/invocations", "/adapters", "/v1/models", "/metrics"]
)
def test_every_route_needs_the_key(monkeypatch, path):
    assert _call("k" * 43, monkeypatch, path=path, headers=[OWN]) == (401, [])
    assert _call("k" * 43, monkeypatch, path=path, headers=[OWN, ("Authorization", "Bearer wrong")])[0] == 401
    assert (
        _call("k" * 43, monkeypatch, path=path, headers=[OWN, ("Authorization", "Basic " + "k" * 43)])[0]
        == 401
    )
    status, reached = _call(
        "k" * 43, monkeypatch, path=path, headers=[OWN, ("Authorization", "Bearer " + "k" * 43)]
    )
    assert status is None and len(reached) == 1


@pytest.mark.parametrize(
    "host",
    ["evil.example", f"evil.example:{PORT}", "", f"127.0.0.1.evil.example:{PORT}", "[::1", "localhost.:1"],
)
def test_a_name_rebound_to_loopback_is_refused_even_with_the_key(monkeypatch, host):
    headers = [("Host", host), ("Authorization", "Bearer key")] if host else [("Authorization", "Bearer key")]
    assert _call("key", monkeypatch, headers=headers) == (421, [])
    assert _call(None, monkeypatch, headers=headers) == (421, [])  # no key: the address check still holds
    assert _call("key", monkeypatch, headers=headers, kind="websocket") == (1008, [])


@pytest.mark.parametrize(
    "host", [f"127.0.0.1:{PORT}", f"localhost:{PORT}", f"[::1]:{PORT}", f"LOCALHOST:{PORT}"]
)
def test_its_own_addresses_pass(monkeypatch, host):
    assert _call("key", monkeypatch, headers=[("Host", host), ("Authorization", "Bearer key")])[0] is None


def test_health_and_preflights_need_no_key_and_a_server_without_one_is_open(monkeypatch):
    assert _call("key", monkeypatch, method="GET", path="/health", headers=[OWN])[0] is None
    assert _call("key", monkeypatch, method="OPTIONS", headers=[OWN])[0] is None
    assert _call("key", monkeypatch, method="POST", path="/health", headers=[OWN])[0] == 401
    assert _call(None, monkeypatch, headers=[OWN])[0] is None  # `tapo serve`: no key of ours


def test_a_server_on_every_interface_takes_any_host_but_not_without_the_key(monkeypatch):
    remote = [("Host", "gpu-box:8000")]
    assert _call("key", monkeypatch, headers=remote, bound="0.0.0.0")[0] == 401
    assert (
        _call("key", monkeypatch, headers=[*remote, ("Authorization", "Bearer key")], bound="0.0.0.0")[0]
        is None
    )


def test_the_key_is_taken_out_of_the_environment(monkeypatch):
    import os

    _call("key", monkeypatch, headers=[OWN])
    assert recreate_guard.KEY_ENV not in os.environ  # vLLM's later children do not inherit it
