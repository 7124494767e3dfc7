from langchain_core.messages import AIMessage

from recreate.agent.actions import parse_reply, runtime_instructions
from recreate.agent.toolbox import search_memory


def test_tool_calls_become_actions_and_bad_json_a_format_error_with_its_call_id():
    good = AIMessage("", tool_calls=[{"name": "bash", "args": {"command": "ls"}, "id": "c1"}])
    parsed = parse_reply(good, "tool_calls")
    assert [(a.name, a.args, a.call_id) for a in parsed.actions] == [("bash", {"command": "ls"}, "c1")]
    assert parsed.errors == []

    bad = AIMessage(
        "",
        invalid_tool_calls=[
            {"name": "bash", "args": '{"command": ', "id": "c2", "error": "Received JSONDecodeError x"}
        ],
    )
    parsed = parse_reply(bad, "tool_calls")
    assert parsed.actions == []
    assert parsed.errors[0].call_id == "c2" and "not valid JSON" in parsed.errors[0].message


def test_a_reply_without_any_call_is_a_format_error():
    parsed = parse_reply(AIMessage("I think the answer is 4"), "tool_calls")
    assert parsed.actions == [] and parsed.errors[0].call_id is None


def test_text_format_reads_exactly_one_fenced_block():
    run = parse_reply(AIMessage("Let me look.\n```bash\nls -la\n```"), "text")
    assert [(a.name, a.args) for a in run.actions] == [("bash", {"command": "ls -la"})]
    done = parse_reply(AIMessage("Done.\n```submit\n42\n```"), "text")
    assert [(a.name, a.args) for a in done.actions] == [("submit", {"answer": "42"})]
    for reply in ("no block at all", "```bash\nls\n```\n```bash\npwd\n```", "```python\nprint(1)\n```"):
        parsed = parse_reply(AIMessage(reply), "text")
        assert parsed.actions == [] and "Format error" in parsed.errors[0].message


def test_memory_search_ranks_by_shared_words(tooled_scaffold):
    hits = search_memory(tooled_scaffold.memory, "how do I submit an integer answer")
    assert [m.id for m in hits][:1] == ["m2"]
    assert search_memory(tooled_scaffold.memory, "zebra") == []


def test_runtime_instructions_describe_the_text_convention_and_memory(tooled_scaffold):
    text = runtime_instructions(tooled_scaffold, "text")
    assert "```submit" in text and ".recreate_tools/add_numbers/main.py" in text
    assert "Use dropna=False" in text  # text format has no memory tool: contents go in the prompt
    assert "Use dropna=False" not in runtime_instructions(tooled_scaffold, "tool_calls")
