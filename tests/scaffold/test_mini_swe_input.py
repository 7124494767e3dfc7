"""Hostile or broken mini-swe-agent configs fail in one line naming the file (and the key): YAML aliases
(a billion-laughs file), oversized or absurdly nested files, and limits that are no limits."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import yaml

from recreate.scaffold.mini_swe import MAX_CONFIG_BYTES, MiniSweConfigError, import_config, read_config

AGENT = {"system_template": "You are helpful.", "instance_template": "{{ task }}"}


def billion_laughs(levels: int) -> str:
    lines = ['a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for level in range(1, levels):
        previous = chr(ord("a") + level - 1)
        name = chr(ord("a") + level)
        lines.append(f"{name}: &{name} [{','.join(['*' + previous] * 9)}]")
    return "agent:\n" + "\n".join("  " + line for line in lines) + "\n"


def refused(path: Path, *expected: str) -> str:
    with pytest.raises(MiniSweConfigError) as caught:
        import_config([path])
    message = str(caught.value)
    assert message.startswith(str(path)) and "\n" not in message, message
    assert all(part in message for part in expected), message
    return message


def test_a_billion_laughs_is_refused_before_it_expands(tmp_path: Path) -> None:
    bomb = tmp_path / "bomb.yaml"
    bomb.write_text(billion_laughs(12))  # 9**12 strings if expanded: far past any memory
    assert bomb.stat().st_size < 1_000
    started = time.monotonic()
    refused(bomb, "alias")
    assert time.monotonic() - started < 2


def test_even_one_alias_is_refused(tmp_path: Path) -> None:
    config = tmp_path / "alias.yaml"
    config.write_text("agent:\n  system_template: &t 'Hi {{ task }}'\n  instance_template: *t\n")
    refused(config, "alias")


def test_an_anchor_alone_is_fine(tmp_path: Path) -> None:
    config = tmp_path / "anchor.yaml"
    config.write_text("agent: &agent\n  system_template: Hi.\n  instance_template: '{{ task }}'\n")
    assert read_config(config)["agent"]["instance_template"] == "{{ task }}"


def test_an_oversized_file_is_refused_unread(tmp_path: Path) -> None:
    config = tmp_path / "huge.yaml"
    config.write_text(yaml.safe_dump({"agent": AGENT}) + "#" * MAX_CONFIG_BYTES)
    refused(config, "larger than 1 MB")


def test_absurd_nesting_is_refused(tmp_path: Path) -> None:
    config = tmp_path / "deep.yaml"
    config.write_text("agent: " + "[" * 400_000 + "]" * 400_000)
    started = time.monotonic()
    refused(config, "nested deeper than")
    assert time.monotonic() - started < 2


@pytest.mark.parametrize(
    ("section", "key", "value"),
    [
        ("agent", "step_limit", ".nan"),
        ("agent", "step_limit", "-1"),
        ("agent", "step_limit", "2.5"),
        ("agent", "step_limit", ".inf"),
        ("agent", "step_limit", "ten"),
        ("agent", "step_limit", "true"),
        ("agent", "cost_limit", "-5"),
        ("agent", "cost_limit", ".nan"),
        ("agent", "cost_limit", "-.inf"),
        ("environment", "timeout", "-1"),
        ("environment", "timeout", ".nan"),
        ("environment", "timeout", "[30]"),
    ],
)
def test_a_bad_limit_names_the_file_and_key(section: str, key: str, value: str, tmp_path: Path) -> None:
    config = tmp_path / "limits.yaml"
    sections: dict = {"agent": dict(AGENT), "environment": {}}
    sections[section][key] = yaml.safe_load(value)
    config.write_text(yaml.safe_dump(sections))
    refused(config, f"{section}.{key}", ">= 0")


@pytest.mark.parametrize(("step_limit", "expected"), [(0, 50), (7, 7), (10_000, 250)])
def test_good_limits_still_map(step_limit: int, expected: int, tmp_path: Path) -> None:
    config = tmp_path / "ok.yaml"
    config.write_text(yaml.safe_dump({"agent": {**AGENT, "step_limit": step_limit, "cost_limit": 0}}))
    scaffold, _ = import_config([config])
    assert scaffold.limits.max_steps == expected and scaffold.limits.max_cost_usd == 0
