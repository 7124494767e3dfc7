"""The domain agent end to end: real `openai` client -> local HTTP server, commands in bubblewrap."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys

import pytest
from langchain_openai import ChatOpenAI

from recreate.agent import build_domain_agent, recover_trajectory
from recreate.experience.schema import load_trajectory
from recreate.models import Budget, UsageLedger
from recreate.scaffold import load_scaffold
from recreate.scaffold.model import Example
from recreate.testing import Reply, text, tool_call
from tests.agent.conftest import MINIMAL, REPO, ScriptedChat, call

pytestmark = pytest.mark.bwrap


def _agent(server, sandbox, tmp_path, scaffold=MINIMAL, **options):
    """The graph with every key in and out (the rollout runner's), to check the run's bookkeeping."""
    return _internal(scaffold, f"scripted@{server.url}", sandbox, trajectory_dir=tmp_path / "traj", **options)


def _internal(scaffold, model, sandbox, **options):
    return build_domain_agent(scaffold, model=model, sandbox=sandbox, **options).compile(public=False)


def test_minimal_agent_solves_a_scripted_task_and_records_a_complete_trajectory(
    openai_server, bwrap, tmp_path, secret_env
):
    openai_server.enqueue(
        tool_call(
            "bash", {"command": "printf 'print(6*7)' > calc.py && python3 calc.py; echo key=$OPENAI_API_KEY"}
        ),
        tool_call("submit", {"answer": f"42 (not {secret_env})"}),  # a secret in the model's own output
    )
    agent = _agent(openai_server, bwrap, tmp_path, logprobs=True, temperature=0.2)
    out = agent.invoke({"task": "Compute 6*7 with python.", "task_id": "six-seven", "seed": 5})

    assert out["exit_status"] == "submitted" and out["submission"].startswith("42") and out["steps"] == 2
    tool_reply = out["run_messages"][3]
    assert "42" in tool_reply.content and secret_env not in tool_reply.content  # no secret in the sandbox
    assert openai_server.headers[0]["authorization"] == f"Bearer {secret_env}"  # the real client sent it
    assert openai_server.requests[0]["return_tokens_as_token_ids"] is True

    path = tmp_path / "traj" / f"{out['trajectory_id']}.json"
    raw = path.read_text()
    assert secret_env not in raw
    traj = load_trajectory(path)
    assert traj.task_id == "six-seven" and traj.seed == 5 and traj.domain == "general"
    assert traj.scaffold.name == "minimal" and len(traj.scaffold.hash) == 64
    assert traj.model.name == "scripted" and traj.model.base_url_host == "127.0.0.1"
    assert traj.model.sampling["temperature"] == 0.2 and traj.model.sampling["seed"] == 5
    assert [m["role"] for m in traj.messages] == ["system", "user", "assistant", "tool", "assistant", "tool"]
    first, last = traj.steps
    assert first.action["tool"] == "bash" and first.action["args"]["command"].startswith(
        "printf 'print(6*7)'"
    )
    assert first.observation.exit_code == 0 and first.observation.stdout.startswith("42\n")
    assert first.usage.prompt_tokens > 0 and first.usage.completion_tokens > 0
    assert first.token_ids and len(first.token_ids) == len(first.logprobs) == first.usage.completion_tokens
    assert first.message_index == 2 and traj.messages[2]["tool_calls"][0]["function"]["name"] == "bash"
    assert last.action == {"tool": "submit", "args": {"answer": "42 (not ***)"}}
    assert traj.outcome.exit_status == "submitted" and traj.outcome.submission == "42 (not ***)"
    assert traj.totals.steps == 2 and traj.totals.format_errors == 0 and traj.finished_at
    assert traj.sandbox.backend == "bwrap" and traj.code_version


def test_format_errors_are_fed_back_and_counted_without_ending_the_run(openai_server, bwrap, tmp_path):
    openai_server.enqueue(
        text("I will just think."),  # no tool call
        tool_call("bash", '{"command": "ls'),  # arguments are not JSON
        tool_call("nope", {"x": 1}),  # unknown tool
        tool_call("bash", {"cmd": "ls"}),  # arguments do not match the schema
        tool_call("submit", {"answer": "done"}),
    )
    out = _agent(openai_server, bwrap, tmp_path).invoke({"task": "anything"})
    assert out["exit_status"] == "submitted" and out["format_errors"] == 4 and out["steps"] == 5
    sent = openai_server.requests[-1]["messages"]
    feedback = [m["content"] for m in sent if m["role"] in ("user", "tool")][1:]
    assert "no tool call" in feedback[0]
    assert "not valid JSON" in feedback[1]
    assert "unknown tool 'nope'" in feedback[2]
    assert "bad arguments for 'bash'" in feedback[3]
    traj = load_trajectory(out["trajectory_path"])
    assert all("format_error" in s.action for s in traj.steps[:4])
    # every tool message answers a call of the assistant message before it (valid for OpenAI's API)
    for i, msg in enumerate(traj.messages):
        if msg["role"] == "tool":
            ids = [c["id"] for c in traj.messages[i - 1].get("tool_calls", [])]
            assert msg["tool_call_id"] in ids


def test_step_limit_ends_the_run(openai_server, bwrap, tmp_path):
    openai_server.responder = lambda body: tool_call("bash", {"command": "true"})
    scaffold = _with_limits(max_steps=30)  # more steps than LangChain's old default recursion limit of 25
    out = _agent(openai_server, bwrap, tmp_path, scaffold=scaffold).invoke({"task": "loop"})
    assert out["exit_status"] == "max_steps" and out["steps"] == 30 and len(openai_server.requests) == 30
    assert load_trajectory(out["trajectory_path"]).outcome.exit_status == "max_steps"


def test_cost_limit_uses_provider_reported_cost(openai_server, bwrap, tmp_path):
    openai_server.responder = lambda body: tool_call("bash", {"command": "true"}, cost=0.004)
    out = _agent(openai_server, bwrap, tmp_path, scaffold=_with_limits(max_cost_usd=0.01)).invoke(
        {"task": "x"}
    )
    assert out["exit_status"] == "max_cost" and out["steps"] == 3  # 0.012 >= 0.01 after the third call
    assert load_trajectory(out["trajectory_path"]).totals.cost_usd == pytest.approx(0.012)


def test_shared_ledger_budget_ends_the_run_as_max_cost(openai_server, bwrap, tmp_path):
    openai_server.responder = lambda body: tool_call("bash", {"command": "true"})
    ledger = UsageLedger(budget=Budget(max_calls=2))
    out = _agent(openai_server, bwrap, tmp_path, ledger=ledger).invoke({"task": "x"})
    assert out["exit_status"] == "max_cost" and "budget exceeded" in out["error"]
    assert ledger.totals()["calls"] == 2


def test_command_timeout_is_reported_and_the_run_goes_on(openai_server, bwrap, tmp_path):
    openai_server.enqueue(tool_call("bash", {"command": "sleep 20"}), tool_call("submit", {"answer": "late"}))
    out = _agent(openai_server, bwrap, tmp_path, scaffold=_with_limits(command_timeout_s=1)).invoke(
        {"task": "x"}
    )
    assert out["exit_status"] == "submitted"
    assert "timed out after 1 s" in out["run_messages"][3].content
    assert load_trajectory(out["trajectory_path"]).steps[0].observation.timed_out


def test_a_model_failure_mid_run_still_writes_the_steps_so_far(openai_server, bwrap, tmp_path):
    openai_server.enqueue(tool_call("bash", {"command": "echo one"}), Reply(status=500))
    model = ChatOpenAI(model="scripted", base_url=openai_server.url, api_key="x", max_retries=0)
    out = _internal(MINIMAL, model, bwrap, trajectory_dir=tmp_path).invoke({"task": "x"})
    assert out["exit_status"] == "error" and "500" in out["error"]
    traj = load_trajectory(out["trajectory_path"])
    assert traj.outcome.exit_status == "error" and len(traj.steps) == 1
    assert traj.steps[0].observation.stdout == "one\n"


def test_an_interrupt_mid_run_leaves_the_trajectory_on_disk(bwrap, tmp_path):
    model = ScriptedChat(messages=iter([call("bash", command="echo before"), KeyboardInterrupt()]))
    agent = _internal(MINIMAL, model, bwrap, trajectory_dir=tmp_path)
    with pytest.raises(KeyboardInterrupt):
        agent.invoke({"task": "x", "trajectory_id": "t-interrupted"})
    traj = load_trajectory(tmp_path / "t-interrupted.json")
    assert traj.outcome.exit_status == "interrupted" and traj.steps[0].observation.stdout == "before\n"


def test_text_action_format_for_models_without_tool_calling(openai_server, bwrap, tmp_path):
    openai_server.enqueue(
        text("Counting words.\n```bash\necho 'a b c' | wc -w\n```"),
        text("Two blocks:\n```bash\nls\n```\n```bash\npwd\n```"),
        text("The answer:\n```submit\n3\n```"),
    )
    out = _agent(openai_server, bwrap, tmp_path, action_format="text").invoke({"task": "Count the words"})
    assert out["exit_status"] == "submitted" and out["submission"] == "3" and out["format_errors"] == 1
    assert "tools" not in openai_server.requests[0]
    assert "```submit" in openai_server.requests[0]["messages"][0]["content"]
    assert openai_server.requests[1]["messages"][-1]["content"].startswith("exit_code: 0\nstdout:\n3")


def test_scaffold_tools_run_inside_the_sandbox_and_memory_is_searchable(
    openai_server, bwrap, tmp_path, tooled_scaffold
):
    openai_server.enqueue(
        tool_call("add_numbers", {"a": 2, "b": 40}),
        tool_call("search_memory", {"query": "submitting integers"}),
        tool_call("submit", {"answer": "42"}),
    )
    out = _agent(openai_server, bwrap, tmp_path, scaffold=tooled_scaffold).invoke({"task": "add"})
    tool_names = [t["function"]["name"] for t in openai_server.requests[0]["tools"]]
    assert tool_names == ["bash", "add_numbers", "search_memory", "submit"]
    assert out["run_messages"][3].content.startswith(
        "exit_code: 0\nstdout:\n42 /workspace"
    )  # ran in the sandbox
    assert "[m2] Submitting integers" in out["run_messages"][5].content
    assert "Pandas groupby keeps NaN keys out" in openai_server.requests[0]["messages"][0]["content"]


def _with_limits(**limits):
    from recreate.scaffold import load_scaffold

    base = load_scaffold(MINIMAL)
    return base.model_copy(update={"limits": base.limits.model_copy(update=limits)})


KILLED_RUN = """
import os, signal, sys
from langchain_core.messages import AIMessage
from recreate.agent import build_domain_agent, recover_trajectory
from tests.agent.conftest import MINIMAL, REPO, ScriptedChat, call

class Kill(ScriptedChat):
    def _generate(self, messages, stop=None, run_manager=None, **kwargs):
        if len(messages) >= 6:  # the third model call: die as kill -9 would kill it
            os.kill(os.getpid(), signal.SIGKILL)
        return super()._generate(messages, stop, run_manager, **kwargs)

model = Kill(messages=iter([call("bash", command="echo one"), call("bash", command="echo two")]))
agent = build_domain_agent(MINIMAL, model=model, sandbox="bwrap", trajectory_dir=sys.argv[1])
agent.compile(public=False).invoke({"task": "count", "trajectory_id": "t-killed", "task_id": "count"})
"""


def test_a_run_killed_with_sigkill_is_recoverable_from_its_step_log(bwrap, tmp_path):
    env = {**os.environ, "PYTHONPATH": str(REPO), "RECREATE_HOME": str(tmp_path / "home")}
    done = subprocess.run(
        [sys.executable, "-c", KILLED_RUN, str(tmp_path)], env=env, capture_output=True, timeout=120
    )
    assert done.returncode == -signal.SIGKILL, done.stderr.decode()
    assert not (tmp_path / "t-killed.json").exists()  # no finally ran
    traj = recover_trajectory(tmp_path / "t-killed.steps.jsonl")
    assert traj.task_id == "count" and traj.outcome.exit_status == "interrupted"
    assert [s.observation.stdout for s in traj.steps] == ["one\n", "two\n"]
    assert [m["role"] for m in traj.messages] == ["system", "user", "assistant", "tool", "assistant", "tool"]


def test_post_sampling_probabilities_are_recorded_as_log_probs():
    from langchain_core.messages import AIMessage

    from recreate.agent.recorder import step_record

    logprobs = {"content": [{"id": 7, "token": "a", "logprob": None, "prob": 0.5},
                            {"id": 9, "token": "b", "logprob": None, "prob": 1.0}]}  # fmt: skip
    step = step_record(0, AIMessage("ab", response_metadata={"logprobs": logprobs}), 1, "", "m")
    assert step.token_ids == [7, 9]
    assert step.logprobs == pytest.approx([math.log(0.5), 0.0])


def test_each_model_call_of_a_seeded_run_samples_with_its_own_seed(openai_server, bwrap, tmp_path):
    from recreate.agent.graph import step_seed

    openai_server.enqueue(tool_call("bash", {"command": "true"}), tool_call("submit", {"answer": "x"}))
    out = _agent(openai_server, bwrap, tmp_path).invoke({"task": "t", "task_id": "t1", "seed": 5})
    assert [r["seed"] for r in openai_server.requests] == [step_seed(5, 0, "t1"), step_seed(5, 1, "t1")]
    seeds = {step_seed(5, 0, "t1"), step_seed(5, 1, "t1"), step_seed(6, 0, "t1"), step_seed(4, 1, "t1")}
    assert len(seeds) == 4  # no noise shared between the steps or the runs of a group
    assert step_seed(5, 0, "t1") != step_seed(5, 0, "t2")  # ... nor between tasks run with the same seed
    assert load_trajectory(out["trajectory_path"]).seed == 5  # the run's seed is what the log records


def test_each_step_records_why_the_endpoint_ended_the_reply(openai_server, bwrap, tmp_path):
    openai_server.enqueue(
        text("```bash\necho $((1 +", finish_reason="length"), text("```submit\n2\n```", finish_reason="stop")
    )
    out = _agent(openai_server, bwrap, tmp_path, action_format="text").invoke({"task": "1 + 1?"})
    steps = load_trajectory(out["trajectory_path"]).steps
    assert [s.finish_reason for s in steps] == ["length", "stop"]  # a cut reply generated no stop token


EXAMPLES = [
    {"task": "What is 3 + 4?", "steps": [{"command": "echo $((3 + 4))", "output": "7"}, {"submit": "7"}]},
    {"task": "What is 2 + 2?", "steps": [{"command": "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT; echo 4"}]},
]


def test_worked_examples_are_earlier_turns_and_a_marked_output_submits(openai_server, bwrap, tmp_path):
    scaffold = load_scaffold(MINIMAL).model_copy(update={"examples": [Example(**e) for e in EXAMPLES]})
    openai_server.enqueue(text("```bash\necho COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT; echo $((20 + 22))\n```"))
    out = _agent(openai_server, bwrap, tmp_path, scaffold=scaffold, action_format="text").invoke(
        {"task": "What is 20 + 22?"}
    )
    assert out["exit_status"] == "submitted" and out["submission"] == "42" and out["steps"] == 1
    sent = openai_server.requests[0]["messages"]
    assert [(m["role"], m["content"]) for m in sent[1:]] == [
        ("user", "What is 3 + 4?"),
        ("assistant", "```bash\necho $((3 + 4))\n```"),
        ("user", "exit_code: 0\nstdout:\n7"),
        ("assistant", "```submit\n7\n```"),
        ("user", "What is 2 + 2?"),
        ("assistant", "```bash\necho COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT; echo 4\n```"),
        ("user", "What is 20 + 22?"),
    ]
    assert "COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT" in sent[0]["content"]  # the runtime says how
    traj = load_trajectory(tmp_path / "traj" / f"{out['trajectory_id']}.json")
    assert [m.get("name") for m in traj.messages[1:8]] == ["example"] * 6 + [None]
    assert traj.steps[0].message_index == 8  # the model's own turn, after the examples


def test_worked_examples_in_tool_call_format_answer_every_call(openai_server, bwrap, tmp_path):
    scaffold = load_scaffold(MINIMAL).model_copy(update={"examples": [Example(**e) for e in EXAMPLES]})
    openai_server.enqueue(tool_call("submit", {"answer": "42"}))
    out = _agent(openai_server, bwrap, tmp_path, scaffold=scaffold).invoke({"task": "What is 20 + 22?"})
    assert out["exit_status"] == "submitted"
    sent = openai_server.requests[0]["messages"][1:]
    calls = [c["id"] for m in sent for c in m.get("tool_calls", [])]
    answered = [m["tool_call_id"] for m in sent if m["role"] == "tool"]
    assert calls == answered == ["example-0-0", "example-0-1", "example-1-0"]
    assert json.loads(sent[1]["tool_calls"][0]["function"]["arguments"]) == {"command": "echo $((3 + 4))"}


def test_the_marker_submits_only_as_the_first_line_of_bash_output(openai_server, bwrap, tmp_path):
    openai_server.enqueue(
        text("```bash\necho before; echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT; echo 1\n```"),
        text("```bash\nprintf 'COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT\\nline one\\nline two\\n'\n```"),
    )
    out = _agent(openai_server, bwrap, tmp_path, action_format="text").invoke({"task": "Say two lines"})
    assert out["exit_status"] == "submitted" and out["steps"] == 2
    assert out["submission"] == "line one\nline two"


def test_a_failed_or_empty_marked_command_is_not_an_answer(openai_server, bwrap, tmp_path):
    openai_server.enqueue(
        text("```bash\necho COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT; cat no-such-file\n```"),
        text("```bash\necho COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT\n```"),
        text("```submit\n42\n```"),
    )
    out = _agent(openai_server, bwrap, tmp_path, action_format="text").invoke({"task": "Answer"})
    assert out["submission"] == "42" and out["steps"] == 3
    replies = [r["messages"][-1]["content"] for r in openai_server.requests[1:]]
    assert "Not submitted: the command failed" in replies[0]
    assert "Not submitted: nothing followed" in replies[1]


def test_an_output_too_long_to_keep_is_not_submitted_by_the_marker(openai_server, bwrap, tmp_path):
    openai_server.enqueue(
        text("```bash\necho COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT; yes | head -c 200000\n```"),
        text("```submit\nshort\n```"),
    )
    out = _agent(openai_server, bwrap, tmp_path, action_format="text").invoke({"task": "Print a lot"})
    assert out["submission"] == "short" and out["steps"] == 2
    assert "Not submitted" in openai_server.requests[1]["messages"][-1]["content"]


def test_a_secret_json_would_escape_reaches_neither_the_trajectory_nor_the_step_log(
    openai_server, bwrap, tmp_path, monkeypatch
):
    secret = 'pa"ss\\word-0123456789'  # JSON text holds it escaped: redacting that text missed it
    monkeypatch.setenv("DB_PASSWORD", secret)
    openai_server.enqueue(
        tool_call("bash", {"command": "echo hi"}), tool_call("submit", {"answer": f"42 {secret}"})
    )
    agent = _agent(openai_server, bwrap, tmp_path)
    out = agent.invoke({"task": "Say 42.", "task_id": "secret-quote"})
    assert out["exit_status"] == "submitted"
    written = [p for p in (tmp_path / "traj").rglob("*") if p.is_file()]
    assert len(written) >= 1
    for path in written:
        text = path.read_text()
        assert secret not in text and json.dumps(secret)[1:-1] not in text
    traj = load_trajectory(tmp_path / "traj" / f"{out['trajectory_id']}.json")
    assert traj.outcome.submission == "42 ***"


def test_an_endpoints_non_finite_logprob_is_not_recorded_as_a_number():
    """-inf or NaN has no JSON form: stored, it would read back as null and the trajectory would not load."""
    from langchain_core.messages import AIMessage

    from recreate.agent.recorder import _token_ids_and_logprobs

    for bad in (float("-inf"), float("nan")):
        content = [{"id": 5, "token": "a", "logprob": -0.5}, {"id": 6, "token": "b", "logprob": bad}]
        message = AIMessage(content="ab", response_metadata={"logprobs": {"content": content}})
        assert _token_ids_and_logprobs(message) == ([5, 6], None)
    fine = AIMessage(content="a", response_metadata={"logprobs": {"content": [content[0]]}})
    assert _token_ids_and_logprobs(fine) == ([5], [-0.5])
