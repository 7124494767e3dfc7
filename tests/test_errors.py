"""Errors raised to Python callers name arguments; the command line shows its options instead."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from recreate.errors import Arg, ArgumentError, cli_message

REPO = Path(__file__).resolve().parents[1]
# the modules a Python caller of optimize(), load_run() and create_domain_agent() gets errors from
PYTHON_API = [
    "recreate/models.py",
    "recreate/runs.py",
    "recreate/optimizer/optimizer.py",
    "recreate/optimizer/run.py",
    "recreate/agent/factory.py",
    "recreate/agent/local.py",
    "recreate/agent/server.py",
    "recreate/local/__init__.py",
    "recreate/local/embedded.py",
    "recreate/local/server.py",
]
names = st.from_regex(r"[a-z][a-z_]{0,12}", fullmatch=True)


@given(text=st.text(), name=names, value=st.text(max_size=20))
def test_text_outside_the_marks_is_kept_as_it_is(text: str, name: str, value: str) -> None:
    plain = ArgumentError(text)
    assert str(plain) == text == plain.for_cli()  # braces, percent signs, anything: never a format string
    marked = ArgumentError(text.replace("{", "(") + " pass {arg}", arg=Arg(name, value, value))
    assert str(marked).endswith(f" pass {name}={value}" if value else f" pass {name}")


@given(name=names)
def test_python_names_the_argument_and_the_cli_its_option(name: str) -> None:
    error = ArgumentError("pass {a}", a=Arg(name, "'X'", "X"))
    flag = "--" + name.replace("_", "-")
    assert str(error) == f"pass {name}='X'" and error.for_cli() == f"pass {flag} X"
    assert error.for_cli({name: "--other"}) == "pass --other X" and cli_message(error) == error.for_cli()
    assert cli_message(ValueError("plain")) == "plain"


def test_no_error_of_the_python_api_names_a_command_line_option() -> None:
    offenders = []
    for rel in PYTHON_API:
        tree = ast.parse((REPO / rel).read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if not isinstance(node, ast.Raise) or node.exc is None:
                continue
            flags = {  # an Arg's own option name is what the command line shows: fine
                id(c) for call in ast.walk(node.exc) if _is_arg(call) for c in ast.walk(call)
            }
            for part in ast.walk(node.exc):
                text = part.value if isinstance(part, ast.Constant) and id(part) not in flags else None
                if isinstance(text, str) and re.search(r"(^|\s)--[a-z]", text):
                    offenders.append(f"{rel}:{node.lineno}: {text.strip()}")
    assert not offenders, "\n".join(offenders)


def _is_arg(node: ast.AST) -> bool:
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "Arg"


@pytest.fixture
def no_endpoint(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """No OpenAI key or server configured: an `openai:` spec cannot work."""
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "RECREATE_MODEL", "RECREATE_OPTIMIZER_MODEL"):
        monkeypatch.delenv(name, raising=False)
    return tmp_path / "home"


@pytest.mark.parametrize(
    ("argument", "flag"), [("agent_model", "--model"), ("optimizer_model", "--optimizer-model")]
)
def test_a_model_that_cannot_work_is_named_as_the_optimizer_s_caller_passed_it(
    no_endpoint, argument, flag
) -> None:
    from recreate.optimizer.optimizer import ReCreateOptimizer

    models = {
        "agent_model": "scripted@http://127.0.0.1:9/v1",
        "optimizer_model": "scripted@http://127.0.0.1:9/v1",
    }
    with pytest.raises(ArgumentError) as caught:
        ReCreateOptimizer(**(models | {argument: "openai:gpt-4.1-mini"}), home=no_endpoint, sandbox="local")
    assert str(caught.value).endswith(f"or pass {argument}='PROVIDER:MODEL'")
    assert caught.value.for_cli().endswith(f"or pass {flag} PROVIDER:MODEL")


def test_optimize_names_its_own_model_argument(no_endpoint) -> None:
    from recreate import optimize
    from recreate.domains import get_domain

    domain = get_domain("math", data=REPO / "examples" / "arithmetic" / "tasks.jsonl")
    with pytest.raises(ArgumentError) as caught:
        optimize(
            REPO / "scaffolds" / "minimal",
            domain,
            model="openai:gpt-4.1-mini",
            home=no_endpoint,
            sandbox="local",
        )
    assert str(caught.value).endswith("or pass model='PROVIDER:MODEL'")
    assert caught.value.for_cli().endswith("or pass --model PROVIDER:MODEL")
    assert not (no_endpoint / "runs").exists() or not any((no_endpoint / "runs").iterdir())


def test_renamed_keeps_the_class_the_values_and_the_other_arguments() -> None:
    from recreate.local import LocalModelArgumentError, LocalModelError

    error = LocalModelArgumentError("{a} and {b}", a=Arg("model", "'X'", "X"), b=Arg("port"))
    renamed = error.renamed("model", "agent_model", "--model")
    assert isinstance(renamed, LocalModelError) and str(renamed) == "agent_model='X' and port"
    assert renamed.for_cli() == "--model X and --port" and str(error) == "model='X' and port"
