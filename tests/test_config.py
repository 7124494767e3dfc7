from pathlib import Path

import pytest

from recreate.config import ConfigError, load_settings


def test_defaults_and_env(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("RECREATE_HOME", raising=False)
    assert load_settings().home == Path(".recreate")
    monkeypatch.setenv("RECREATE_HOME", str(tmp_path / "h"))
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")
    s = load_settings()
    assert s.home == tmp_path / "h" and s.base_url == "http://127.0.0.1:9/v1"
    assert load_settings(home=tmp_path / "x").home == tmp_path / "x"  # explicit beats env


def test_toml_file(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("RECREATE_MODEL", raising=False)
    (tmp_path / "recreate.toml").write_text('[recreate]\nmodel = "openai:gpt-4.1-mini"\nsandbox = "docker"\n')
    s = load_settings()
    assert (s.model, s.sandbox) == ("openai:gpt-4.1-mini", "docker")


@pytest.mark.parametrize(
    ("content", "match"),
    [
        ("model = [", "malformed TOML"),
        ('openai_api_key = "sk-x"', "must not be in a config file"),
        ('modle = "x"', "unknown setting"),
    ],
)
def test_bad_config_is_a_clear_error(monkeypatch, tmp_path, content, match):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "recreate.toml").write_text(content)
    with pytest.raises(ConfigError, match=match):
        load_settings()
