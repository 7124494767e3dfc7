"""Keys of the local model servers: each server we start requires one of its own.

Binding 127.0.0.1 keeps other machines out, not the web pages in the user's browser: without a key any
page could POST completions to a local server, and one that rebinds its DNS name to 127.0.0.1 could read
the answers or (vLLM) load adapters. So `LocalServer` makes a key per start (`new_key`), hands it to the
server in its environment (KEY_ENV: the llama.cpp wrapper and vLLM's guard read it) and keeps it in the
server's state file, readable by its user only. Our clients find it by the server's address
(`server_key`: host and port as the server bound them, so a listener on [::1]:PORT or a name that
resolves elsewhere is never sent it): servers this process started, then the state files under the
home (RECREATE_HOME) and the homes this process or its parent named (`note_home`: local Ray workers
inherit them). Any other endpoint gets OPENAI_API_KEY, as before (`endpoint_key`, `auth_headers`).
`recreate model key` prints a key for clients other than ours; a key of the user's own, kept across
restarts for such clients, comes from a file (`read_key_file`: `--key-file` of `recreate model serve`
and `tapo serve`).
"""

from __future__ import annotations

import os
import re
import secrets
import stat
import threading
from pathlib import Path
from urllib.parse import urlparse

from recreate.errors import Arg, ArgumentError

KEY_ENV = "RECREATE_SERVER_KEY"  # how a server gets its key (a name the engines themselves do not read)
HOMES_ENV = "RECREATE_SERVER_HOMES"  # homes of our servers, for the processes we start (paths, no key)
LOOPBACK = ("127.0.0.1", "localhost", "::1")
_USABLE_KEY = re.compile(r"[!-~]{16,4096}")  # printable ASCII, no blanks: fits a header as it is

_LOCK = threading.Lock()
_KEYS: dict[tuple[str, int], str] = {}  # (host, port) -> key of the servers this process started


def new_key() -> str:
    return secrets.token_urlsafe(32)


def read_key_file(path: Path) -> str:
    """The key written in `path` (its only line), for a server whose clients keep their key across
    restarts. The file must be its user's alone, as ssh asks of a private key."""
    path = Path(path)
    make = "python3 -c 'import secrets; print(secrets.token_urlsafe(32))' > {f} && chmod 600 {f}"
    try:
        mode, text = path.stat().st_mode, path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else type(exc).__name__
        raise ArgumentError(
            f"{{key_file}}: {path} cannot be read ({reason}); write a key into it: {make.format(f=path)}",
            key_file=Arg("key_file"),
        ) from None
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise ArgumentError(
            f"{{key_file}}: {path} can be read by other users (mode {stat.filemode(mode)}): chmod 600 {path}",
            key_file=Arg("key_file"),
        )
    key = text.strip()
    if not _USABLE_KEY.fullmatch(key):
        raise ArgumentError(
            f"{{key_file}}: {path} holds no usable key (one line of 16 or more printable characters, no "
            f"blanks); write one: {make.format(f=path)}",
            key_file=Arg("key_file"),
        )
    return key


def address(base_url: str) -> tuple[str, int] | None:
    """(host, port) of a plain-http loopback URL, else None (no key of ours is ever sent there)."""
    url = urlparse(base_url)
    host = (url.hostname or "").lower()
    if url.scheme != "http" or host not in LOOPBACK:
        return None
    try:
        return host, url.port or 80
    except ValueError:
        return None


def is_loopback(base_url: str) -> bool:
    return address(base_url) is not None


def register(base_url: str, key: str) -> None:
    """A server this process started answers at `base_url` with `key`."""
    where = address(base_url)
    if where is not None:
        with _LOCK:
            _KEYS[where] = key


def forget(base_url: str, key: str) -> None:
    where = address(base_url)
    with _LOCK:
        if where is not None and _KEYS.get(where) == key:
            _KEYS.pop(where, None)


def note_home(home: Path) -> None:
    """Name `home` (where a server of ours keeps its state file) to the processes we start from now on:
    a local Ray's workers build their chat models there and find the key by it."""
    path = str(Path(home).absolute())
    with _LOCK:
        listed = [p for p in os.environ.get(HOMES_ENV, "").split(os.pathsep) if p]
        if path not in listed:
            os.environ[HOMES_ENV] = os.pathsep.join([*listed, path])


def server_key(base_url: str, home: Path | None = None) -> str | None:
    """The key of our server at `base_url`: one this process started, else one whose state file is
    under `home` (default: RECREATE_HOME and the homes in RECREATE_SERVER_HOMES); None for any other
    endpoint. State files are only read here (a server of another machine's process is not ours to
    judge dead)."""
    where = address(base_url)
    if where is None:
        return None
    with _LOCK:
        if where in _KEYS:
            return _KEYS[where]
    for folder in [home] if home is not None else _homes():
        key = _state_file_key(Path(folder), where)
        if key:
            return key
    return None


def endpoint_key(base_url: str) -> str | None:
    """The key to send to `base_url`: our server's own, else OPENAI_API_KEY (as the clients do)."""
    return server_key(base_url) or os.environ.get("OPENAI_API_KEY") or None


def auth_headers(base_url: str) -> dict[str, str]:
    return bearer(endpoint_key(base_url))


def bearer(key: str | None) -> dict[str, str]:
    """The header that gives `key` (none without one)."""
    return {"Authorization": f"Bearer {key}"} if key else {}


def _homes() -> list[Path]:
    from recreate.config import ConfigError, load_settings

    listed = [Path(p) for p in os.environ.get(HOMES_ENV, "").split(os.pathsep) if p]
    try:
        return [load_settings().home, *listed]
    except ConfigError:
        return listed


def _state_file_key(home: Path, where: tuple[str, int]) -> str | None:
    from recreate.local.server import running_servers

    for info in running_servers(home, prune=False):
        bound = urlparse(info.base_url)
        if ((bound.hostname or "").lower(), bound.port) == where:
            return info.api_key or None
    return None
