"""Chat-model factory.

`make_chat_model(spec)` accepts a LangChain provider string ("openai:gpt-4.1-mini",
"anthropic:claude-..."), a bare model name for an OpenAI-compatible server (with `base_url` or
OPENAI_BASE_URL), or `"MODEL@http://host:port/v1"`. Retries for 429/5xx/timeouts are the provider
client's own (`max_retries`, exponential backoff). Every call is recorded in a `UsageLedger` tagged with
a role (recreate.usage: ledger, budgets, prices); specs and endpoints are recreate.endpoints'. Both are
re-exported here, where callers have always found them.
"""

from __future__ import annotations

import os
import re
from typing import Any
from urllib.parse import urlparse

from langchain_core.language_models import BaseChatModel

from recreate.endpoints import (
    MODEL_ARG,
    ModelSpecError,
    check_endpoint,
    endpoint_host,
    is_local_endpoint,
    parse_spec,
)
from recreate.redact import redact
from recreate.usage import (
    Budget,
    BudgetExceeded,
    LedgerCallback,
    UsageLedger,
    UsageRecord,
    price_call,
    price_overrides,
    require_prices,
)

# how endpoints refuse a request that does not fit the model's context: OpenAI, vLLM (its server's check
# and its engine's), llama.cpp's server, Anthropic (prompt alone; prompt plus max_tokens), Gemini, and
# LangChain's own wrappers of them
_CONTEXT_OVERFLOW = re.compile(
    r"context[ _-]?length|context[ _-]?window|maximum context|context_length_exceeded|prompt is too long"
    r"|too many (input )?tokens|exceeds? the (model's |available )?(maximum )?context|exceed_context_size"
    r"|exceeds? context limit|longer than the maximum model length"
    r"|exceeds the maximum number of tokens allowed",
    re.IGNORECASE,
)


def is_context_overflow(error: BaseException | str) -> bool:
    """True when a model call failed because the conversation does not fit the model's context."""
    return bool(_CONTEXT_OVERFLOW.search(str(error)))


ROLES = ("agent", "optimizer", "synthesis", "eval", "bootstrap")


def make_chat_model(
    spec: str,
    *,
    base_url: str | None = None,
    role: str = "agent",
    ledger: UsageLedger | None = None,
    temperature: float | None = None,
    max_retries: int = 6,
    timeout: float = 120.0,
    logprobs: bool = False,
    **kwargs: Any,
) -> BaseChatModel:
    """Build a LangChain chat model from a spec, wired to the usage ledger."""
    provider, name, url = parse_spec(spec, base_url or os.environ.get("OPENAI_BASE_URL"))
    if role not in ROLES:
        raise ModelSpecError(f"unknown role {role!r}; one of {', '.join(ROLES)}")
    endpoint = url if provider in (None, "openai") else None
    callbacks = (
        [LedgerCallback(ledger, role, name, provider=provider, base_url=endpoint)]
        if ledger is not None
        else []
    )
    if temperature is not None:
        kwargs["temperature"] = temperature
    if url and provider in (None, "openai"):
        from langchain_openai import ChatOpenAI

        if not urlparse(url).scheme.startswith("http"):
            raise ModelSpecError(f"base_url {redact(url)!r} is not an http(s) URL")
        from recreate.local.keys import endpoint_key

        key = endpoint_key(url) or "EMPTY"  # ours need their own key; others (vLLM, Ollama) accept any
        if logprobs:
            kwargs["logprobs"] = True
        return ChatOpenAI(
            model=name,
            base_url=url,
            api_key=key,
            max_retries=max_retries,
            timeout=timeout,
            callbacks=callbacks,
            **kwargs,
        )
    provider = provider or "openai"
    if provider == "openai" and not os.environ.get("OPENAI_API_KEY"):
        raise ModelSpecError(
            "no OpenAI API key: set OPENAI_API_KEY, or OPENAI_BASE_URL for a vLLM/Ollama server, "
            "or pass {model}",
            model=MODEL_ARG,
        )
    if logprobs and provider == "openai":
        kwargs["logprobs"] = True
    from langchain.chat_models import init_chat_model

    try:
        return init_chat_model(
            name,
            model_provider=provider,
            max_retries=max_retries,
            timeout=timeout,
            callbacks=callbacks,
            **kwargs,
        )
    except (ValueError, ImportError) as exc:
        raise ModelSpecError(
            f"cannot build model {spec!r}: {redact(str(exc)).splitlines()[0]}; pass {{model}} with a "
            "provider whose LangChain package is installed (openai, anthropic, ...), or "
            "NAME@http://HOST:PORT/v1 for an OpenAI-compatible server",
            model=MODEL_ARG,
        ) from exc


__all__ = [
    "MODEL_ARG",
    "ROLES",
    "Budget",
    "BudgetExceeded",
    "LedgerCallback",
    "ModelSpecError",
    "UsageLedger",
    "UsageRecord",
    "check_endpoint",
    "endpoint_host",
    "is_context_overflow",
    "is_local_endpoint",
    "make_chat_model",
    "parse_spec",
    "price_call",
    "price_overrides",
    "require_prices",
]
