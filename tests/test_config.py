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


@pytest.mark.parametrize(
    ("where", "match"),
    [
        ("file", r"^setting max_retries from recreate\.toml: .*integer.*\(got 'six'\); fix the value$"),
        ("env", r"^setting max_retries from environment variable RECREATE_MAX_RETRIES: .*\(got 'six'\)"),
        ("argument", r"^setting max_retries from argument: .*\(got 'six'\)"),
    ],
)
def test_a_bad_value_is_one_line_naming_where_it_came_from(monkeypatch, tmp_path, where, match):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("RECREATE_MAX_RETRIES", raising=False)
    kwargs = {}
    if where == "file":
        (tmp_path / "recreate.toml").write_text('[recreate]\nmax_retries = "six"\n')
    elif where == "env":
        monkeypatch.setenv("RECREATE_MAX_RETRIES", "six")
    else:
        kwargs["max_retries"] = "six"
    with pytest.raises(ConfigError, match=match) as caught:
        load_settings(**kwargs)
    assert "\n" not in str(caught.value)


def test_a_value_of_the_wrong_shape_names_the_setting(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "recreate.toml").write_text('[recreate]\nprices = "cheap"\n')
    with pytest.raises(ConfigError, match=r"^setting prices from recreate\.toml: .*dictionary"):
        load_settings()


def test_only_the_documented_variables_are_read(monkeypatch, tmp_path):
    """HOME, MODEL or SANDBOX in the environment are not ours; RECREATE_* and OPENAI_BASE_URL are."""
    monkeypatch.chdir(tmp_path)
    for name in ("RECREATE_HOME", "RECREATE_MODEL", "RECREATE_SANDBOX", "OPENAI_BASE_URL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "user"))
    monkeypatch.setenv("MODEL", "not-ours")
    monkeypatch.setenv("SANDBOX", "local")
    s = load_settings()
    assert (s.home, s.model, s.sandbox) == (Path(".recreate"), None, "bwrap")
    monkeypatch.setenv("RECREATE_REQUEST_TIMEOUT_S", "5")
    monkeypatch.setenv("RECREATE_HOME", "~/state")
    monkeypatch.setenv("RECREATE_SANDBOX", "")  # empty: unset
    s = load_settings(config_file=tmp_path / "absent.toml")
    assert (s.request_timeout_s, s.home, s.sandbox) == (5.0, tmp_path / "user" / "state", "bwrap")


def test_file_values_do_not_leak_into_a_later_load(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("RECREATE_SANDBOX", raising=False)
    (tmp_path / "a.toml").write_text('sandbox = "local"\n')
    assert load_settings(config_file=tmp_path / "a.toml").sandbox == "local"
    assert load_settings(config_file=tmp_path / "none.toml").sandbox == "bwrap"


def test_a_structured_setting_that_is_not_json_is_one_line(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("RECREATE_PRICES", "notjson")
    with pytest.raises(ConfigError) as caught:
        load_settings()
    message = str(caught.value)
    assert "RECREATE_PRICES" in message and "JSON" in message and "\n" not in message


def test_a_bad_value_that_looks_like_a_key_is_not_echoed(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("RECREATE_MAX_RETRIES", "sk-" + "S" * 24)
    with pytest.raises(ConfigError) as caught:
        load_settings()
    assert "RECREATE_MAX_RETRIES" in str(caught.value) and "SSSSSSSS" not in str(caught.value)


@pytest.mark.parametrize(
    ("variable", "value", "said"),
    [
        ("RECREATE_EMBEDDING", "nosuch", "'minilm' or 'hash'"),  # was taken: the index then missed runs
        ("RECREATE_SANDBOX", "nonsense", "'bwrap', 'docker' or 'local'"),  # was said after a server started
        ("RECREATE_MAX_RETRIES", "-4", "greater than or equal to 0"),  # was a pydantic wall at the first call
        ("RECREATE_REQUEST_TIMEOUT_S", "0", "greater than 0"),
        ("RECREATE_REQUEST_TIMEOUT_S", "-1", "greater than 0"),
        ("RECREATE_REQUEST_TIMEOUT_S", "nan", "finite"),
        ("RECREATE_REQUEST_TIMEOUT_S", "inf", "finite"),
    ],
)
def test_a_setting_out_of_range_is_refused_at_load_naming_the_variable(
    monkeypatch, tmp_path, variable, value, said
):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv(variable, value)
    with pytest.raises(ConfigError) as caught:
        load_settings()
    message = str(caught.value)
    assert message.startswith(
        f"setting {variable.removeprefix('RECREATE_').lower()} from environment variable "
    )
    assert variable in message and said in message and f"(got '{value}')" in message and "\n" not in message


def test_the_sandboxes_a_setting_accepts_are_the_backends() -> None:
    import typing

    from recreate.config import Settings
    from recreate.sandbox import BACKENDS

    assert typing.get_args(Settings.model_fields["sandbox"].annotation) == BACKENDS


def test_the_embeddings_a_setting_accepts_are_the_ones_the_store_makes(monkeypatch, tmp_path):
    from recreate.experience.embeddings import EMBEDDING_NAMES, make_embedding

    monkeypatch.chdir(tmp_path)
    for name in EMBEDDING_NAMES:
        monkeypatch.setenv("RECREATE_EMBEDDING", name)
        assert make_embedding(load_settings().embedding) is not None
    monkeypatch.setenv("RECREATE_MAX_RETRIES", "0")  # no retries: a valid choice
    assert load_settings().max_retries == 0


@pytest.mark.parametrize(
    ("content", "said"),
    [
        (b"\xff\xfe\x00binary\x89PNG", "not UTF-8 text"),  # was a bare "'utf-8' codec can't decode ..."
        (b"recreate = 5\n", "[recreate] must be a table"),
    ],
)
def test_a_config_file_that_is_not_toml_text_is_one_line_naming_it(monkeypatch, tmp_path, content, said):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "recreate.toml").write_bytes(content)
    with pytest.raises(ConfigError) as caught:
        load_settings()
    message = str(caught.value)
    assert message.startswith("recreate.toml: ") and said in message and "\n" not in message
    assert message.endswith("fix the file or remove it")
