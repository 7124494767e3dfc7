"""Scripted behaviours for the OpenAI-compatible test server, chosen by name or by a `module:function`.

- `loop` plays every role of `recreate evolve` with short, valid moves, so the whole loop (agent runs in
  the sandbox, evaluation, reflection, synthesis, the gate, the report) runs offline. The domain agent
  runs one command and submits a fixed answer; the ReCreate-Agent proposes one rule; the synthesis agent
  submits it as the batch's patch; any other request (a router, a plain chat) gets the text "ok". It
  shows the mechanics, not a real gain: the fixed answer passes no real evaluator.
- `ok` answers every request with the text "ok".
- `MODULE:FUNCTION` or `FILE.py:FUNCTION`: your own responder, `(request body) -> Reply`. The repo's
  `tests/optimizer/script.py:responder` is one: on `tests/optimizer/words` its agent learns a rule.

Roles are told apart by the tools each request offers (and, for the agent's text action format, by its
fenced ```submit instructions), not by prompt wording.
"""

from __future__ import annotations

import importlib
import importlib.util
import itertools
import re
from pathlib import Path
from typing import Any

from recreate.testing.openai_server import Reply, Responder, text, tool_call

LOOP_ANSWER = "scripted answer"
_CALLABLE = re.compile(r"(?P<module>[^\s:]+):(?P<function>[A-Za-z_]\w*)")


def _content(message: dict[str, Any]) -> str:
    content = message.get("content") or ""
    return content if isinstance(content, str) else " ".join(part.get("text", "") for part in content)


def loop_responder() -> Responder:
    """A fresh `loop` responder; its rule ids count up, so a later round's rule never clashes."""
    rule_ids = itertools.count(1)

    def rule_ops() -> list[dict[str, Any]]:
        rule = {
            "op": "add_rule",
            "id": f"scripted-check-{next(rule_ids)}",
            "text": "Before submitting, check the answer against every requirement of the task.",
            "rationale": "scripted endpoint: a placeholder lesson",
        }
        return [rule]

    def respond(body: dict[str, Any]) -> Reply:
        messages = body.get("messages") or []
        tools = {t.get("function", {}).get("name") for t in body.get("tools") or []}
        turn = sum(m.get("role") == "assistant" for m in messages)
        diagnosis = "scripted endpoint: no real diagnosis"
        if "propose" in tools:
            return (
                tool_call("propose", {"ops": rule_ops(), "diagnosis": diagnosis})
                if turn == 0
                else text("done")
            )
        if "submit_patch" in tools:
            return (
                tool_call("submit_patch", {"ops": rule_ops(), "diagnosis": diagnosis})
                if turn == 0
                else text("done")
            )
        if {"bash", "submit"} <= tools:
            return (
                tool_call("bash", {"command": "ls"})
                if turn == 0
                else tool_call("submit", {"answer": LOOP_ANSWER})
            )
        if any("```submit" in _content(m) for m in messages if m.get("role") == "system"):
            block = "```bash\nls\n```" if turn == 0 else f"```submit\n{LOOP_ANSWER}\n```"
            return text(f"Next step.\n{block}")
        return text("ok")

    return respond


def load_responder(name: str) -> Responder:
    """`loop`, `ok`, or a `module:function` / `file.py:function` returning a Reply for a request body."""
    if name == "loop":
        return loop_responder()
    if name == "ok":
        return lambda body: text("ok")
    match = _CALLABLE.fullmatch(name.strip())
    if match is None:
        raise ValueError(f"--responder {name!r}: use loop, ok, MODULE:FUNCTION or FILE.py:FUNCTION")
    module_name, function = match["module"], match["function"]
    if module_name.endswith(".py"):
        path = Path(module_name).absolute()
        if not path.is_file():
            raise ValueError(f"--responder {name!r}: no file {path}")
        spec = importlib.util.spec_from_file_location(f"scripted_{path.stem}", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    else:
        module = importlib.import_module(module_name)
    responder = getattr(module, function, None)
    if not callable(responder):
        raise ValueError(f"--responder {name!r}: {module_name} has no function {function!r}")
    return responder
