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
