"""Secrets never survive `redact`: env-named values, key shapes, and the password in a URL."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from recreate.redact import MASK, redact

REPO = Path(__file__).resolve().parents[1]

_PASSWORD = st.text(
    alphabet=st.characters(blacklist_characters="@/:", blacklist_categories=("Cs",)), min_size=1
).filter(lambda p: not any(c.isspace() for c in p))  # whitespace ends a URL


def test_url_password_is_masked_and_the_rest_kept():
    assert redact("http://user:sekritpw@h:8000/v1") == f"http://user:{MASK}@h:8000/v1"
    assert redact("see ftp://bob:hunter2secretpw@host/x and more") == f"see ftp://bob:{MASK}@host/x and more"
    assert redact("http://127.0.0.1:8000/v1") == "http://127.0.0.1:8000/v1"  # a port is not a password
    assert redact("http://user@h/v1") == "http://user@h/v1"


@given(user=st.from_regex(r"[a-z]{0,8}", fullmatch=True), password=_PASSWORD)
def test_no_url_password_survives(user, password):
    text = f"error: http://{user}:{password}@example.org:9/v1 lists no model"
    out = redact(text)
    assert f":{password}@" not in out and "example.org:9/v1" in out


def test_env_named_secret_is_masked(monkeypatch):
    monkeypatch.setenv("MY_SERVICE_TOKEN", "tok-1234567890")
    assert redact("token tok-1234567890 here") == f"token {MASK} here"


def test_cli_error_line_masks_a_url_password(tmp_path):
    url = "http://user:hunter2secretpw@127.0.0.1:9/v1"
    done = subprocess.run(
        [sys.executable, "-m", "recreate", "eval", "--scaffold", "scaffolds/minimal", "--domain", "math",
         "--data", "examples/arithmetic/tasks.jsonl", "--limit", "1", "--model", f"m@{url}",
         "--home", str(tmp_path)],
        capture_output=True, text=True, timeout=120, cwd=REPO,
    )  # fmt: skip
    assert done.returncode != 0 and f"user:{MASK}@127.0.0.1:9" in done.stderr  # the endpoint is named...
    assert "hunter2secretpw" not in done.stdout + done.stderr  # ...without its password


def test_counts_named_like_secrets_are_not_secrets(monkeypatch):
    """MAX_TOKENS=131072 masked every 131072 (token ids, counts), breaking numbers in redacted JSON."""
    from recreate.redact import is_secret_name

    monkeypatch.setenv("OPENAI_MAX_TOKENS", "131072")
    monkeypatch.setenv("HF_TOKENIZER", "org/tokenizer-name")
    assert not is_secret_name("OPENAI_MAX_TOKENS") and not is_secret_name("HF_TOKENIZER")
    assert is_secret_name("HF_TOKEN") and is_secret_name("GITHUB_TOKEN") and is_secret_name("TOKEN_SECRET")
    assert is_secret_name("MAX_TOKENS_API_KEY") and is_secret_name("TOKENIZER_PASSWORD")
    assert (
        redact('{"ids": [131072], "t": "org/tokenizer-name"}')
        == '{"ids": [131072], "t": "org/tokenizer-name"}'
    )


def test_redact_data_masks_strings_and_keys_but_not_numbers(monkeypatch):
    from recreate.redact import redact_data

    monkeypatch.setenv("SERVICE_PASSWORD", '424242"q')
    data = {"ids": [424242], 'k424242"q': ['pin 424242"q', 1.5, None, True]}
    assert redact_data(data) == {"ids": [424242], f"k{MASK}": [f"pin {MASK}", 1.5, None, True]}


def test_common_key_shapes_are_masked():
    keys = ["ghp_" + "a1" * 18, "github_pat_" + "B2" * 20, "glpat-" + "c3" * 10, "hf_" + "D4" * 17]
    out = redact("keys: " + " ".join(keys))
    assert not [key for key in keys if key in out] and out.count(MASK) == len(keys)
    assert redact("hf_hub_download and ghp_short") == "hf_hub_download and ghp_short"
