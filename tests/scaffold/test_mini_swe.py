"""mini-swe-agent configs in and out: every config the package ships imports; import -> export gives
templates that mini-swe-agent's own loader renders to the same text; recreate renders the imported
scaffold the same way; bad configs and unsuppliable variables fail in one line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st
from jinja2 import StrictUndefined, Template
from typer.testing import CliRunner

from recreate.scaffold import load_scaffold, read_dir
from recreate.scaffold.cli import app
from recreate.scaffold.mini_swe import KEY, MiniSweConfigError, import_config, jinja_literal, jinja_text
from recreate.scaffold.mini_swe_export import export_config
from recreate.scaffold.render import render_instance, render_system
from tests.scaffold.mini_swe_helpers import PACKAGE_CONFIGS, SHIPPED, mini_prompts

TASK = 'Fix the bug in {{ parse }}: "a\\b" -> {%raw%} 100% </pr_description>'
BASE = PACKAGE_CONFIGS / "benchmarks" / "swebench.yaml"


def configs_of(path: Path) -> list[Path]:
    """A shipped config and what it needs: an overlay (no agent templates) goes on the config it extends."""
    has_agent = "agent" in (yaml.safe_load(path.read_text()) or {})
    return [path] if has_agent else [BASE, path]


def test_the_package_ships_configs_and_an_overlay() -> None:
    assert len(SHIPPED) >= 6
    assert any(configs_of(p) != [p] for p in SHIPPED)  # the overlay case is really exercised


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.name)
def test_every_shipped_config_imports_and_round_trips(path: Path, tmp_path: Path) -> None:
    paths = configs_of(path)
    scaffold, notes = import_config(paths)
    assert notes and all("\n" not in note for note in notes)
    merged = tmp_path / "merged.yaml"
    merged.write_text(yaml.safe_dump(_merged(paths)))
    exported = export_config(scaffold, tmp_path / "out.yaml").path
    original_system, original_instance = mini_prompts(merged, TASK)
    assert mini_prompts(exported, TASK) == (original_system, original_instance)
    # what mini-swe-agent keeps verbatim comes back verbatim
    out = yaml.safe_load(exported.read_text())
    for section in ("environment", "model"):
        assert out.get(section, {}) == _merged(paths).get(section, {})
    assert out["agent"] == _merged(paths)["agent"]
    # and recreate's own renderer shows the model the same prompts (templates read no cwd here)
    assert render_system(scaffold) == original_system.strip()
    assert render_instance(scaffold, TASK) == original_instance.strip()


def _merged(paths: list[Path]) -> dict:
    from recreate.scaffold.mini_swe import merge

    return merge(*(yaml.safe_load(p.read_text()) for p in paths))


def test_mapped_variables_and_limits(tmp_path: Path) -> None:
    config = tmp_path / "mine.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "agent": {
                    "system_template": "Steps: {{ step_limit }}, budget {{ cost_limit }}.",
                    "instance_template": "In {{ cwd }} within {{ timeout }} s, mode {{ mode }}: {{ task }}",
                    "step_limit": 1000,
                    "cost_limit": 2.5,
                    "mode": "yolo",
                },
                "environment": {"cwd": "/testbed", "timeout": 45},
            }
        )
    )
    scaffold, notes = import_config([config])
    assert scaffold.limits.max_steps == 250  # recreate's bound, said in a note
    assert any("exceeds recreate's bound" in n for n in notes)
    assert scaffold.limits.max_cost_usd == 2.5 and scaffold.limits.command_timeout_s == 45
    assert render_system(scaffold) == "Steps: 250, budget 2.5."
    assert render_instance(scaffold, "go", workdir="/work") == "In /work within 45.0 s, mode yolo: go"
    assert scaffold.metadata[KEY]["config"]["agent"]["step_limit"] == 1000
    # unchanged limits export as the config had them; evolved ones as they are now
    out = yaml.safe_load(export_config(scaffold, tmp_path / "same.yaml").path.read_text())
    assert out["agent"]["step_limit"] == 1000 and out["environment"]["timeout"] == 45
    evolved = scaffold.model_copy(update={"limits": scaffold.limits.model_copy(update={"max_steps": 30})})
    out = yaml.safe_load(export_config(evolved, tmp_path / "evolved.yaml").path.read_text())
    assert out["agent"]["step_limit"] == 30


@pytest.mark.parametrize(
    ("template", "expected"),
    [
        ("{{ task }} on {{ HOME }}", "{{HOME}}, which recreate cannot supply (it comes from mini-swe"),
        (
            "{{ task }} with {{ model_name }}",
            "{{model_name}}, which recreate cannot supply (it comes from the m",
        ),
        ("{{ task }} {{ os.environ }}", "{{os}}, which recreate cannot supply"),
        ("{{ task }} {% if %}", "agent.instance_template is not a valid template"),
    ],
)
def test_a_variable_we_cannot_supply_is_one_line(tmp_path: Path, template: str, expected: str) -> None:
    config = tmp_path / "c.yaml"
    config.write_text(
        yaml.safe_dump(
            {"agent": {"system_template": "hi", "instance_template": template}, "model": {"model_name": "x"}}
        )
    )
    with pytest.raises(MiniSweConfigError) as caught:
        import_config([config])
    assert expected in str(caught.value) and "\n" not in str(caught.value)
    assert str(config) in str(caught.value)


def test_the_task_in_the_system_template_is_refused(tmp_path: Path) -> None:
    config = tmp_path / "c.yaml"
    both = {"system_template": "{{task}}", "instance_template": "{{task}}"}
    config.write_text(yaml.safe_dump({"agent": both}))
    with pytest.raises(MiniSweConfigError, match="move it to agent.instance_template"):
        import_config([config])


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("- just\n- a list\n", "not a mini-swe-agent config"),
        ("name: demo\nsystem_prompt: hi\n", "not a mini-swe-agent config"),
        ("agent: [1, 2]\n", "`agent:` must be a mapping"),
        ("agent: {system_template: [unclosed\n", "not YAML"),
        ("", "not a mini-swe-agent config"),
        ("environment: {timeout: 5}\n", "an overlay config imports after the config it extends"),
    ],
)
def test_not_a_mini_swe_agent_config(tmp_path: Path, text: str, expected: str) -> None:
    config = tmp_path / "c.yaml"
    config.write_text(text)
    with pytest.raises(MiniSweConfigError) as caught:
        import_config([config])
    assert expected in str(caught.value) and "\n" not in str(caught.value)


def test_cli_import_then_export_and_the_seed_hook(tmp_path: Path) -> None:
    runner = CliRunner()
    dest = tmp_path / "imported"
    result = runner.invoke(app, ["import", str(PACKAGE_CONFIGS / "mini.yaml"), str(dest)])
    assert result.exit_code == 0, result.output
    assert "{{machine}} fixed at import" in result.output and "imported mini" in result.output
    assert read_dir(dest) == load_scaffold(PACKAGE_CONFIGS / "mini.yaml")  # `evolve --seed CONFIG.yaml`
    out = tmp_path / "back.yaml"
    result = runner.invoke(app, ["export", str(dest), str(out), "--format", "mini-swe-agent"])
    assert result.exit_code == 0, result.output
    assert mini_prompts(out, "t") == mini_prompts(PACKAGE_CONFIGS / "mini.yaml", "t")
    again = runner.invoke(app, ["export", str(dest), str(out), "--format", "mini-swe-agent"])
    assert again.exit_code != 0 and "already exists" in str(again.exception)
    bad = runner.invoke(app, ["import", "--format", "swe-agent", str(PACKAGE_CONFIGS / "mini.yaml"), "x"])
    assert bad.exit_code != 0 and "unknown format" in bad.output


def test_export_import_export_is_stable(tmp_path: Path) -> None:
    """A recreate scaffold whose templates read recreate's names exports with a prelude that computes
    them from mini-swe-agent's, imports back, and exports to the same config."""
    seed = load_scaffold(Path(__file__).resolve().parents[2] / "scaffolds" / "minimal")
    first = export_config(seed, tmp_path / "first.yaml").path
    again, _ = import_config([first], name=seed.name, domain=seed.domain)
    second = export_config(again, tmp_path / "second.yaml").path
    assert yaml.safe_load(first.read_text()) == yaml.safe_load(second.read_text())
    system, instance = mini_prompts(first, "What is 2 + 2?")
    assert "What is 2 + 2?" in instance and "COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT" in system


