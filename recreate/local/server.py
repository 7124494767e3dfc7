"""A local model server as a managed subprocess: started, health-checked, found again, stopped.

Each server writes a state file under `RECREATE_HOME/models/servers/` (so `recreate model status` in
another process finds it) and logs to `RECREATE_HOME/logs/`. A server started for a run dies with the
process that started it (the kernel sends it SIGKILL when its parent goes, `PR_SET_PDEATHSIG`), so a
killed run leaves no server behind; `recreate model serve` starts one that outlives the command.
The death signal fires when the *thread* that forked the child ends, so every server is forked by one
thread that lives as long as this process (`_SPAWNER`), whichever thread asks for it.

A server's environment is an allow-list (`server_env`): locale, paths, thread and accelerator settings,
model caches. Nothing else of ours reaches it (no API keys, tokens, connection strings), and nothing
secret-looking even where a prefix is allowed.

Each server requires a key of its own, made when it starts and kept in its state file (`keys`).
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import json
import os
import signal
import socket
import subprocess
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import httpx

from recreate.errors import Arg
from recreate.local.embedded import LocalModelArgumentError, LocalModelError
from recreate.local.keys import KEY_ENV, auth_headers, bearer, forget, new_key, note_home, register
from recreate.pools import ThreadPool

PR_SET_PDEATHSIG = 1
LOG_TAIL_LINES = 15
# what a model server may inherit from us
ENV_NAMES = frozenset(
    {"PATH", "HOME", "USER", "LOGNAME", "LANG", "LANGUAGE", "TZ", "TMPDIR", "TEMP", "TMP", "LD_LIBRARY_PATH",
     "VIRTUAL_ENV", "XDG_CACHE_HOME", "HF_HOME", "HF_HUB_CACHE", "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE",
     "TORCH_HOME", "TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR", "CUDA_VISIBLE_DEVICES"}
)  # fmt: skip
ENV_PREFIXES = ("LC_", "OMP_", "MKL_", "OPENBLAS_", "KMP_", "GOMP_", "GGML_", "LLAMA_", "VLLM_", "NVIDIA_")
_SECRET_WORDS = ("KEY", "TOKEN", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL", "AUTH", "PAT", "URL", "DSN")
# the one thread that forks servers: PR_SET_PDEATHSIG follows the forking thread, and this one never ends
_SPAWNER = ThreadPool(1, "recreate-server-spawner")


@dataclass
class ServerInfo:
    """What a running server is, as written to its state file."""

    engine: str
    model: str  # the name the server answers to (`model` in requests)
    base_url: str  # http://127.0.0.1:PORT/v1
    pid: int
    log: str
    tool_calls: bool  # does the served chat template support tool calls? (else: text actions)
    started: float = field(default_factory=time.time)
    adapters: list[str] = field(default_factory=list)  # LoRA adapters loaded, in order (policy versions)
    api_key: str = field(default="", repr=False)  # the key it requires: state file only, never shown

    def public(self) -> dict[str, Any]:
        """What may be shown (status, logs): all but the key."""
        return {k: v for k, v in asdict(self).items() if k != "api_key"}

    @property
    def port(self) -> int:
        return int(urlparse(self.base_url).port or 80)

    @property
    def spec(self) -> str:
        """The model spec that reaches this server (`make_chat_model` syntax)."""
        return f"{self.model}@{self.base_url}"


def servers_dir(home: Path) -> Path:
    return Path(home) / "models" / "servers"


def state_path(home: Path, engine: str, port: int) -> Path:
    return servers_dir(home) / f"{engine}-{port}.json"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def port_in_use(host: str, port: int) -> bool:
    """Does a socket already listen on host:port? (A server's own bind would fail: the one answering
    there would pass for it.)"""
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as servers bind: TIME_WAIT is no owner
        try:
            s.bind((host, port))
        except OSError as exc:
            return exc.errno == errno.EADDRINUSE
    return False


def is_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie (exited, not yet reaped by its parent) is not a server
        return Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1][0] != "Z"
    except (OSError, IndexError):
        return True


def healthy(base_url: str, timeout: float = 2.0, *, key: str | None = None) -> bool:
    """Does the server list its models? `key`: the server's own (default: found by its URL)."""
    headers = bearer(key) if key else auth_headers(base_url)
    try:
        reply = httpx.get(f"{base_url}/models", headers=headers, timeout=timeout)
    except httpx.HTTPError:
        return False
    return reply.status_code == 200


def running_servers(home: Path, *, prune: bool = True) -> list[ServerInfo]:
    """Servers whose process is alive; state files of dead or damaged ones are removed (`prune`)."""
    found = []
    for path in sorted(servers_dir(home).glob("*.json")):
        try:
            info = ServerInfo(**json.loads(path.read_text(encoding="utf-8")))
        except (OSError, ValueError, TypeError):
            info = None
        if info is not None and is_alive(info.pid):
            found.append(info)
        elif prune:
            path.unlink(missing_ok=True)
    return found


