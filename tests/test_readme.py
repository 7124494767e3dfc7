"""README.md runs as written (and so do examples/*/README.md): every ```bash and ```python block, in
order, in one fresh workspace.

The workspace is a temporary folder holding copies of `examples/` and `scaffolds/` and a `.venv` link to
the running venv (so `source .venv/bin/activate` works as the README says); `.recreate/` in it is the
RECREATE_HOME. The model endpoint is the scripted OpenAI-compatible server (`python -m recreate.testing`'s
`loop` behaviour) through OPENAI_BASE_URL, so no key and no network are needed; `RECREATE_EMBEDDING=hash`
spares the two processes that open the experience index the embedding model's load. Bash blocks run
command by command in one shell (a failing command fails the block, naming its README line); Python
blocks are exec'd in order. A block that cannot run offline carries a marker on the line before its
fence, `<!-- readme-test: skip REASON -->`, and those must stay few.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import types
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from recreate.sandbox import get_sandbox
from recreate.testing import ScriptedOpenAIServer
from recreate.testing.behaviours import loop_responder

REPO = Path(__file__).resolve().parents[1]
DOCS = [REPO / "README.md", *sorted((REPO / "examples").glob("*/README.md"))]
COPIED = ("examples", "scaffolds")
MAX_SKIPPED = 4
_FENCE = re.compile(r"^```(bash|python)[ \t]*\n(.*?)^```[ \t]*$", re.M | re.S)
_SKIP = re.compile(r"<!--\s*readme-test:\s*skip\s+(.+?)\s*-->\s*\Z")
_SETTINGS = ("OPENAI_API_KEY", "OPENAI_BASE_URL", "RECREATE_MODEL", "RECREATE_OPTIMIZER_MODEL")


@dataclass(frozen=True)
class Block:
    language: str
    code: str
    where: str  # file:line of the opening fence
    skip: str | None  # the marker's reason


def readme_blocks(text: str, source: str = "README.md") -> list[Block]:
    blocks = []
    for match in _FENCE.finditer(text):
        before = text[: match.start()].rstrip("\n").rsplit("\n", 1)[-1]
        skip = _SKIP.search(before)
        line = text.count("\n", 0, match.start()) + 1
        blocks.append(Block(match[1], match[2], f"{source}:{line}", skip[1] if skip else None))
    return blocks


def shell_commands(code: str) -> list[str]:
    """The block's commands: continuation lines joined, comment-only and blank lines dropped."""
    commands, pending = [], ""
    for raw in code.splitlines():
        pending += raw.strip() if pending else raw.rstrip()
        if pending.endswith("\\"):
            pending = pending[:-1].rstrip() + " "
            continue
        if pending.strip() and not pending.lstrip().startswith("#"):
            commands.append(pending.strip())
        pending = ""
    return commands


def shell_script(block: Block) -> str:
    """One shell running the block's commands in turn; the first to fail stops it and is named."""
    lines = ["set -u -o pipefail"]
    for command in shell_commands(block.code):
        where = shlex.quote(f"{block.where}: `{command}`")
        lines += [
            f"echo {shlex.quote('$ ' + command)}",
            command,
            f'rc=$?; [ "$rc" -eq 0 ] || {{ echo "FAILED (exit $rc): "{where} >&2; exit 1; }}',
        ]
    return "\n".join(lines) + "\n"


BLOCKS = [
    block
    for doc in DOCS
    for block in readme_blocks(doc.read_text(encoding="utf-8"), str(doc.relative_to(REPO)))
]


def test_readme_blocks_are_found_and_few_are_skipped() -> None:
    assert {b.language for b in BLOCKS} == {"bash", "python"}
    skipped = [f"{b.where} ({b.skip})" for b in BLOCKS if b.skip]
    assert len(skipped) <= MAX_SKIPPED, f"too many README blocks skipped: {skipped}"


