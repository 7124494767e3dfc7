"""The scaffold gate of a round: the round's patch becomes a candidate version (committed without moving
HEAD), and the candidate faces its parent on the validation tasks with the round's fresh seeds (the
paired bootstrap rule of `recreate.evaluation.stats.paired_gate`); HEAD moves only when it holds up."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from recreate.evaluation.stats import paired_gate
from recreate.optimizer.synthesis import scaffold_size
from recreate.scaffold import VersionInfo, ops_to_json

if TYPE_CHECKING:
    from recreate.optimizer.loop import EvolveLoop
    from recreate.optimizer.state import EvolveState


def scaffold_gate(loop: EvolveLoop, state: EvolveState) -> dict[str, Any]:
    """Round r's patch applied to the parent, then gated: both on this round's validation seeds."""
    rnd, parent = state["round"], state["current"]
    patch = next(p for p in reversed(state["patches"]) if p["round"] == rnd)
    entry: dict[str, Any] = {
        "round": rnd + 1,
        "parent": parent,
        "accepted": False,
        "ops": patch["ops"],
        "errors": [
            f"{r['task_id']}: {e}"
            for r in state.get("results", [])
            if r["round"] == rnd and r["proposal"]["status"] == "failed"
            for e in r["proposal"]["errors"]
        ],
    }
    if loop.finetune is not None:
        entry["model"] = loop.finetune.model_name  # the policy version this round ran on
    if patch["status"] != "ok":
        entry["reason"] = "no usable proposal this round: " + (
            "; ".join(patch["errors"]) or "nothing to change"
        )
        return {"round": rnd + 1, "history": [entry]}
    try:
        info = candidate_version(loop, parent, patch, rnd)
    except Exception as exc:  # an invalid candidate is rejected, never a crash
        entry["reason"] = f"candidate failed validation: {type(exc).__name__}: {exc}"
        return {"round": rnd + 1, "history": [entry]}
    if info.ref == parent:
        entry["reason"] = "the patch did not change the scaffold"
        return {"round": rnd + 1, "history": [entry]}
    if all(op["op"] == "vote" for op in patch["ops"]):  # the agent never sees counters: nothing to test
        loop.scaffolds.set_head(info.ref, event="accepted")
        entry |= {"ref": info.ref, "accepted": True, "reason": "counter votes only (no behaviour change)"}
        return {"round": rnd + 1, "current": info.ref, "history": [entry]}
    parent_scaffold, candidate = loop.scaffolds.load(parent), loop.scaffolds.load(info.ref)
    parent_val, parent_errors = loop.evaluate(parent_scaffold, rnd)  # this gate's seeds (cached if seen)
    scores, errors = loop.evaluate(candidate, rnd)
    verdict = paired_gate(
        parent_val,
        scores,
        min_improvement=loop.config.min_improvement,
        parent_size=scaffold_size(parent_scaffold),
        candidate_size=scaffold_size(candidate),
        seed=loop.seed_of("gate", rnd),
        asked=len(loop.valset) * loop.config.val_seeds,
        alpha=loop.config.gate_alpha,
    )
    loop.scaffolds.attach_scores(info.ref, scores, label="val", gate=verdict.to_dict(), run=loop.run_dir.name)
    entry["errors"] += [f"validation run of {parent} {e}" for e in parent_errors]
    entry["errors"] += [f"validation run of {info.ref} {e}" for e in errors]
    entry |= {
        "ref": info.ref,
        "val": scores,
        "parent_val": parent_val,
        "accepted": verdict.accepted,
        "reason": verdict.reason,
        "gate": verdict.to_dict(),
    }
    if not verdict.accepted:
        return {"round": rnd + 1, "history": [entry]}
    loop.scaffolds.set_head(info.ref, event="accepted")
    return {"round": rnd + 1, "current": info.ref, "current_val": scores, "history": [entry]}


def candidate_version(loop: EvolveLoop, parent: str, patch: dict[str, Any], rnd: int) -> VersionInfo:
    """The parent with the patch applied, committed without moving HEAD. A gate re-run after a kill
    finds the version it committed before (same parent, same ops) instead of storing a twin."""
    ops = ops_to_json(patch["ops"])
    for info in loop.scaffolds.log(parent.split("@", 1)[0]):
        if info.parent == parent and info.ops == ops:
            return info
    return loop.scaffolds.apply(
        parent,
        ops,
        rationale=patch["diagnosis"],
        message=f"round {rnd + 1}",
        sandbox=loop.sandbox,
        set_head=False,  # HEAD moves only when the gate accepts
    )