def server_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The allow-listed part of our environment, plus `extra` (what the engine needs, set by us)."""
    allowed = {
        name: value
        for name, value in os.environ.items()
        if (name in ENV_NAMES or name.startswith(ENV_PREFIXES)) and not _is_secret(name)
    }
    return allowed | (extra or {})


def _die_with(owner: int) -> None:
    """In the child, before exec: SIGKILL when the forking thread (the spawner) ends; and at once if
    `owner` is already gone (it died between the fork and this call)."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != owner:
        os._exit(1)


def log_tail(path: str | Path, lines: int = LOG_TAIL_LINES) -> str:
    try:
        text = Path(path).read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return ""
    return "\n".join(text[-lines:])


class LocalServer:
    """Start `command` (a server that answers the OpenAI API at `base_url`) and wait until it is ready.

    `detach=False` ties the server's life to this process (see the module doc); use it as a context
    manager or call `stop()`. Its environment is `server_env(env)`: no API keys or other secrets. It
    requires `key` (default: a new one)."""

    def __init__(
        self,
        command: list[str],
        *,
        engine: str,
        model: str,
        port: int,
        home: Path,
        tool_calls: bool,
        host: str = "127.0.0.1",
        detach: bool = False,
        ready_timeout_s: float = 600.0,
        env: dict[str, str] | None = None,
        key: str | None = None,
    ):
        if isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65535:
            raise LocalModelArgumentError(
                f"port {port!r} is not a port: pass {{port}} from 1 to 65535", port=Arg("port")
            )
        self.command, self.home, self.detach = command, Path(home), detach
        self.ready_timeout_s = ready_timeout_s
        key = key or new_key()
        self.extra_env = {**(env or {}), KEY_ENV: key}
        log_dir = self.home / "logs"
        log_dir.mkdir(parents=True, exist_ok=True)
        log = log_dir / f"model-{engine}-{port}.log"
        self.info = ServerInfo(engine, model, f"http://{host}:{port}/v1", 0, str(log.absolute()), tool_calls)
        self.info.api_key = key
        self.process: subprocess.Popen[bytes] | None = None
        self.state_file = state_path(self.home, engine, port)

    def start(self) -> ServerInfo:
        host = urlparse(self.info.base_url).hostname or "127.0.0.1"
        if port_in_use(host, self.info.port):
            raise LocalModelArgumentError(
                f"port {self.info.port} on {host} is already in use (another server?): choose another "
                "{port}, or leave {port} out for a free one",
                port=Arg("port"),
            )
        owner = os.getpid()
        with open(self.info.log, "ab") as log:
            self.process = _SPAWNER.submit(
                subprocess.Popen,
                self.command,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=server_env(self.extra_env),
                start_new_session=True,  # a Ctrl-C in the terminal reaches us, and we stop it in order
                preexec_fn=None if self.detach else lambda: _die_with(owner),
            ).result()
        self.info.pid = self.process.pid
        try:
            self._wait_ready()
        except BaseException:
            self.stop()
            raise
        self.state_file.parent.mkdir(parents=True, exist_ok=True)
        self.save()
        register(self.info.base_url, self.info.api_key)
        note_home(self.home)
        return self.info

    def save(self) -> None:
        tmp = self.state_file.with_suffix(".tmp")
        tmp.unlink(missing_ok=True)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)  # it holds the server's key
        with os.fdopen(fd, "w", encoding="utf-8") as file:
            file.write(json.dumps(asdict(self.info)))
        tmp.replace(self.state_file)

    def _wait_ready(self) -> None:
        assert self.process is not None
        deadline = time.monotonic() + self.ready_timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise LocalModelError(
                    f"the {self.info.engine} server exited with code {self.process.returncode} before it was "
                    f"ready; log {self.info.log}:\n{log_tail(self.info.log)}"
                )
            if healthy(self.info.base_url, timeout=1.0, key=self.info.api_key):
                return
            time.sleep(0.25)
        raise LocalModelError(
            f"the {self.info.engine} server did not answer at {self.info.base_url} within "
            f"{self.ready_timeout_s:.0f} s; log {self.info.log}:\n{log_tail(self.info.log)}"
        )

    def stop(self, grace_s: float = 5.0) -> None:
        self.state_file.unlink(missing_ok=True)
        forget(self.info.base_url, self.info.api_key)
        if self.process is None or self.process.poll() is not None:
            return
        stop_process(self.process.pid, grace_s)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(timeout=grace_s)

    def __enter__(self) -> ServerInfo:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def stop_process(pid: int, grace_s: float = 5.0) -> None:
    """SIGTERM the server's process group, then SIGKILL what is left (llama.cpp ignores SIGTERM)."""
    for sig, wait in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 2.0)):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, sig)
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline and is_alive(pid):
            time.sleep(0.1)
        if not is_alive(pid):
            return


def stop_server(home: Path, info: ServerInfo) -> None:
    stop_process(info.pid)
    state_path(home, info.engine, info.port).unlink(missing_ok=True)


def _is_secret(name: str) -> bool:
    parts = name.upper().replace("-", "_").split("_")
    return any(word in part for part in parts for word in _SECRET_WORDS if part != "PATH")
