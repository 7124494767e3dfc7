"""Keep secrets out of logs, trajectories and sandboxes.

A secret is the value of any environment variable whose name looks like one (…_API_KEY, …_TOKEN,
…SECRET…, …PASSWORD…; not counts such as MAX_TOKENS nor TOKENIZER names), a key-shaped token (OpenAI,
Slack, AWS, GitHub, GitLab, Hugging Face, Google), or the password in a URL (scheme://user:PASSWORD@host).
`redact` replaces such values in text, `redact_data` in every string of a JSON-like value;
`SecretFilter` does it for log records;
`safe_env` drops such variables from an environment passed on to a child process.
"""

from __future__ import annotations

import logging
import os
import re
from typing import Any

# TOKENS and TOKENIZER name counts and tokenizers, not credentials: masking "100000" (MAX_TOKENS)
# everywhere would corrupt numbers
_SECRET_NAME = re.compile(r"API_?KEY|TOKEN(?!S|IZER)|SECRET|PASSWORD|PASSWD|CREDENTIAL", re.IGNORECASE)
_KEY_SHAPES = re.compile(
    r"\b(sk-[A-Za-z0-9_\-]{16,}|xox[abp]-[A-Za-z0-9\-]{10,}|AKIA[0-9A-Z]{16}"
    r"|gh[pousr]_[A-Za-z0-9]{36,}|github_pat_[A-Za-z0-9_]{22,}|glpat-[A-Za-z0-9_\-]{20,}"
    r"|hf_[A-Za-z0-9]{30,}|AIza[0-9A-Za-z_\-]{35})\b"
)
# the password of a URL's userinfo (scheme://user:password@host): kept in no log whatever its env var
_URL_PASSWORD = re.compile(r"(?P<head>\b[A-Za-z][A-Za-z0-9+.\-]*://[^:/@\s]*):[^@/\s]+@")
MASK = "***"


def is_secret_name(name: str) -> bool:
    return bool(_SECRET_NAME.search(name))


def secret_values() -> list[str]:
    vals = {v for k, v in os.environ.items() if is_secret_name(k) and len(v) >= 6}
    return sorted(vals, key=len, reverse=True)  # longest first so a key's prefix never leaks a tail


def redact(text: str, values: list[str] | None = None) -> str:
    """`text` with every secret masked (`values`: the environment's, when already looked up)."""
    for value in secret_values() if values is None else values:
        text = text.replace(value, MASK)
    text = _URL_PASSWORD.sub(rf"\g<head>:{MASK}@", text)
    return _KEY_SHAPES.sub(MASK, text)


def redact_data(value: Any, values: list[str] | None = None) -> Any:
    """`value` (JSON-like: dicts, lists, strings, numbers) with every string, keys too, redacted. Unlike
    redacting its JSON text, this finds a secret that JSON would escape (a quote, a backslash) and never
    turns a number equal to a secret into invalid JSON."""
    values = secret_values() if values is None else values
    if isinstance(value, str):
        return redact(value, values)
    if isinstance(value, dict):
        return {redact_data(k, values): redact_data(v, values) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [redact_data(item, values) for item in value]
    return value


def safe_env(env: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in env.items() if not is_secret_name(k)}


class SecretFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        record.msg = redact(record.getMessage())
        record.args = None
        return True


def install_log_redaction(logger_name: str = "") -> None:
    """Redact secrets from every record that reaches the handlers of `logger_name` (root by default)."""
    logger = logging.getLogger(logger_name)
    for handler in logger.handlers or [logging.lastResort]:
        if handler and not any(isinstance(f, SecretFilter) for f in handler.filters):
            handler.addFilter(SecretFilter())