printable = st.text(st.characters(blacklist_categories=("Cs",)), max_size=60)
data = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | printable,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(printable, inner, max_size=3),
    max_leaves=8,
)


@settings(max_examples=150, deadline=None)
@given(data)
def test_config_values_survive_as_jinja_literals(value: object) -> None:
    rendered = Template("{% set v = " + jinja_literal(value) + " %}{{ v | tojson }}").render()
    assert rendered == Template("{{ v | tojson }}", undefined=StrictUndefined).render(v=value)


@settings(max_examples=150, deadline=None)
@given(printable)
def test_plain_text_renders_as_itself(text: str) -> None:
    assert Template(jinja_text(text), keep_trailing_newline=True).render() == text


def test_metadata_survives_the_store_and_an_edit(tmp_path: Path) -> None:
    """An evolve run stores the imported seed and its children: the config behind it travels with them,
    and the stored version exports (`scaffold export name@v2 ... --format mini-swe-agent`)."""
    from recreate.scaffold import ScaffoldStore

    scaffold, _ = import_config([PACKAGE_CONFIGS / "benchmarks" / "swebench.yaml"])
    store = ScaffoldStore(tmp_path / "store")
    store.commit(scaffold)
    ops = [{"op": "add_rule", "id": "r1", "text": "Run the tests first.", "rationale": "seen"}]
    child = store.apply(f"{scaffold.name}@v1", json.dumps(ops))
    stored = store.load(child.ref)
    assert stored.metadata == scaffold.metadata
    out = yaml.safe_load(export_config(stored, tmp_path / "child.yaml").path.read_text())
    assert out["environment"]["environment_class"] == "docker" and out["model"]["model_name"]
    assert out["agent"]["system_template"].endswith("- [r1] Run the tests first.\n")


