"""The optimizer's signal on real evolve runs (words domain, scripted endpoint, bubblewrap, Chroma):
held-out tasks stay held out, errors are not scores, the gate decides before HEAD moves."""

from __future__ import annotations

import re
import threading
from typing import Any

from recreate.experience.store import ExperienceStore
from recreate.optimizer import EvolveConfig, ReCreateOptimizer
from recreate.optimizer.report import write_report
from recreate.scaffold import ScaffoldStore
from recreate.testing import Reply, text, tool_call
from tests.optimizer.script import BAD_OPS, GATE_ALPHA, GOOD_OPS, responder
from tests.optimizer.test_evolve import SEED, domain, optimizer  # noqa: F401 (fixture)

# what a validation task (bravo, delta, echo) would show: its id, prompt, answer, feedback
VAL_LEAKS = re.compile(r"bravo|delta|task echo|word: echo|'echo'", re.IGNORECASE)
PROBES = [
    ("search_experience", {"query": "expected answer feedback", "scope": "summaries", "k": 50}),
    ("search_experience", {"query": "submit answer word", "scope": "steps", "k": 50}),
    ("list_experiences", {"filters": {}}),
    ("search_experience", {"query": "word", "scope": "summaries", "filters": {"task_id": "bravo"}}),
    ("list_experiences", {"filters": {"outcome": "failed"}}),
]


def _content(message: dict[str, Any]) -> str:
    return message.get("content") or "" if isinstance(message.get("content"), str | None) else ""


def _is_reflection(body: dict[str, Any]) -> bool:
    return "ReCreate-Agent" in _content(body["messages"][0])


def probing_responder(body: dict[str, Any]) -> Reply:
    """The meta-agent tries every way to look at other runs before proposing."""
    if not _is_reflection(body):
        return responder(body)
    turn = sum(m["role"] == "assistant" for m in body["messages"])
    if turn < len(PROBES):
        return tool_call(*PROBES[turn])
    if turn == len(PROBES):
        passed = "passed=True" in _content(body["messages"][1])
        return tool_call("propose", {"ops": BAD_OPS if passed else GOOD_OPS, "diagnosis": "case"})
    return text("done")


def test_the_meta_agent_never_sees_a_validation_run(recreate_home, openai_server, domain):  # noqa: F811
    openai_server.responder = probing_responder
    opt = optimizer(recreate_home, openai_server.url)
    result = opt.optimize(
        seed=SEED, domain=domain, trainset=domain.tasks("train"), valset=domain.tasks("val")
    )
    assert [h["accepted"] for h in result.history] == [True, True, False]
    replies = [
        _content(m)
        for body in openai_server.requests
        if _is_reflection(body)
        for m in body["messages"]
        if m["role"] == "tool"
    ]
    assert len(replies) >= 6 * len(PROBES)  # every reflection of both rounds probed
    assert any("task alpha" in r or "task charlie" in r or "task golf" in r for r in replies)  # train: seen
    leaks = [r for r in replies if VAL_LEAKS.search(r)]
    assert not leaks, leaks[0]
    val_runs = [e for e in opt.experience.list() if e.task_id in {"bravo", "delta", "echo"}]
    assert len(val_runs) == 12  # still stored, for the report and for TAPO


def test_endpoint_errors_are_retried_not_scored_and_a_failed_reflection_is_recorded(
    recreate_home,
    openai_server,
    domain,  # noqa: F811
):
    lock, state = threading.Lock(), {"delta_failed": False, "broken_task": None}

    def faulty(body: dict[str, Any]) -> Reply:
        user = _content(body["messages"][1]) if len(body["messages"]) > 1 else ""
        with lock:
            if "Reply with the word: Delta" in user and not state["delta_failed"]:
                state["delta_failed"] = True  # the first validation run of delta: the endpoint says 400
                return Reply(status=400)
            if _is_reflection(body):
                task = re.search(r"Task: (\w+)", user).group(1)
                state["broken_task"] = state["broken_task"] or task
                if task == state["broken_task"]:  # every reflection of this task fails (not retryable)
                    return Reply(status=400)
        return responder(body)

    openai_server.responder = faulty
    result = optimizer(recreate_home, openai_server.url).optimize(
        seed=SEED, domain=domain, trainset=domain.tasks("train"), valset=domain.tasks("val")
    )
    assert result.finished and [h["accepted"] for h in result.history] == [True, True, False]
    v0, v1 = result.history[0], result.history[1]
    assert set(v0["val"]) == {"bravo", "echo"}  # the failed run is no score (not a 0)...
    assert any("delta" in e and "400" in e for e in v0["errors"])  # ...but an error on record
    assert set(v1["parent_val"]) == {"bravo", "delta", "echo"}  # not cached: run again at the next gate
    broken = [r for r in result.results if r["task_id"] == state["broken_task"]]
    assert broken and all(r["proposal_status"] == "failed" for r in broken)
    assert any("reflection failed" in e and "400" in e for e in v1["errors"] + result.history[2]["errors"])
    html = write_report(result, result.run_dir / "report").read_text()
    assert "reflection failed" in html and "delta" in html


def test_head_moves_only_when_the_gate_accepts(recreate_home, openai_server, domain):  # noqa: F811
    openai_server.responder = responder
    sets = {"seed": SEED, "domain": domain, "trainset": domain.tasks("train"), "valset": domain.tasks("val")}

    def one_at_a_time(**config: Any) -> ReCreateOptimizer:
        return ReCreateOptimizer(
            optimizer_model=f"scripted@{openai_server.url}",
            agent_model=f"scripted@{openai_server.url}",
            sandbox="bwrap",
            max_concurrency=1,
            home=recreate_home,
            experience=ExperienceStore(recreate_home / "experience", embedding="hash"),
            config=EvolveConfig(gate_alpha=GATE_ALPHA, rounds=2, batch_size=3, **config),
        )

    # 3 validation runs of v0, 3 training runs, then the budget stops the gate inside the candidate's runs
    stopped = one_at_a_time(max_rollouts=7).optimize(**sets)
    store = ScaffoldStore(recreate_home / "scaffolds")
    assert stopped.stopped and len(store.log("minimal")) == 2  # the candidate is stored...
    assert store.head("minimal").ref == stopped.history[0]["ref"]  # ...but HEAD stays on the accepted v0
    resumed = one_at_a_time().optimize(run_id=stopped.run_id, **sets)
    assert [h["accepted"] for h in resumed.history] == [True, True, False]
    assert store.head("minimal").ref == resumed.final == resumed.history[1]["ref"] == "minimal@v2"
    assert len(store.log("minimal")) == 3  # the re-run gate found its candidate instead of storing a twin


def test_val_seeds_pair_every_task_and_seed(recreate_home, openai_server, domain):  # noqa: F811
    openai_server.responder = responder
    result = optimizer(recreate_home, openai_server.url, rounds=1, val_seeds=2).optimize(
        seed=SEED, domain=domain, trainset=domain.tasks("train"), valset=domain.tasks("val")
    )
    assert set(result.history[0]["val"]) == {f"{t}#{s}" for t in ("bravo", "delta", "echo") for s in (0, 1)}
    gate = result.history[1]["gate"]
    assert result.history[1]["accepted"] and (gate["n"], gate["tasks"]) == (6, 3)
    assert (gate["low"], gate["improvement"]) == (1.0, 1.0)
    assert "CI [+1.000, +1.000], n=6 (3 tasks)" in result.history[1]["reason"]
    html = write_report(result, result.run_dir / "report").read_text()
    assert "75% CI" in html and "[+1.000, +1.000]" in html and "6 (3 tasks)" in html
