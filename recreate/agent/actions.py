"""Reading actions out of a model reply, in either action format.

`tool_calls` (default): native function calling; JSON that does not parse arrives in
`AIMessage.invalid_tool_calls` and becomes a format error. `text`: for models without tool calling, each
reply holds exactly one fenced block: ```bash (a command) or ```submit (the final answer).
A format error is fed back to the model and counted; it never ends the run.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage

from recreate.agent.toolbox import SUBMIT_MARKER
from recreate.experience.schema import EXAMPLE_NAME
from recreate.scaffold.model import INTERPRETERS, Example, Scaffold

NO_TOOL_CALL = (
    "Format error: your reply has no tool call. Call exactly one tool per reply (`bash` to run a command, "
    "`submit` with the final answer when done)."
)
TEXT_FORMAT_HELP = (
    "Format error: {problem}. Reply with exactly one fenced block: ```bash with one command to run, or "
    "```submit with your final answer."
)
_FENCE = re.compile(r"```([A-Za-z_]*)[ \t]*\n(.*?)\n?```", re.DOTALL)


@dataclass
class Action:
    name: str
    args: dict[str, Any]
    call_id: str | None = None  # the tool-call id the reply must answer (None in text format)


@dataclass
class FormatError:
    message: str
    call_id: str | None = None  # answer with a ToolMessage when the bad call has an id


@dataclass
class Parsed:
    actions: list[Action] = field(default_factory=list)
    errors: list[FormatError] = field(default_factory=list)


def parse_reply(message: AIMessage, action_format: str) -> Parsed:
    return parse_text(message.text) if action_format == "text" else parse_tool_calls(message)


def parse_tool_calls(message: AIMessage) -> Parsed:
    parsed = Parsed()
    for call in message.tool_calls:
        parsed.actions.append(Action(call["name"], call["args"], call.get("id")))
    for bad in message.invalid_tool_calls:
        error = (bad.get("error") or "").rpartition("Received ")[2].split("\n")[0].strip()
        parsed.errors.append(
            FormatError(
                f"Format error: the arguments of your {bad.get('name') or 'tool'!r} call are not valid JSON "
                f"({error or 'unparsable'}). Send the call again with a JSON object as arguments.",
                bad.get("id"),
            )
        )
    if not parsed.actions and not parsed.errors:
        parsed.errors.append(FormatError(NO_TOOL_CALL))
    return parsed


def parse_text(content: str) -> Parsed:
    blocks = _FENCE.findall(content)
    if len(blocks) != 1:
        problem = (
            "no fenced block found" if not blocks else f"{len(blocks)} fenced blocks found, expected one"
        )
        return Parsed(errors=[FormatError(TEXT_FORMAT_HELP.format(problem=problem))])
    language, body = blocks[0][0].lower(), blocks[0][1]
    if language == "submit":
        return Parsed(actions=[Action("submit", {"answer": body.strip()})])
    if language in ("bash", "sh", "shell", "", "mswea_bash_command"):  # mini-swe-agent configs ask for it
        if not body.strip():
            return Parsed(errors=[FormatError(TEXT_FORMAT_HELP.format(problem="the bash block is empty"))])
        return Parsed(actions=[Action("bash", {"command": body})])
    return Parsed(
        errors=[FormatError(TEXT_FORMAT_HELP.format(problem=f"unknown block language {language!r}"))]
    )


def runtime_instructions(scaffold: Scaffold, action_format: str) -> str:
    """What the runtime adds to the scaffold's system prompt: the action convention and the memory index."""
    parts = []
    if action_format == "text":
        lines = [
            "## How to act",
            "Reply with exactly one fenced block per message. Run a command with",
            "```bash\n<command>\n```",
            "and finish with",
            "```submit\n<final answer>\n```",
            f"(or run a command whose output starts with the line {SUBMIT_MARKER}: the rest of its output "
            "is your final answer).",
        ]
        for tool in scaffold.tools:
            run = f"{INTERPRETERS[tool.language]} {tool.sandbox_path()} '<JSON arguments>'"
            lines.append(
                f"Tool `{tool.name}`: {tool.description} Run: `{run}`; arguments schema: "
                f"{json.dumps(tool.args, separators=(',', ':'))}"
            )
        parts.append("\n".join(lines))
    if scaffold.memory:
        if action_format == "text":
            items = "\n".join(f"- [{m.id}] {m.title}: {m.content}" for m in scaffold.memory)
            parts.append(f"## Memory (lessons from earlier tasks)\n{items}")
        else:
            titles = "\n".join(f"- [{m.id}] {m.title}" for m in scaffold.memory)
            parts.append(f"## Memory (read with the search_memory tool)\n{titles}")
    return "\n\n".join(parts)


def example_messages(
    examples: list[Example], action_format: str, render_task: Callable[[str], str]
) -> list[BaseMessage]:
    """A scaffold's worked examples as earlier turns of the conversation, in the run's action format. An
    example's last step ends it: a `submit`, or a command that submits its output by the SUBMIT_MARKER.
    The turns carry `name="example"`: the trainer scores them as context, never as the model's."""
    messages: list[BaseMessage] = []
    for n, example in enumerate(examples):
        messages.append(HumanMessage(render_task(example.task), name=EXAMPLE_NAME))
        for k, step in enumerate(example.steps):
            last = k == len(example.steps) - 1
            if step.command is not None:
                name, value = "bash", step.command
                shown = f"exit_code: 0\nstdout:\n{step.output}" if step.output else "exit_code: 0"
            else:
                name, value, shown = "submit", step.submit or "", "submitted"
            if action_format == "text":
                messages.append(AIMessage(f"```{name}\n{value}\n```", name=EXAMPLE_NAME))
                if not last:
                    messages.append(HumanMessage(shown, name=EXAMPLE_NAME))
                continue
            call_id = f"example-{n}-{k}"
            args = {"command": value} if name == "bash" else {"answer": value}
            call = {"name": name, "args": args, "id": call_id, "type": "tool_call"}
            messages.append(AIMessage("", tool_calls=[call], name=EXAMPLE_NAME))
            answer = "submitted" if last else shown
            messages.append(ToolMessage(answer, tool_call_id=call_id))  # some servers refuse a name here
    return messages
