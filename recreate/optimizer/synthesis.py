"""Batch level: merge the instance proposals of a batch into one domain-level patch.

The synthesis agent sees every proposal in full (ops incl. tool code and memory items) beside the score
of the run it came from, keeps what recurs and generalises, and must keep the scaffold inside a size
budget. A clean run's "nothing to change" is evidence too (that the current scaffold works there), so it
is shown among the proposals. With the `no_synthesis` ablation the proposals are applied one after
another instead, each all-or-nothing.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from langchain.agents import create_agent
from langchain_core.language_models import BaseChatModel

from recreate.optimizer.prompts import BOOTSTRAP, SYNTHESIZE, with_ops_reference
from recreate.optimizer.proposals import Proposal, ProposalBox, propose_tool
from recreate.optimizer.reflect import view_scaffold_tool
from recreate.optimizer.structured import synthesize_structured
from recreate.scaffold import Scaffold, parse_ops
from recreate.scaffold import apply as apply_ops


def scaffold_size(s: Scaffold) -> int:
    """Characters the agent reads or runs: prompt, template, rules, memory, tools, worked examples."""
    return (
        len(s.system_prompt)
        + len(s.instance_template)
        + sum(len(r.text) for r in s.rules)
        + sum(len(m.title) + len(m.content) for m in s.memory)
        + sum(len(t.description) + len(t.code) for t in s.tools)
        + sum(
            len(e.task) + sum(len(x.command or "") + len(x.output) + len(x.submit or "") for x in e.steps)
            for e in s.examples
        )
    )


@dataclass(frozen=True)
class SizeBudget:
    max_chars: int = 24_000
    min_fraction: float = 0.5  # a patch may not shrink the scaffold below this fraction of its parent

    def describe(self, parent: Scaffold) -> str:
        return f"between {int(scaffold_size(parent) * self.min_fraction)} and {self.max_chars} characters"

    def checker(self, parent: Scaffold):
        floor = int(scaffold_size(parent) * self.min_fraction)

        def check(candidate: Scaffold) -> None:
            size = scaffold_size(candidate)
            if size > self.max_chars:
                raise ValueError(
                    f"scaffold would be {size} chars, over the budget of {self.max_chars}: merge or drop"
                )
            if size < floor:
                raise ValueError(f"scaffold would shrink to {size} chars, under the floor of {floor}")

        return check


def run_patch_agent(
    *,
    source: str,
    system_prompt: str,
    request: str,
    scaffold: Scaffold,
    model: BaseChatModel,
    trajectory_ids: list[str],
    sandbox: Any = None,
    check: Callable[[Scaffold], None] | None = None,
    max_steps: int = 8,
) -> Proposal:
    """One agent that views the scaffold and ends by calling `submit_patch` (checked by a dry run)."""
    box = ProposalBox(scaffold, source, trajectory_ids, sandbox=sandbox, check=check)
    tools = [view_scaffold_tool(scaffold), propose_tool(box, name="submit_patch")]
    agent = create_agent(model, tools, system_prompt=system_prompt, name=f"recreate_{source}")
    return box.run(agent, request, max_steps=max_steps, who=f"{source} agent")


def synthesize(
    proposals: list[Proposal],
    *,
    scaffold: Scaffold,
    domain_text: str,
    model: BaseChatModel,
    sandbox: Any = None,
    size_budget: SizeBudget = SizeBudget(),
    outcomes: dict[str, dict[str, Any]] | None = None,
    protocol: str = "agentic",
) -> Proposal:
    """`outcomes`: per proposal source (task id), the score of the run it came from. `protocol`:
    "structured" chooses among the proposed ops in one constrained call (see `structured`)."""
    usable = [p for p in proposals if p.status == "ok"]
    if not usable:
        return Proposal(source="synthesis", status="empty", protocol=protocol)
    if protocol == "structured":
        return synthesize_structured(
            usable,
            scaffold=scaffold,
            domain_text=domain_text,
            model=model,
            sandbox=sandbox,
            check=size_budget.checker(scaffold),
            outcomes=outcomes or {},
        )
    shown = usable + [p for p in proposals if p.status == "empty" and not p.errors]  # + "nothing to change"
    traj_ids = sorted({t for p in shown for t in p.trajectory_ids})
    prompt = with_ops_reference(
        SYNTHESIZE.format(
            domain=domain_text,
            size_budget=size_budget.describe(scaffold),
            current_size=scaffold_size(scaffold),
        )
    )
    listing = json.dumps(
        [
            {"run": (outcomes or {}).get(p.source, {})}
            | p.model_dump(mode="json", exclude={"errors", "status"})
            for p in shown
        ],
        indent=1,
    )
    return run_patch_agent(
        source="synthesis",
        system_prompt=prompt,
        request=f"{len(shown)} proposals:\n{listing}",
        scaffold=scaffold,
        model=model,
        trajectory_ids=traj_ids,
        sandbox=sandbox,
        check=size_budget.checker(scaffold),
    )


def bootstrap(scaffold: Scaffold, *, domain_text: str, model: BaseChatModel, sandbox: Any = None) -> Proposal:
    """Turn a minimal seed plus the domain description into v0."""
    return run_patch_agent(
        source="bootstrap",
        system_prompt=with_ops_reference(BOOTSTRAP.format(domain=domain_text)),
        request="Write v0 from this seed: view it, then call submit_patch.",
        scaffold=scaffold,
        model=model,
        trajectory_ids=[],
        sandbox=sandbox,
    )


def apply_directly(proposals: list[Proposal], *, scaffold: Scaffold, sandbox: Any = None) -> Proposal:
    """`no_synthesis`: stack the proposals; one that no longer applies is skipped and recorded."""
    merged = Proposal(source="direct", status="empty")
    current = scaffold
    for p in proposals:
        if p.status != "ok":
            continue
        try:
            current = apply_ops(current, parse_ops(p.ops), sandbox=sandbox)
        except Exception as exc:
            merged.errors.append(f"{p.source}: {type(exc).__name__}: {exc}")
            continue
        merged.ops += p.ops
        merged.trajectory_ids += p.trajectory_ids
        merged.evidence += p.evidence
        merged.diagnosis += f"[{p.source}] {p.diagnosis}\n"
    merged.status = "ok" if merged.ops else "empty"
    return merged