def test_a_broken_block_fails_and_names_its_command(tmp_path: Path) -> None:
    broken = readme_blocks("text\n```bash\necho one \\\n  two\n# a comment\nfalse\necho never\n```\n")
    assert shell_commands(broken[0].code) == ["echo one two", "false", "echo never"]
    done = subprocess.run(
        ["bash", "-c", shell_script(broken[0])], cwd=tmp_path, capture_output=True, text=True
    )
    assert done.returncode == 1 and "one two" in done.stdout and "never" not in done.stdout
    assert "README.md:2: `false`" in done.stderr
    marked = readme_blocks("<!-- readme-test: skip needs a GPU -->\n```python\nprint(1)\n```\n")
    assert marked[0].skip == "needs a GPU"


def test_what_the_examples_leave_in_the_checkout_is_ignored() -> None:
    if shutil.which("git") is None or not (REPO / ".git").exists():
        pytest.skip("not a git checkout")
    left = ["app.sqlite", ".langgraph_api/store.pckl", ".recreate/runs/first/report/report.html"]
    done = subprocess.run(["git", "check-ignore", *left], cwd=REPO, capture_output=True, text=True)
    assert done.stdout.split() == left


def test_the_main_job_is_a_command_recreate_accepts(tmp_path: Path) -> None:
    """The README's main job is skipped above (minutes of a real model): its `recreate evolve` line is
    checked here as a dry run, which parses every option and loads the seed, tasks and plan."""
    script = (REPO / "scripts" / "evolve_example.sh").read_text()
    line = script.split("\nexec .venv/bin/recreate ", 1)[1].replace("\\\n", " ").splitlines()[0]
    args = [a for a in shlex.split(line) if a != "$@"]
    done = subprocess.run(
        [sys.executable, "-m", "recreate", *args, "--dry-run", "--home", str(tmp_path)],
        cwd=REPO, capture_output=True, text=True, timeout=120, env={**os.environ, "COLUMNS": "200"},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "fine-tuning step(s)" in done.stdout and "$0.00" in done.stdout  # the local model costs nothing


@pytest.fixture(scope="module")
def endpoint() -> Iterator[str]:
    with ScriptedOpenAIServer(loop_responder()) as server:
        yield server.url


@pytest.fixture(scope="module")
def workspace() -> Iterator[Path]:
    if not (Path(sys.prefix) / "bin" / "activate").is_file():
        pytest.skip("not running in a venv: the README's `source .venv/bin/activate` has none to link")
    # not under pytest's tmp folder (mode 0700): the evaluator folder is bound into the sandbox, whose
    # unprivileged user must reach it through every parent
    root = Path(tempfile.mkdtemp(prefix="recreate-readme-"))
    root.chmod(0o755)
    for name in COPIED:
        shutil.copytree(REPO / name, root / name)
    (root / ".venv").symlink_to(sys.prefix, target_is_directory=True)
    yield root
    shutil.rmtree(root, ignore_errors=True)


def readme_env(workspace: Path, endpoint: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in _SETTINGS and k != "RECREATE_CONFIG"}
    return env | {
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}",
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")])),
        "OPENAI_BASE_URL": endpoint,
        "RECREATE_HOME": str(workspace / ".recreate"),
        "RECREATE_EMBEDDING": "hash",
    }


@pytest.mark.slow
@pytest.mark.bwrap
@pytest.mark.parametrize("block", BLOCKS, ids=[b.where for b in BLOCKS])
def test_readme_block_runs_as_written(
    block: Block, workspace: Path, endpoint: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    if block.skip:
        pytest.skip(block.skip)
    if not get_sandbox("bwrap").available()[0]:
        pytest.skip("bubblewrap unavailable")
    env = readme_env(workspace, endpoint)
    if block.language == "bash":
        done = subprocess.run(
            ["bash", "-c", shell_script(block)], cwd=workspace, env=env, capture_output=True, text=True
        )
        assert done.returncode == 0, f"{done.stderr.strip()}\n--- output ---\n{done.stdout[-4000:]}"
        return
    monkeypatch.chdir(workspace)
    for key in _SETTINGS:
        monkeypatch.delenv(key, raising=False)
    for key in ("OPENAI_BASE_URL", "RECREATE_HOME", "RECREATE_EMBEDDING"):
        monkeypatch.setenv(key, env[key])
    script = types.ModuleType("__readme__")  # registered, as a script's __main__ is: type hints resolve
    monkeypatch.setitem(sys.modules, script.__name__, script)
    exec(compile(block.code, block.where, "exec"), script.__dict__)
