"""LangChain tools over the store, as the meta-agent calls them."""

from __future__ import annotations

from langchain_core.tools import BaseTool

from recreate.experience.store import ExperienceStore
from recreate.experience.tools import experience_tools
from recreate.experience.views import approx_tokens
from tests.experience.factory import TRACEBACK, bash_step, long_trajectory, make_trajectory


def _tools(store: ExperienceStore, **flags: bool) -> dict[str, BaseTool]:
    return {t.name: t for t in experience_tools(store, **flags)}


def test_tool_set_and_ablations(store: ExperienceStore) -> None:
    assert set(_tools(store)) == {"list_experiences", "search_experience", "read_trajectory", "compare"}
    assert set(_tools(store, allow_trajectories=False)) == {"list_experiences", "search_experience"}
    assert set(_tools(store, allow_search=False, allow_trajectories=False)) == {"list_experiences"}
    assert all(isinstance(t, BaseTool) for t in experience_tools(store))


def test_tools_answer_compact_text_within_budget(store: ExperienceStore) -> None:
    failing = [bash_step(0, "python solve.py", stderr=TRACEBACK, exit_code=1)]
    store.ingest([long_trajectory("t-long"), make_trajectory("t-fail", steps=failing, passed=False)])
    tools = _tools(store, budget_tokens=600)
    listing = tools["list_experiences"].invoke({"filters": {"outcome": "failed"}})
    assert "t-fail" in listing and "t-long" not in listing
    found = tools["search_experience"].invoke({"query": "ZeroDivisionError division by zero", "k": 3})
    assert "t-fail step 0" in found or "t-long step" in found
    index = tools["read_trajectory"].invoke({"trajectory_id": "t-long", "view": "index"})
    assert "files touched" in index and approx_tokens(index) <= 600
    compared = tools["compare"].invoke({"trajectory_ids": ["t-long", "t-fail"]})
    assert "t-long" in compared and "t-fail" in compared


def test_tool_errors_come_back_as_text(store: ExperienceStore) -> None:
    store.add(make_trajectory("t-1"))
    tools = _tools(store)
    assert "no trajectory" in tools["read_trajectory"].invoke({"trajectory_id": "t-missing"})
    assert "unknown view" in tools["read_trajectory"].invoke({"trajectory_id": "t-1", "view": "all"})
    assert "unknown filter" in tools["list_experiences"].invoke({"filters": {"colour": "red"}})


def test_hidden_evaluation_keeps_the_verdict_but_not_the_feedback(store: ExperienceStore) -> None:
    store.add(make_trajectory("t-1", passed=False))
    tools = _tools(store, allow_evaluation=False)
    summary = tools["read_trajectory"].invoke({"trajectory_id": "t-1", "view": "summary"})
    assert "failed" in summary and "wrong output" not in summary
    assert "not available" in tools["read_trajectory"].invoke({"trajectory_id": "t-1", "view": "evaluation"})
    assert "not available" in tools["search_experience"].invoke({"query": "x", "scope": "summaries"})


SECRET = ("val-secret", "SECRETPROMPT", "GOLD-ANSWER-42")  # a held-out task's id, prompt, answer/feedback


def _held_out_store(store: ExperienceStore) -> list[str]:
    """Train runs beside held-out runs whose prompt, steps and feedback carry the secrets; returns the
    held-out trajectory ids."""
    runs, hidden = [], []
    for i in range(3):
        runs.append(make_trajectory(f"t-train-{i}", task_id=f"train-{i}", passed=i != 0))
        val = make_trajectory(
            f"t-val-{i}",
            task_id=f"val-secret-{i}",
            passed=False,
            task_text="SECRETPROMPT: print the answer",
            steps=[bash_step(0, "python solve.py", stdout="GOLD-ANSWER-42", exit_code=1)],
        )
        val.evaluation.feedback = "expected GOLD-ANSWER-42"
        runs.append(val)
        hidden.append(val.trajectory_id)
    store.ingest(runs)
    store.add_memory(
        [{"id": "m-leak", "title": "the answer", "content": "GOLD-ANSWER-42", "evidence": hidden}]
    )
    store.add_memory([{"id": "m-ok", "title": "primes", "content": "sum the first primes", "evidence": []}])
    return hidden


def test_no_tool_call_returns_a_held_out_task(store: ExperienceStore) -> None:
    hidden_runs = _held_out_store(store)
    held_out = {f"val-secret-{i}" for i in range(3)}
    tools = _tools(store, hidden_tasks=held_out)
    filters: list[dict] = [
        {},
        {"task_id": "val-secret-0"},
        {"outcome": "failed"},
        {"run_id": "run-1"},
        {"domain": "ds1000"},
        {"exit_status": "submitted"},
    ]
    replies = []
    for f in filters:
        replies.append(tools["list_experiences"].invoke({"filters": f}))
        for scope in ("steps", "summaries"):
            for query in ("GOLD-ANSWER-42", "SECRETPROMPT print the answer", "expected answer"):
                replies.append(
                    tools["search_experience"].invoke({"query": query, "scope": scope, "filters": f, "k": 50})
                )
    for query in ("GOLD-ANSWER-42", "the answer"):
        replies.append(tools["search_experience"].invoke({"query": query, "scope": "memory", "k": 50}))
    for run in hidden_runs:
        for view in ("index", "summary", "steps(0,5)", "window(0,3)", "failures", "submission", "evaluation"):
            replies.append(tools["read_trajectory"].invoke({"trajectory_id": run, "view": view}))
        replies.append(tools["compare"].invoke({"trajectory_ids": [run, "t-train-1"]}))
    for reply in replies:
        assert not any(secret in reply for secret in SECRET), reply

    # the training runs stay fully visible, and a search still fills its k from them
    assert "t-train-0" in tools["list_experiences"].invoke({"filters": {}})
    steps = tools["search_experience"].invoke({"query": "GOLD-ANSWER-42", "scope": "steps", "k": 5})
    assert steps.count("t-train-") == 5
    assert "m-ok" in tools["search_experience"].invoke({"query": "the answer", "scope": "memory"})
    # without held-out tasks (what the tools did before), the same calls show them
    assert "val-secret" in _tools(store)["list_experiences"].invoke({"filters": {}})
