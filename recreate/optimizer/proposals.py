"""Proposals: what the meta-agents hand back, and the submit tools that check them.

A submit tool parses the ops and applies them to the current scaffold as a dry run. If that fails, the
error goes back to the model once; a second failure drops the proposal with its reason recorded, so a
proposal is never silently lost and a bad one never crashes the run.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from typing import Any, Literal

from langchain_core.messages import HumanMessage
from langchain_core.tools import StructuredTool
from langgraph.errors import GraphRecursionError
from pydantic import BaseModel, Field

from recreate.models import is_context_overflow
from recreate.redact import redact
from recreate.sandbox import Sandbox, resolve_sandbox
from recreate.scaffold import Scaffold, ops_json_schema, parse_ops
from recreate.scaffold import apply as apply_ops
from recreate.text import clip_middle

Cause = Literal["knowledge_gap", "strategy_gap", "missing_tool", "none", "other"]
MAX_ATTEMPTS = 2  # the first failure is fed back; the second drops the proposal


class Proposal(BaseModel):
    source: str  # task id for instance proposals, "synthesis" / "bootstrap" for patches
    trajectory_ids: list[str] = Field(default_factory=list)
    cause: Cause = "other"
    diagnosis: str = ""
    ops: list[dict[str, Any]] = Field(default_factory=list)  # JSON of typed edit ops (already validated)
    evidence: list[str] = Field(default_factory=list)
    # failed: the meta-agent's run itself failed (an endpoint error), or the run it was to inspect did
    status: Literal["ok", "empty", "dropped", "failed"] = "empty"
    errors: list[str] = Field(default_factory=list)  # every rejected attempt or failure, for the record
    protocol: str = ""  # "agentic" (tool calls) or "structured" (one constrained call)
    transcript: list[dict[str, Any]] = Field(default_factory=list)  # the meta-agent's messages (redacted)
    usage: dict[str, int] = Field(default_factory=dict)  # its tokens: input_tokens, output_tokens


class ProposalBox:
    """Holds the outcome of one meta-agent run; the submit tool writes into it."""

    def __init__(
        self,
        scaffold: Scaffold,
        source: str,
        trajectory_ids: list[str],
        sandbox: Sandbox | str | None = None,
        check: Callable[[Scaffold], None] | None = None,
    ):
        self.scaffold = scaffold
        self.sandbox = None if sandbox is None else resolve_sandbox(sandbox)  # tools' smoke tests run here
        self.check = check  # extra acceptance test on the patched scaffold (e.g. the size budget)
        self.proposal = Proposal(source=source, trajectory_ids=trajectory_ids)
        self.attempts = 0

    @property
    def done(self) -> bool:
        return self.proposal.status == "ok" or self.attempts >= MAX_ATTEMPTS

    def submit(
        self, ops: Any, diagnosis: str, cause: str = "other", evidence: list[str] | None = None
    ) -> str:
        if self.done:
            return "A proposal was already recorded; reply with a short final message and stop."
        try:
            if isinstance(ops, str):
                ops = json.loads(ops)
            parsed = parse_ops(ops)
            patched = apply_ops(self.scaffold, parsed, sandbox=self.sandbox)
            if self.check is not None:
                self.check(patched)
        except Exception as exc:  # any rejection is fed back once, then recorded
            return self.refuse(f"{type(exc).__name__}: {exc}")
        self.attempts += 1
        self.proposal.ops = [op.model_dump(mode="json") for op in parsed]
        self.proposal.diagnosis = diagnosis
        self.proposal.cause = cause if cause in Cause.__args__ else "other"
        self.proposal.evidence = list(evidence or self.proposal.trajectory_ids)
        self.proposal.status = "ok" if parsed else "empty"
        return f"Recorded {len(parsed)} op(s). Reply with a one-line summary and stop."

    def refuse(self, problem: str, again: str = "Fix the ops and call the tool again") -> str:
        """Record a rejected attempt: the first goes back to the model, the second drops the proposal."""
        self.attempts += 1
        self.proposal.errors.append(problem)
        if self.attempts >= MAX_ATTEMPTS:
            self.proposal.status = "dropped"
            return f"Rejected again ({problem}). The proposal is dropped; stop now."
        return f"Rejected: {problem}\n{again} (one more attempt)."

    def run(self, agent: Any, request: str, *, max_steps: int, who: str) -> Proposal:
        """Invoke `agent` on `request` until it stops; hitting its step limit, or a conversation the
        model's context cannot hold (which would overflow again on every resume), ends it with the
        reason recorded and what it submitted kept."""
        messages: list[Any] = [HumanMessage(request)]
        self.proposal.protocol = "agentic"
        try:
            for update in agent.stream(
                {"messages": messages}, config={"recursion_limit": 2 * max_steps + 1}, stream_mode="values"
            ):
                messages = update.get("messages", messages)  # kept as it grows: a step limit loses nothing
        except GraphRecursionError:
            self.proposal.errors.append(f"the {who} hit its step limit ({max_steps})")
        except Exception as exc:
            if not is_context_overflow(exc):
                raise
            error = redact(f"{type(exc).__name__}: {exc}")
            self.proposal.errors.append(f"the {who}'s conversation outgrew the model's context ({error})")
        finally:
            self.proposal.transcript = transcript_of(messages)
            self.proposal.usage = usage_of(messages)
        return self.finish()

    def finish(self) -> Proposal:
        """The outcome after the agent stopped; a model that never submitted is recorded as such."""
        if self.proposal.status == "empty" and self.attempts == 0:
            self.proposal.errors.append("the meta-agent stopped without calling the submit tool")
        return self.proposal


TRANSCRIPT_CHARS = 6000  # per message: the record shows what happened without storing whole tool dumps


def transcript_of(messages: list[Any]) -> list[dict[str, Any]]:
    """A meta-agent's conversation as plain, redacted data: role, text, tool calls, tokens."""
    out = []
    for message in messages:
        content = message.content if isinstance(message.content, str) else json.dumps(message.content)
        entry: dict[str, Any] = {
            "role": message.type,
            "content": clip_middle(redact(content), TRANSCRIPT_CHARS),
        }
        calls = getattr(message, "tool_calls", None)
        if calls:
            entry["tool_calls"] = [
                {"name": c["name"], "args": clip_middle(redact(json.dumps(c["args"])), TRANSCRIPT_CHARS)}
                for c in calls
            ]
        if getattr(message, "name", None):
            entry["name"] = message.name
        usage = getattr(message, "usage_metadata", None)
        if usage:
            entry["tokens"] = {k: int(usage.get(k, 0)) for k in ("input_tokens", "output_tokens")}
        out.append(entry)
    return out


