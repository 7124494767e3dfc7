"""Model specs and the endpoints they name: parsing a spec, where it points (this machine or not, which
host), and whether the endpoint answers before a run depends on it."""

from __future__ import annotations

import ipaddress
import os
from typing import Any
from urllib.parse import urlparse

import httpx

from recreate.errors import Arg, ArgumentError
from recreate.redact import redact


class ModelSpecError(ArgumentError):
    """A model spec or endpoint setting that cannot work; the message names the fix (the arguments a
    Python caller passes; the command line shows its options instead)."""


MODEL_ARG = Arg("model", "'PROVIDER:MODEL'", "PROVIDER:MODEL")  # e.g. openai:gpt-4.1-mini


def parse_spec(spec: str, base_url: str | None = None) -> tuple[str | None, str, str | None]:
    """-> (provider or None, model name, base_url or None)."""
    if not spec or not spec.strip():
        raise ModelSpecError("empty model spec; pass {model} or set RECREATE_MODEL", model=MODEL_ARG)
    spec = spec.strip()
    if "@http://" in spec or "@https://" in spec:
        spec, base_url = spec.split("@", 1)
    provider, _, name = spec.rpartition(":") if ":" in spec else ("", "", spec)
    return provider or None, name, base_url


def is_local_endpoint(url: str | None) -> bool:
    """True for an endpoint on this machine (localhost, a loopback address): its calls are free."""
    if not url:
        return False
    host = urlparse(url if "//" in url else f"//{url}").hostname or ""
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_endpoint(
    spec: str, base_url: str | None = None, timeout: float = 5.0, *, option: str = "--model"
) -> None:
    """Ask an OpenAI-compatible endpoint (OpenAI's own for `openai:` specs) for its models once: an
    unreachable server or a refused key is one clear line here, naming `option`, not minutes of retried
    calls from every rollout."""
    provider, _, url = parse_spec(spec, base_url)
    if provider not in (None, "openai"):
        return
    key = os.environ.get("OPENAI_API_KEY")
    if not url:
        if provider != "openai":
            return
        if not key:
            raise ModelSpecError(
                f"{option} {spec}: OPENAI_API_KEY is not set; export it, or pass another {option}"
            )
        url = "https://api.openai.com/v1"
    from recreate.local.keys import auth_headers

    try:
        reply = httpx.get(f"{url.rstrip('/')}/models", headers=auth_headers(url), timeout=timeout)
    except httpx.TransportError as exc:
        raise ModelSpecError(
            f"{option} {redact(spec)}: cannot reach the model endpoint {redact(url)} "
            f"({type(exc).__name__}: {redact(str(exc))}); start the server, or fix {option} / OPENAI_BASE_URL"
        ) from exc
    if reply.status_code in (401, 403):
        raise ModelSpecError(
            f"{option} {redact(spec)}: the endpoint {redact(url)} refused the key "
            f"(HTTP {reply.status_code}); {refused_key_fix(url)}"
        )


def refused_key_fix(url: str) -> str:
    """What to do when `url` refused our key."""
    from recreate.local.keys import is_loopback, server_key

    fix = "check OPENAI_API_KEY"
    if is_loopback(url) and server_key(url) is None:  # e.g. a `recreate model serve` of another home
        fix += (
            "; a `recreate model serve` server keeps its key under the home that started it: pass that "
            "--home, or export OPENAI_API_KEY=$(recreate model key --home HOME)"
        )
    return fix


def endpoint_host(model: Any) -> str | None:
    """The host of the model's endpoint, for trajectories (never the full URL)."""
    url = getattr(model, "openai_api_base", None) or getattr(model, "base_url", None)
    return urlparse(str(url)).hostname if url else None
