"""The repo task builder (a real sdist, real sandboxed test runs), its mutations, and the domain CLI."""

from __future__ import annotations

import ast
import difflib
import json
import shutil

import pytest
from typer.testing import CliRunner, Result

from recreate.cli import app, register
from recreate.domains.repo.build import BuildError, fetch_sdist
from recreate.domains.repo.cli import model_chat
from recreate.domains.repo.mutate import mutations
from recreate.domains.repo.statement import llm_statement, reveals_fix
from recreate.testing import ScriptedOpenAIServer, text
from tests.domains.repo.helpers import SOURCES, public_dir

CLEAN = SOURCES["tinycalc/__init__.py"]


runner = CliRunner()


@pytest.fixture(scope="module", autouse=True)
def _registered():
    if not any(group.name == "domain" for group in app.registered_groups):
        register()


def cli(*args: str) -> Result:
    return runner.invoke(app, ["domain", *args])


def test_every_mutation_is_a_one_node_change_that_parses():
    tree = ast.parse(CLEAN)
    covered = {n.lineno for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)}
    found = mutations("tinycalc/__init__.py", CLEAN, covered)
    kinds = {m.kind for m in found}
    assert {"flip_comparison", "off_by_one_comparison", "change_constant", "swap_plus_minus"} <= kinds
    assert {"remove_statement", "remove_not", "swap_arguments"} & kinds
    for mutation in found:
        ast.parse(mutation.source)
        changed = [
            line
            for line in difflib.ndiff(CLEAN.splitlines(), mutation.source.splitlines())
            if line[:1] in "+-"
        ]
        assert 1 <= len(changed) <= 2, (mutation.kind, changed)
    assert mutations("x.py", CLEAN, covered={1}) == []  # no covered function, no mutation


def test_flipped_comparison_is_the_intended_edit():
    source = "def f(a, b):\n    return a < b  # keep this comment\n"
    flipped = [m for m in mutations("f.py", source, {1}) if m.kind == "flip_comparison"]
    assert [m.source for m in flipped] == ["def f(a, b):\n    return a >= b  # keep this comment\n"]


def test_built_instances_are_validated_and_build_is_deterministic(tiny_dataset, tmp_path):
    folder, sdist = tiny_dataset
    rows = [json.loads(line) for line in (folder / "tinycalc-0.1.jsonl").read_text().splitlines()]
    assert len(rows) == 3 and (folder / "snapshots" / "tinycalc-0.1.bundle").is_file()
    for row in rows:
        assert row["FAIL_TO_PASS"] and not set(row["FAIL_TO_PASS"]) & set(row["PASS_TO_PASS"])
        assert row["split"] in ("train", "val", "test") and row["patch"].startswith("diff --git")
        assert "tests/test_tinycalc.py::" in row["problem_statement"]
    again = public_dir("recreate-repo-again-")
    try:
        done = cli(
            "build",
            "repo",
            "--from",
            str(sdist),
            "--n",
            "3",
            "--seed",
            "0",
            "--out",
            str(again),
            "--sandbox",
            "bwrap",
        )
        assert done.exit_code == 0, done.output
        assert (again / "tinycalc-0.1.jsonl").read_text() == (folder / "tinycalc-0.1.jsonl").read_text()
    finally:
        shutil.rmtree(again, ignore_errors=True)


def test_selftest_gold_resolves_and_wrong_patches_do_not(tiny_dataset):
    done = cli("selftest", "repo", "--data", str(tiny_dataset[0]), "--sandbox", "bwrap")
    assert done.exit_code == 0, done.output
    assert "reference_pass=3/3 wrong_pass=0/3 forgery_pass=0/3" in done.output


def test_setup_builds_the_environments_the_data_names(tiny_dataset):
    done = cli("setup", "repo", "--data", str(tiny_dataset[0]))
    assert done.exit_code == 0 and "repo test environment ready" in done.output, done.output
    missing = cli("setup", "repo")
    assert missing.exit_code != 0 and "--data" in missing.output


def test_model_writes_the_statement_unless_it_quotes_the_fix():
    patch = "--- a/m.py\n+++ b/m.py\n@@ -1 +1 @@\n-    if x < low:\n+    if x >= low:\n"
    failing, messages = ["tests/t.py::test_low"], {"tests/t.py::test_low": "assert 0 == -3"}
    with ScriptedOpenAIServer() as server:
        server.enqueue(
            text("clamp() returns the bound for values inside the range\n\nclamp(5, 0, 10) gives 0.")
        )
        server.enqueue(text("The line `if x >= low:` is wrong."))
        chat = model_chat(f"scripted@{server.url}")
        written, how = llm_statement(chat, "tinycalc", "0.1", failing, messages, patch)
        quoted, fallback = llm_statement(chat, "tinycalc", "0.1", failing, messages, patch)
        prompt = server.requests[0]["messages"][1]["content"]
    assert how == {"statement": "model"} and written.startswith("clamp() returns the bound")
    assert fallback["statement"] == "template" and "tests/t.py::test_low: assert 0 == -3" in quoted
    assert "x >= low" not in prompt and "x < low" not in prompt  # the model never sees the fix
    assert reveals_fix("see if x >= low: here", patch) and not reveals_fix("clamp is wrong", patch)


def test_unpinned_or_unknown_sources_are_clear_errors(tmp_path):
    with pytest.raises(BuildError, match="pin a version"):
        fetch_sdist("tinycalc", tmp_path)
    done = cli("build", "math", "--from", "x==1")
    assert done.exit_code != 0 and "only repo" in done.output


def test_an_sdist_without_tests_is_named_so(repo_envs, bwrap, tmp_path):
    from recreate.domains.repo.build import Builder
    from tests.domains.repo.helpers import write_sdist

    work = public_dir("recreate-repo-no-tests-")
    try:
        without_tests = {name: text for name, text in SOURCES.items() if not name.startswith("tests/")}
        sdist = write_sdist(work, without_tests)
        with pytest.raises(BuildError, match="pytest finds no tests in this sdist"):
            Builder(bwrap, seed=0, echo=lambda _: None).build(str(sdist), work / "data", n=1)
    finally:
        shutil.rmtree(work, ignore_errors=True)