def usage_of(messages: list[Any]) -> dict[str, int]:
    """The tokens of a conversation's model replies (the other messages carry none)."""
    return {
        key: sum(int((getattr(m, "usage_metadata", None) or {}).get(key, 0)) for m in messages)
        for key in ("input_tokens", "output_tokens")
    }


def _inline_refs(node: Any, defs: dict[str, Any]) -> Any:
    if isinstance(node, dict):
        ref = node.get("$ref", "")
        if ref.startswith("#/$defs/"):
            return _inline_refs(defs[ref.removeprefix("#/$defs/")], defs)
        return {k: _inline_refs(v, defs) for k, v in node.items() if k != "discriminator"}
    if isinstance(node, list):
        return [_inline_refs(v, defs) for v in node]
    return node


def _op_item_schema() -> dict[str, Any]:
    """The JSON schema of one edit op, self-contained (a tool's argument schema cannot carry $defs)."""
    schema = ops_json_schema()
    return _inline_refs(schema["items"], schema.get("$defs", {}))


class _ProposeArgs(BaseModel):
    ops: list[dict[str, Any]] = Field(description="Typed edit ops (JSON objects with an 'op' field).")
    diagnosis: str = Field(description="Why the run succeeded or failed, and why these edits help.")
    cause: str = Field("other", description="knowledge_gap | strategy_gap | missing_tool | none | other")
    evidence: list[str] = Field(default_factory=list, description="Trajectory ids supporting the edits.")


@functools.cache
def _propose_schema_text() -> str:
    schema = _ProposeArgs.model_json_schema()
    schema["properties"]["ops"]["items"] = _op_item_schema()
    return json.dumps(schema)


def propose_tool(box: ProposalBox, name: str = "propose") -> StructuredTool:
    """The submit tool. Its argument schema carries the edit ops' own JSON schema, so the model sees
    every op's fields; the ops are parsed by `ProposalBox.submit`, so a malformed op comes back to the
    model as a rejected attempt (with the reason) instead of failing the tool call."""
    return StructuredTool.from_function(
        func=box.submit,
        name=name,
        description="Record your proposal: typed scaffold edit ops with a diagnosis. Checked by a dry run.",
        args_schema=json.loads(_propose_schema_text()),  # a fresh copy: LangChain pops keys from it
    )
