"""Proposals: what the meta-agents hand back, and the submit tools that check them.

A submit tool parses the ops and applies them to the current scaffold as a dry run. If that fails, the
error goes back to the model once; a second failure drops the proposal with its reason recorded, so a
proposal is never silently lost and a bad one never crashes the run.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, Literal

from langchain_core.tools import StructuredTool
from pydantic import BaseModel, Field

from recreate.scaffold import Scaffold, parse_ops
from recreate.scaffold import apply as apply_ops
from recreate.structured_tool import make_tool

Cause = Literal["knowledge_gap", "strategy_gap", "missing_tool", "none", "other"]
MAX_ATTEMPTS = 2  # the first failure is fed back; the second drops the proposal


class Proposal(BaseModel):
    source: str  # task id for instance proposals, "synthesis" / "bootstrap" for patches
    trajectory_ids: list[str] = Field(default_factory=list)
    cause: Cause = "other"
    diagnosis: str = ""
    ops: list[dict[str, Any]] = Field(default_factory=list)  # JSON of typed edit ops (already validated)
    evidence: list[str] = Field(default_factory=list)
    status: Literal["ok", "empty", "dropped"] = "empty"
    errors: list[str] = Field(default_factory=list)  # every rejected attempt, for the record


class ProposalBox:
    """Holds the outcome of one meta-agent run; the submit tool writes into it."""

    def __init__(
        self,
        scaffold: Scaffold,
        source: str,
        trajectory_ids: list[str],
        sandbox: Any = None,
        check: Callable[[Scaffold], None] | None = None,
    ):
        self.scaffold = scaffold
        self.sandbox = sandbox
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
        self.attempts += 1
        try:
            if isinstance(ops, str):
                ops = json.loads(ops)
            parsed = parse_ops(ops)
            patched = apply_ops(self.scaffold, parsed, sandbox=self.sandbox)
            if self.check is not None:
                self.check(patched)
        except Exception as exc:  # any rejection is fed back once, then recorded
            msg = f"{type(exc).__name__}: {exc}"
            self.proposal.errors.append(msg)
            if self.attempts >= MAX_ATTEMPTS:
                self.proposal.status = "dropped"
                return f"Rejected again ({msg}). The proposal is dropped; stop now."
            return f"Rejected: {msg}\nFix the ops and call the tool again (one more attempt)."
        self.proposal.ops = [op.model_dump(mode="json") for op in parsed]
        self.proposal.diagnosis = diagnosis
        self.proposal.cause = cause if cause in Cause.__args__ else "other"
        self.proposal.evidence = list(evidence or self.proposal.trajectory_ids)
        self.proposal.status = "ok" if parsed else "empty"
        return f"Recorded {len(parsed)} op(s). Reply with a one-line summary and stop."

    def finish(self) -> Proposal:
        """The outcome after the agent stopped; a model that never submitted is recorded as such."""
        if self.proposal.status == "empty" and self.attempts == 0:
            self.proposal.errors.append("the meta-agent stopped without calling the submit tool")
        return self.proposal


class _ProposeArgs(BaseModel):
    ops: list[dict[str, Any]] = Field(description="Typed edit ops (JSON objects with an 'op' field).")
    diagnosis: str = Field(description="Why the run succeeded or failed, and why these edits help.")
    cause: str = Field("other", description="knowledge_gap | strategy_gap | missing_tool | none | other")
    evidence: list[str] = Field(default_factory=list, description="Trajectory ids supporting the edits.")


def propose_tool(box: ProposalBox, name: str = "propose") -> StructuredTool:
    return make_tool(
        box.submit,
        name=name,
        description="Record your proposal: typed scaffold edit ops with a diagnosis. Checked by a dry run.",
        args=_ProposeArgs,
    )