@pytest.mark.parametrize(
    ("configs", "carried"),
    [
        (["benchmarks/swebench.yaml"], True),
        (["benchmarks/swebench.yaml", "benchmarks/swebench_modal.yaml"], False),
    ],
)
def test_tools_go_where_the_environment_can_run_them(
    tmp_path: Path, configs: list[str], carried: bool
) -> None:
    from tests.scaffold.conftest import echo_tool

    scaffold, _ = import_config([PACKAGE_CONFIGS / c for c in configs])
    exported = export_config(scaffold.model_copy(update={"tools": [echo_tool()]}), tmp_path / "t.yaml")
    out = yaml.safe_load(exported.path.read_text())
    if carried:  # docker: the scripts are mounted read-only where the prompt says they are
        mount = f"{(tmp_path / 't_tools').resolve()}:/opt/recreate_tools:ro"
        assert out["environment"]["run_args"][-2:] == ["-v", mount]
        assert "python3 /opt/recreate_tools/echo_text/main.py" in out["agent"]["system_template"]
        assert (exported.tools_dir / "echo_text" / "main.py").read_text() == echo_tool().code
    else:  # a remote sandbox gets no files from here: the export says so and leaves the tool out
        assert exported.tools_dir is None and "echo_text" not in out["agent"]["system_template"]
        assert any("cannot carry tools" in n and "echo_text" in n for n in exported.notes)
