"""End-to-end evolve runs: scripted LLM choices through the real OpenAI client against the local server,
real bubblewrap sandboxes, the real experience store (Chroma) and scaffold store."""

from __future__ import annotations

import contextlib
import gc
import json
import os
from pathlib import Path

import pytest

from recreate.domains import get_domain
from recreate.experience.store import ExperienceStore
from recreate.optimizer import EvolveConfig, EvolveError, ReCreateOptimizer
from recreate.optimizer.report import write_report
from recreate.scaffold import ScaffoldStore
from tests.optimizer.script import EVALUATOR, GATE_ALPHA, WORDS, responder

REPO = Path(__file__).resolve().parents[2]
SEED = REPO / "scaffolds" / "minimal"


@pytest.fixture
def domain():
    return get_domain("jsonl", data=WORDS / "tasks.jsonl", evaluator=EVALUATOR)


def optimizer(home: Path, url: str, **config) -> ReCreateOptimizer:
    model = f"scripted@{url}"
    return ReCreateOptimizer(
        optimizer_model=model,
        agent_model=model,
        sandbox="bwrap",
        max_concurrency=4,
        home=home,
        experience=ExperienceStore(home / "experience", embedding="hash"),
        config=EvolveConfig(**{"rounds": 2, "batch_size": 3, "gate_alpha": GATE_ALPHA} | config),
        budget=config.pop("budget", None),
    )


def test_evolve_accepts_a_fix_and_rejects_a_regression(recreate_home, openai_server, domain):
    openai_server.responder = responder
    opt = optimizer(recreate_home, openai_server.url)
    result = opt.optimize(
        seed=SEED, domain=domain, trainset=domain.tasks("train"), valset=domain.tasks("val")
    )

    assert result.finished
    assert [h["accepted"] for h in result.history] == [True, True, False]
    means = [sum(h["val"].values()) / len(h["val"]) for h in result.history]
    assert means == [0.0, 1.0, 0.0]
    assert "rejected" in result.history[2]["reason"]
    store = ScaffoldStore(recreate_home / "scaffolds")
    final = store.load(result.final)
    assert [r.id for r in final.rules] == ["lower"] and [t.name for t in final.tools] == ["lowercase"]
    assert store.head("minimal").ref == result.final  # the rejected candidate was rolled back
    lineage = store.resolve(result.final)
    assert lineage.parent == result.history[0]["ref"] and {op["op"] for op in lineage.ops} == {
        "add_rule",
        "add_tool",
    }
    assert {record.get("run") for record in lineage.scores} == {result.run_dir.name}  # leakage reads it
    assert {"agent", "optimizer", "synthesis"} <= set(result.usage)
    tool_replies = [
        m.get("content") or ""
        for body in openai_server.requests
        for m in body["messages"]
        if m["role"] == "tool"
    ]
    assert any("env-ok" in t and "exit=0" in t for t in tool_replies)  # the re-opened task environment works
    assert any(t.startswith("exit=0") and "abc" in t for t in tool_replies)  # test_tool ran the candidate
    catalog = opt.experience.list()
    # val runs: v0 at gate 1's seeds, v1 against it, then v1 re-scored on gate 2's fresh seeds and v2;
    # train runs of two rounds
    assert len(catalog) == 3 * 4 + 3 * 2
    report = write_report(result, result.run_dir / "report")
    html = report.read_text()
    assert "lowercase" in html and "data:image/svg+xml" in html  # one self-contained file, its chart inlined


def test_valset_must_be_held_out(recreate_home, openai_server, domain):
    opt = optimizer(recreate_home, openai_server.url)
    train = domain.tasks("train")
    with pytest.raises(EvolveError, match="also training tasks"):
        opt.optimize(seed=SEED, domain=domain, trainset=train, valset=train[:2])
    with pytest.raises(EvolveError, match="validation set is required"):
        opt.optimize(seed=SEED, domain=domain, trainset=train, valset=[])


def test_budget_stop_is_resumable_and_pays_nothing_twice(recreate_home, openai_server, domain):
    openai_server.responder = responder
    sets = {"trainset": domain.tasks("train"), "valset": domain.tasks("val")}
    first = optimizer(recreate_home, openai_server.url, max_rollouts=5)
    stopped = first.optimize(seed=SEED, domain=domain, **sets)
    assert stopped.stopped and "rollouts" in stopped.stopped and not stopped.finished
    resumed = optimizer(recreate_home, openai_server.url).optimize(
        seed=SEED, domain=domain, run_id=stopped.run_id, **sets
    )
    assert resumed.finished and [h["accepted"] for h in resumed.history] == [True, True, False]
    interrupted_calls = len(openai_server.requests)

    openai_server.requests.clear()
    fresh = recreate_home.parent / "fresh"
    full = optimizer(fresh, openai_server.url).optimize(seed=SEED, domain=domain, **sets)
    assert (
        ScaffoldStore(fresh / "scaffolds").load(full.final).content_hash()
        == ScaffoldStore(recreate_home / "scaffolds").load(resumed.final).content_hash()
    )
    assert interrupted_calls == len(openai_server.requests)  # not one LLM call paid twice
    assert len(first.experience.list()) == len(ExperienceStore(fresh / "experience", embedding="hash").list())


