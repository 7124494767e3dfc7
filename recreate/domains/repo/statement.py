"""Problem statements of built instances: from the failing tests' names and messages, or written by an
LLM as an issue report (`--model`), which never sees the fix and is checked not to quote it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

SHOWN_TESTS = 6
STATEMENT_SYSTEM = (
    "You write bug reports for a Python library, as a user would file them on its issue tracker. You are "
    "given the tests that fail and their error messages. Describe the wrong behaviour a user would see "
    "(what was expected, what happened) in a short issue: a title line, then one or two paragraphs. Do "
    "not guess where the bug is in the code, do not propose a fix, do not name the failing tests' files."
)


def failing_summary(fail_to_pass: list[str], messages: dict[str, str]) -> list[str]:
    lines = []
    for name in fail_to_pass[:SHOWN_TESTS]:
        message = (messages.get(name) or "").strip().splitlines()
        lines.append(f"- {name}" + (f": {message[0][:300]}" if message else ""))
    if len(fail_to_pass) > SHOWN_TESTS:
        lines.append(f"- ... and {len(fail_to_pass) - SHOWN_TESTS} more")
    return lines


def template_statement(package: str, version: str, fail_to_pass: list[str], messages: dict[str, str]) -> str:
    count = len(fail_to_pass)
    return "\n".join(
        [
            f"{package} {version}: {count} test{'s' if count != 1 else ''} of the project's own test suite "
            f"fail{'s' if count == 1 else ''}.",
            "",
            "Failing tests:",
            *failing_summary(fail_to_pass, messages),
            "",
            "Find the cause in the library's source code and fix it there. The tests are correct: do not "
            "change them.",
        ]
    )


def reveals_fix(statement: str, patch: str) -> bool:
    """Whether the statement quotes a line the fix changes (a long enough one to be telling)."""
    changed = {
        line[1:].strip()
        for line in patch.splitlines()
        if line[:1] in "+-" and not line.startswith(("+++", "---"))
    }
    return any(len(line) >= 8 and line in statement for line in changed)


def llm_statement(
    chat: Callable[[list[dict[str, str]]], str],
    package: str,
    version: str,
    fail_to_pass: list[str],
    messages: dict[str, str],
    patch: str,
) -> tuple[str, dict[str, Any]]:
    """(statement, provenance): the model's issue text, or the template when it quoted the fix or failed."""
    fallback = template_statement(package, version, fail_to_pass, messages)
    prompt = "\n".join(
        [f"Library: {package} {version}", "Failing tests:", *failing_summary(fail_to_pass, messages)]
    )
    try:
        written = chat([{"role": "system", "content": STATEMENT_SYSTEM}, {"role": "user", "content": prompt}])
    except Exception as exc:  # an endpoint failure costs the nicer text, never the instance
        return fallback, {"statement": "template", "reason": f"model failed: {type(exc).__name__}"}
    written = (written or "").strip()
    if not written:
        return fallback, {"statement": "template", "reason": "empty model reply"}
    if reveals_fix(written, patch):
        return fallback, {"statement": "template", "reason": "the model's text quoted the fix"}
    closing = "\n\nThe project's tests show the problem; they are correct, do not change them."
    return written + closing, {"statement": "model"}
