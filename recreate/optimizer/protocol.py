"""How the ReCreate-Agent talks to its model: with tools (agentic) or by one constrained call
(structured, `recreate.optimizer.structured`)."""

from __future__ import annotations

from typing import Any

PROTOCOLS = ("auto", "agentic", "structured")


def resolve_protocol(asked: str, model: Any) -> str:
    """The reflection protocol: as asked, or for "auto" structured when the model is marked as one
    that cannot call tools (`metadata["tool_calls"] is False`, as local servers without tool-call
    templates mark theirs), else agentic."""
    if asked not in PROTOCOLS:
        raise ValueError(f"unknown optimizer protocol {asked!r}; choose one of {', '.join(PROTOCOLS)}")
    if asked != "auto":
        return asked
    metadata = getattr(model, "metadata", None) or {}
    return "structured" if metadata.get("tool_calls") is False else "agentic"