def test_rollout_and_wall_budgets_count_across_resumes(recreate_home, openai_server, domain):
    openai_server.responder = responder
    sets = {"seed": SEED, "domain": domain, "trainset": domain.tasks("train"), "valset": domain.tasks("val")}
    stopped = optimizer(recreate_home, openai_server.url, max_rollouts=5).optimize(**sets)
    assert "rollouts" in stopped.stopped
    spent = json.loads((stopped.run_dir / "spent.json").read_text())
    assert spent["rollouts"] >= 5 and spent["wall_s"] > 0
    calls = len(openai_server.requests)
    again = optimizer(recreate_home, openai_server.url, max_rollouts=5)
    assert "rollouts" in again.optimize(run_id=stopped.run_id, **sets).stopped
    out_of_time = optimizer(recreate_home, openai_server.url, max_wall_s=spent["wall_s"])
    assert "wall_s" in out_of_time.optimize(run_id=stopped.run_id, **sets).stopped
    assert len(openai_server.requests) == calls  # neither resume paid for anything
    assert optimizer(recreate_home, openai_server.url).optimize(run_id=stopped.run_id, **sets).finished


def test_langgraph_server_factory_builds_a_runnable_evolve_graph(recreate_home, openai_server, monkeypatch):
    from recreate.optimizer.server import evolve_graph

    monkeypatch.setenv("RECREATE_EMBEDDING", "hash")
    monkeypatch.setenv("OPENAI_BASE_URL", openai_server.url)  # the server's endpoint, evaluator and data
    monkeypatch.setenv("RECREATE_EVALUATOR", EVALUATOR)
    monkeypatch.setenv("RECREATE_DATA", str(WORDS / "tasks.jsonl"))
    monkeypatch.setenv("RECREATE_GATE_ALPHA", str(GATE_ALPHA))
    openai_server.responder = responder
    graph = evolve_graph({"configurable": {"model": "scripted", "domain": "jsonl", "rounds": 1}})
    assert graph.checkpointer is None  # the LangGraph server brings its own
    state = graph.invoke({}, {"max_concurrency": 4})
    assert state["final"].startswith("minimal@v") and [h["accepted"] for h in state["history"]] == [
        True,
        True,
    ]


def test_a_rollout_cached_but_not_stored_before_a_kill_is_stored_on_resume(
    recreate_home, openai_server, domain
):
    from recreate.evaluation import RolloutCache, Rollouts
    from recreate.optimizer.state import val_seed
    from recreate.scaffold import load_scaffold

    openai_server.responder = responder
    val = domain.tasks("val")
    model = f"scripted@{openai_server.url}"
    cached_only = Rollouts(
        load_scaffold(SEED),
        domain,
        model=model,
        sandbox="bwrap",
        store=None,
        cache=RolloutCache(recreate_home / "rollouts"),
    )
    orphan = cached_only.run(val[0], val_seed(0, 0, val[0].id, 0))  # the kill window: cache.put, no store.add
    opt = optimizer(recreate_home, openai_server.url, rounds=1)
    result = opt.optimize(seed=SEED, domain=domain, trainset=domain.tasks("train"), valset=val)
    assert result.finished
    assert opt.experience.get(orphan.trajectory_id).task_id == val[0].id


def test_chat_model_instances_work_and_are_billed_per_role(recreate_home, openai_server, domain):
    from langchain_openai import ChatOpenAI

    openai_server.responder = responder
    chat = ChatOpenAI(model="scripted", base_url=openai_server.url, api_key="unused", max_retries=2)
    opt = ReCreateOptimizer(
        optimizer_model=chat,
        agent_model=chat,
        sandbox="bwrap",
        max_concurrency=4,
        home=recreate_home,
        experience=ExperienceStore(recreate_home / "experience", embedding="hash"),
        config=EvolveConfig(gate_alpha=GATE_ALPHA, rounds=1, batch_size=2),
    )
    result = opt.optimize(
        seed=SEED, domain=domain, trainset=domain.tasks("train"), valset=domain.tasks("val")
    )
    assert [h["accepted"] for h in result.history] == [True, True]
    assert {"agent", "optimizer", "synthesis"} <= set(result.usage)
    assert sum(r["calls"] for r in result.usage.values()) == len(openai_server.requests)


