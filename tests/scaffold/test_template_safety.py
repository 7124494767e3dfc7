"""Templates reach no Python internals in any branch: mini-swe-agent renders an exported config with
plain jinja2.Template, so validation, import and export refuse statically what the sandbox refuses at
render time (and the check is never weaker than the sandbox, a property test shows)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st
from jinja2 import StrictUndefined, Template
from jinja2.exceptions import SecurityError
from jinja2.sandbox import ImmutableSandboxedEnvironment
from typer.testing import CliRunner

from recreate.scaffold import read_dir, write_dir
from recreate.scaffold.cli import app
from recreate.scaffold.errors import ScaffoldValidationError
from recreate.scaffold.mini_swe import KEY, MiniSweConfigError, import_config
from recreate.scaffold.mini_swe_export import export_config
from recreate.scaffold.template_safety import unsafe_reason
from recreate.scaffold.validate import validate_scaffold
from tests.scaffold.conftest import REPO, make_scaffold

SHIPPED_SCAFFOLDS = sorted(REPO.glob("scaffolds/*/scaffold.yaml")) + sorted(
    REPO.glob("examples/*/scaffold/scaffold.yaml")
)


def payload(marker: Path) -> str:
    return f"{{{{ cycler.__init__.__globals__.os.popen('touch {marker}').read() }}}}"


def test_the_payload_is_live_in_plain_jinja(tmp_path: Path) -> None:
    """What the export would hand mini-swe-agent really runs a command there (the threat is real)."""
    marker = tmp_path / "ran"
    Template(payload(marker)).render()
    assert marker.exists()


@pytest.mark.parametrize("field", ["system_prompt", "instance_template"])
def test_validation_refuses_a_dormant_branch(field: str, tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    dormant = "{% if false %}" + payload(marker) + "{% endif %}{{ task }}"
    scaffold = make_scaffold(**{field: dormant})
    with pytest.raises(ScaffoldValidationError) as caught:
        validate_scaffold(scaffold)
    [problem] = caught.value.problems
    assert problem.field == field and "Python internal" in problem.message and "\n" not in str(problem)
    assert not marker.exists()


def test_cli_validate_refuses_it(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    scaffold = make_scaffold(system_prompt="Hi {% if false %}" + payload(marker) + "{% endif %}")
    write_dir(scaffold.model_copy(update={"tools": []}), tmp_path / "dir")
    result = CliRunner().invoke(app, ["validate", str(tmp_path / "dir")], env={"COLUMNS": "200"})
    assert result.exit_code == 1 and "system_prompt" in result.output and "Python internal" in result.output
    assert not marker.exists()


def test_export_refuses_and_never_runs_it(tmp_path: Path) -> None:
    """Defence in depth: a scaffold that skipped validation (built in code) still does not export."""
    marker = tmp_path / "ran"
    scaffold = make_scaffold(system_prompt="Hi {% if false %}" + payload(marker) + "{% endif %}", tools=[])
    with pytest.raises(MiniSweConfigError) as caught:
        export_config(scaffold, tmp_path / "out.yaml")
    assert "agent.system_template" in str(caught.value) and "\n" not in str(caught.value)
    assert not (tmp_path / "out.yaml").exists() and not marker.exists()


def test_export_refuses_a_kept_config_template(tmp_path: Path) -> None:
    """The templates an import keeps verbatim (model.observation_template, ...) are checked too."""
    config = {"model": {"observation_template": "{{ lipsum.__globals__ }}"}}
    scaffold = make_scaffold(tools=[], metadata={KEY: {"config": config, "limits": {}}})
    with pytest.raises(MiniSweConfigError, match=r"model\.observation_template"):
        export_config(scaffold, tmp_path / "out.yaml")


def test_import_refuses_it_naming_file_and_key(tmp_path: Path) -> None:
    config = tmp_path / "evil.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "agent": {
                    "system_template": "You are helpful.",
                    "instance_template": "{{ task }}{% if 0 %}{{ x|attr('__class__') }}{% endif %}",
                },
                "model": {"format_error_template": "{{ self._TemplateReference__context }}"},
            }
        )
    )
    with pytest.raises(MiniSweConfigError) as caught:
        import_config([config])
    message = str(caught.value)
    assert str(config) in message and "\n" not in message
    assert "agent.instance_template" in message or "model.format_error_template" in message


UNSAFE = [
    "{{ x.__class__ }}",
    "{{ x['__class__'] }}",
    '{{ x["__cl" ~ "ass__"] }}',
    "{{ x|attr('__class__') }}",
    "{{ x|attr(name) }}",
    "{{ x[name] }}",
    "{{ x.mro() }}",
    "{{ g.gi_frame.f_globals }}",
    "{{ xs|map(attribute='a.__dict__')|list }}",
    "{{ xs|map('attr', '__class__')|list }}",
    "{{ xs|map(f, '__class__')|list }}",
    "{{ xs|selectattr('_private')|list }}",
    "{{ xs|groupby('__class__') }}",
    "{{ xs|sort(attribute='__len__') }}",
    "{{ xs|attr(*args) }}",
    "{{ '{0.__class__}'.format(x) }}",
    "{% for t in tools %}{% if t %}{{ t.a.b._c }}{% endif %}{% endfor %}",
    "{% macro m() %}{{ caller.__code__ }}{% endmacro %}",
    "{% set y = x.__dict__ %}",
    "{% if x %}\n\n{{ (x|first)['__globals__'] }}{% endif %}",
]
SAFE = [
    "Plain text with __dunder__ words and { braces.",
    "{{ task }} in {{ workdir }}: {{ limits.max_steps }} steps",
    "{% for t in tools %}- {{ t.name }}: {{ t.description }}\n{% endfor %}",
    "{{ files[0] }} {{ files[-1] }} {{ files[1:] }} {{ limits['max_steps'] }}",
    "{{ tools|map(attribute='name')|join(', ') }} {{ tools|sort(attribute='name')|first }}",
    "{{ '%s-%d'|format(task, 3) }} {{ task|upper }}",
    "{% raw %}{{ x.__class__ }}{% endraw %}",
    "{% if x %}unclosed",  # does not parse: a syntax error is validation's to report
]


@pytest.mark.parametrize("source", UNSAFE)
def test_refused(source: str) -> None:
    reason = unsafe_reason(source)
    assert reason and reason.startswith("line ") and "\n" not in reason


@pytest.mark.parametrize("source", SAFE)
def test_accepted(source: str) -> None:
    assert unsafe_reason(source) is None


_sandbox = ImmutableSandboxedEnvironment(undefined=StrictUndefined)
NAMES = ["__class__", "__init__", "__globals__", "__dict__", "_x", "mro", "gi_frame", "upper", "items", "a"]
BASES = ["cycler", "lipsum", "'s'", "[1, 2]", "{'a': 1}", "range(3)", "x", "(xs|map('string'))"]
STEPS = st.one_of(
    st.sampled_from(NAMES).map(lambda n: f".{n}"),
    st.sampled_from(NAMES).map(lambda n: f"[{n!r}]"),
    st.sampled_from(NAMES).map(lambda n: f"|attr({n!r})"),
    st.sampled_from(NAMES).map(lambda n: f"|map(attribute={n!r})|list"),
    st.just("()"),
)


@settings(max_examples=150, deadline=None)
@given(base=st.sampled_from(BASES), steps=st.lists(STEPS, min_size=1, max_size=4))
def test_never_weaker_than_the_sandbox(base: str, steps: list[str]) -> None:
    """Whatever the sandbox refuses at render time, the static check refuses without rendering."""
    source = "{{ " + base + "".join(steps) + " }}"
    try:
        _sandbox.from_string(source).render(x={"a": [1]}, xs=[1, 2])
    except SecurityError:
        assert unsafe_reason(source) is not None, source
    except Exception:  # noqa: S110 - other errors (undefined, not callable) are not this property's
        pass


@pytest.mark.parametrize("path", SHIPPED_SCAFFOLDS, ids=lambda p: p.parent.relative_to(REPO).as_posix())
def test_shipped_scaffolds_still_validate(path: Path) -> None:
    validate_scaffold(read_dir(path.parent))