def test_a_run_closes_the_experience_store_it_opened(recreate_home, openai_server, domain, monkeypatch):
    monkeypatch.setenv("RECREATE_EMBEDDING", "hash")
    openai_server.responder = responder
    model = f"scripted@{openai_server.url}"
    opt = ReCreateOptimizer(
        optimizer_model=model,
        agent_model=model,
        sandbox="bwrap",
        home=recreate_home,
        config=EvolveConfig(gate_alpha=GATE_ALPHA, rounds=1, batch_size=2),
    )
    result = opt.optimize(
        seed=SEED, domain=domain, trainset=domain.tasks("train"), valset=domain.tasks("val")
    )
    assert result.finished
    # an open Chroma client keeps its files, threads and owner lock for the life of the process
    assert not [f for f in open_files() if f.startswith(str(recreate_home / "experience" / "chroma"))]
    assert opt.experience.list()  # reopened on use


def open_files() -> list[str]:
    gc.collect()  # Chroma's reference cycles hold its files until the collector runs
    found = []
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):  # the listing's own descriptor, closed by now
            found.append(os.readlink(f"/proc/self/fd/{fd}"))
    return found


def test_the_run_ends_with_the_seed_pair_and_the_final_pair_on_the_untouched_test_split(
    recreate_home, openai_server
):
    openai_server.responder = responder
    domain = get_domain("jsonl", data=WORDS / "tasks.jsonl", evaluator=EVALUATOR, train=0.5, val=0.2)
    test_ids = {t.id for t in domain.tasks("test")}
    assert test_ids == {"echo"}
    opt = optimizer(recreate_home, openai_server.url, rounds=1, test_seeds=3, gate_alpha=0.25)  # 2 val tasks
    result = opt.optimize(
        seed=SEED, domain=domain, trainset=domain.tasks("train"), valset=domain.tasks("val")
    )

    test = result.test
    assert test["tasks"] == 1 and test["seeds"] == 3
    assert test["seed"]["scaffold"] == result.history[0]["ref"] and test["final"]["scaffold"] == result.final
    assert result.final != result.history[0]["ref"]  # the fix was accepted: two different pairs
    assert (test["seed"]["mean"], test["final"]["mean"]) == (0.0, 1.0)  # the seed answers in the wrong case
    assert test["difference"] | {"low": 1.0, "high": 1.0} == {
        "mean": 1.0, "low": 1.0, "high": 1.0, "n": 3, "better": 3, "worse": 0
    }  # fmt: skip
    runs = [e for e in opt.experience.list() if e.task_id in test_ids]
    assert (
        len(runs) == 6 and len({opt.experience.get(e.id).seed for e in runs}) == 3
    )  # same seeds, both pairs
    # the test task never reached the meta-agent: no request to the optimizer or synthesis names it
    optimizer_requests = [b for b in openai_server.requests if "ReCreate" in json.dumps(b["messages"][:1])]
    assert optimizer_requests and not any("Echo" in json.dumps(b) for b in optimizer_requests)
    config = json.loads((result.run_dir / "config.json").read_text())
    assert (
        config["test"] == ["echo"]
        and json.loads((result.run_dir / "result.json").read_text())["test"] == test
    )
    report = write_report(result, result.run_dir / "report").read_text()
    assert "Final test" in report and "+1.000" in report


def test_without_a_test_split_or_with_test_seeds_0_there_is_no_final_test(
    recreate_home, openai_server, domain
):
    openai_server.responder = responder
    opt = optimizer(recreate_home, openai_server.url, rounds=1, test_seeds=0)
    result = opt.optimize(
        seed=SEED, domain=domain, trainset=domain.tasks("train"), valset=domain.tasks("val")
    )
    assert result.finished and result.test is None
    assert "not run" in write_report(result, result.run_dir / "report").read_text()


def test_a_run_whose_head_moved_on_resumes_from_the_seed_version_it_started_with(
    recreate_home, openai_server, domain
):
    """The seed committed again would be a new version (its parent is the moved HEAD): a resume that did
    so was refused as "started with another config (seed_ref differ)"."""
    openai_server.responder = responder
    opt = optimizer(recreate_home, openai_server.url, rounds=1)
    sets = {"trainset": domain.tasks("train"), "valset": domain.tasks("val")}
    result = opt.optimize(seed=SEED, domain=domain, run_id="moved", **sets)
    assert result.final != result.history[0]["ref"]  # HEAD moved on
    _, _, loop, _ = opt.build(seed=SEED, domain=domain, run_id="moved", checkpointer=None, **sets)
    assert loop.seed_ref == result.history[0]["ref"]
    assert json.loads((result.run_dir / "config.json").read_text())["seed_ref"] == loop.seed_ref


def test_a_run_whose_gate_can_accept_no_improvement_says_so_before_it_starts(
    recreate_home, openai_server, domain, caplog
):
    opt = optimizer(recreate_home, openai_server.url, gate_alpha=0.025)  # the default level, 3 val tasks
    with caplog.at_level("WARNING", logger="recreate.progress"):
        opt.build(seed=SEED, domain=domain, trainset=domain.tasks("train"), valset=domain.tasks("val"))
    assert "with 3 validation task(s) the gate (a paired test at level 0.025) can accept no improvement" in (
        caplog.text
    )
    assert "--gate-alpha 0.125" in caplog.text and not openai_server.requests
