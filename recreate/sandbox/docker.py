"""`docker`: one container per session through the Docker Engine API (Docker, or Podman's API service).

The container's main process is a command server attached to our process (`docker_channel`): commands
go over the attach stream instead of one engine exec each. If we die, the connection drops, the server
exits and the engine removes the container (`auto_remove`). Containers are labelled with their owner
(host, pid, process start time); `reap_orphans` removes ours whose owner is gone, and never touches
anything else.
"""

from __future__ import annotations

import contextlib
import io
import logging
import posixpath
import shlex
import tarfile
import time
import uuid
from pathlib import Path
from typing import IO, Any

from recreate.sandbox.base import ClosingSession, Result, SandboxError, SandboxSpec
from recreate.sandbox.docker_channel import PID_FILE, SERVER, CommandChannel, read_frames, stream_socket
from recreate.sandbox.process import CappedOutput, make_result, owner_alive, owner_label
from recreate.sandbox.shell import MARKER, sandbox_env, shell_argv
from recreate.sandbox.spares import SpareKeeping
from recreate.sandbox.workspace import as_bytes, workspace_parts

LABEL = "recreate.sandbox"
OWNER_LABEL = "recreate.owner"
log = logging.getLogger(__name__)
INSIDE_ID = 65534
_STATE = "/tmp/.recreate-shell"
_PID_FILE = "/tmp/.recreate-pid-"  # + a per-command token
_MB = 1024 * 1024
_DRAIN_SECONDS = 5.0
# Kill a timed-out command ($1: its pid file, $2: its marker variable) and all it started: freeze its
# process tree top-down (nothing forks away), and with it every process carrying its marker and every
# orphan (parent: the container's init) started since it began, e.g. a setsid + double fork with a
# cleared environment; then kill them all.
_KILL_TREE = r"""
stop() {
    kill -STOP "$1" 2>/dev/null; all="$all $1"
    for c in $(cat /proc/"$1"/task/*/children 2>/dev/null); do stop "$c"; done
}
mark=$2; all=""; pid=$(cat "$1") || exit 0
since=$(cat /proc/"$pid"/stat 2>/dev/null) && set -- ${since##*\) } && since=${20}
stop "$pid"
for dir in /proc/[0-9]*; do
    p=${dir#/proc/}
    if grep -qF "$mark" "$dir/environ" 2>/dev/null; then stop "$p"; continue; fi
    stat=$(cat "$dir/stat" 2>/dev/null) || continue
    set -- ${stat##*\) }
    [ "$2" = 1 ] && [ -n "$since" ] || continue  # an orphan; born since the command (in its clock tick,
    if [ "${20}" -gt "$since" ] || { [ "${20}" = "$since" ] && [ "$p" -ge "$pid" ]; }; then  # after it)
        stop "$p"
    fi
done
kill -KILL $all 2>/dev/null
"""
# Exit 0 when $1 (a path that may not exist yet) stays inside the workspace $2 with no symlink on the
# way: its existing part must resolve to itself. The answer is the exit code, which survives a lost stream.
_RESOLVE = r"""
p=$1
while [ ! -e "$p" ] && [ ! -L "$p" ]; do p=$(dirname "$p"); done
[ "$(readlink -f "$p")" = "$p" ] || exit 1
case "$p" in "$2"|"$2"/*) exit 0;; esac
exit 1
"""


def reap_orphans(client: Any) -> list[str]:
    """Remove containers that our sandboxes started whose owning process has died. Returns their ids."""
    removed = []
    for container in client.api.containers(all=True, filters={"label": LABEL}):
        labels = container.get("Labels") or {}
        if OWNER_LABEL in labels and not owner_alive(labels[OWNER_LABEL]):
            with contextlib.suppress(Exception):
                client.api.remove_container(container["Id"], force=True)
                removed.append(container["Id"])
    return removed


class DockerSession(ClosingSession):
    backend = "docker"

    def __init__(self, client: Any, spec: SandboxSpec, image: str):
        self.client, self.api, self.spec = client, client.api, spec
        self.workdir = spec.workdir
        self.closed = False
        self.id: str | None = None
        self.channel: CommandChannel | None = None
        try:
            self._create(image)
        except BaseException:
            self.close()
            raise

    def _create(self, image: str) -> None:
        spec = self.spec
        host_config = self.api.create_host_config(
            network_mode="bridge" if spec.network else "none",
            mem_limit=f"{spec.memory_mb}m",
            memswap_limit=f"{spec.memory_mb}m",
            pids_limit=spec.max_processes,
            nano_cpus=int(spec.cpus * 1e9),
            auto_remove=True,
            log_config={"Type": "none"},  # output goes to us over the attach stream, never to a log file
            init=True,  # an init process reaps the orphans that killed commands leave behind
            cap_drop=["ALL"],
            cap_add=["SETUID", "SETGID"],  # only for the server to drop each command to INSIDE_ID
            security_opt=["no-new-privileges"],
            # the workspace is a tmpfs too: its size is the session's disk limit (a container's own
            # layer has no quota without an xfs project quota)
            tmpfs={"/tmp": f"size={spec.max_file_mb}m,mode=1777", spec.workdir: f"size={spec.disk_mb}m"},
        )
        labels = {**spec.labels, LABEL: "1", OWNER_LABEL: owner_label()}
        created = self.api.create_container(
            image,
            ["/bin/sh", "-c", SERVER],
            stdin_open=True,
            detach=False,
            user="0:0",
            working_dir=spec.workdir,
            labels=labels,
            host_config=host_config,
            network_disabled=not spec.network,
        )
        self.id = created["Id"]
        self._put_archive("/", _tar_dirs(spec.workdir))
        attached = self.api.attach_socket(self.id, params={"stdin": 1, "stdout": 1, "stderr": 1, "stream": 1})
        self.channel = CommandChannel(*stream_socket(attached))
        self.api.start(self.id)
        # the engine mounts the workspace tmpfs as root's; a "." entry hands it to the sandbox user
        self._put_archive(spec.workdir, _tar_dirs("."))
        self.channel.wait_ready()

    def alive(self) -> bool:
        """Whether the container still runs (a spare that waited is checked before it is handed out):
        the idle command channel has nothing to read, or without a channel the engine says so."""
        if self.closed or self.id is None:
            return False
        if self.channel is not None and self.channel.usable:
            return self.channel.idle_alive()
        try:
            return bool(self.api.inspect_container(self.id)["State"]["Running"])
        except Exception:  # gone (404), or an engine we cannot reach: not worth handing out
            return False

    def run(self, cmd: str, *, timeout: float = 60.0, env: dict[str, str] | None = None) -> Result:
        self._check_open()
        started = time.perf_counter()
        token = uuid.uuid4().hex
        full_env = {**sandbox_env(self.workdir, self.spec.env, env), MARKER: token}
        marker = f"{MARKER}={token}"  # what the kill script looks for in the processes' environments
        inner = shell_argv(cmd, _STATE if self.spec.persistent else None, env)
        limits = f"ulimit -t {self.spec.cpu_seconds} -f {self.spec.max_file_mb * 2048} 2>/dev/null"
        out, err = CappedOutput(self.spec.output_limit), CappedOutput(self.spec.output_limit)
        if self.channel is not None and self.channel.usable:
            assignments = [f"{name}={value}" for name, value in full_env.items()]
            command = shlex.join(["env", "-i", *assignments, *inner])
            script = f"cd {shlex.quote(self.workdir)} || exit 126\n{limits}\nexec {command}\n"
            code, finished = self.channel.run(script, out, err, started + timeout)
            if not finished:
                self._kill_command(PID_FILE, marker)
                self.channel.finish(_DRAIN_SECONDS)
            return make_result(out, err, code, started, timed_out=not finished)
        return self._run_exec(inner, full_env, marker, limits, out, err, started, timeout)

    def _run_exec(
        self,
        inner: list[str],
        full_env: dict[str, str],
        marker: str,
        limits: str,
        out: CappedOutput,
        err: CappedOutput,
        started: float,
        timeout: float,
    ) -> Result:
        """One engine exec per command: for images whose server cannot drop privileges."""
        pid_file = f"{_PID_FILE}{uuid.uuid4().hex}"
        wrapper = f'echo $$ >{pid_file}; {limits}; exec "$@"'
        try:
            exec_id = self.api.exec_create(
                self.id,
                ["/bin/sh", "-c", wrapper, "sh", *inner],
                environment=full_env,
                workdir=self.workdir,
                user=f"{INSIDE_ID}:{INSIDE_ID}",
            )["Id"]
            stream = self.api.exec_start(exec_id, socket=True)
        except Exception as exc:  # API errors (docker.errors) or a lost connection (requests)
            raise SandboxError(f"the container of this session is not usable any more: {exc}") from exc
        raw, early = stream_socket(stream)
        timed_out = not read_frames(raw, {1: out, 2: err}, started + timeout, early)
        if timed_out:
            self._kill_command(pid_file, marker)
            # Let the exec end on its own: an exec stream cut while running leaves Podman waiting ~5 s
            # on its exit file at the next kill/remove.
            read_frames(raw, {}, time.perf_counter() + _DRAIN_SECONDS)
        stream.close()
        if timed_out:
            return make_result(out, err, None, started, timed_out=True)
        return make_result(out, err, self._exit_code(exec_id), started, timed_out=False)

    def put(self, path: str, data: bytes | str | IO[bytes] | Path) -> None:
        self._check_open()
        parts = workspace_parts(path, self.workdir)
        self._check_inside(parts)
        content, mode = as_bytes(data)
        buffer = io.BytesIO()
        with tarfile.open(fileobj=buffer, mode="w") as tar:
            for depth in range(1, len(parts)):
                tar.addfile(_tar_info("/".join(parts[:depth]), tarfile.DIRTYPE, 0o755))
            info = _tar_info("/".join(parts), tarfile.REGTYPE, mode)
            info.size = len(content)
            tar.addfile(info, io.BytesIO(content))
        self._put_archive(self.workdir, buffer.getvalue())

    def get(self, path: str) -> bytes:
        self._check_open()
        parts = workspace_parts(path, self.workdir)
        self._check_inside(parts)
        target = posixpath.join(self.workdir, *parts)
        try:
            chunks, _ = self.api.get_archive(self.id, target)
        except Exception as exc:
            raise SandboxError(f"cannot read {'/'.join(parts)!r} from the workspace: {exc}") from exc
        limit = self.spec.max_file_mb * _MB
        data = b"".join(chunks)
        with tarfile.open(fileobj=io.BytesIO(data)) as tar:
            member = tar.next()
            if member is None or not member.isfile():
                raise SandboxError(f"{'/'.join(parts)!r} is not a regular file")
            if member.size > limit:
                raise SandboxError(f"{'/'.join(parts)!r} is {member.size} bytes, over the {limit} byte limit")
            extracted = tar.extractfile(member)
            return extracted.read() if extracted else b""

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        if self.channel is not None:
            with contextlib.suppress(Exception):
                self.channel.sock.close()
        if self.id is not None:
            self._remove()

    def _remove(self) -> None:
        """Remove the container; the engine sometimes fails a removal once under load, so try again, and
        say so if it outlives the session (`reap_orphans` removes it once this process is gone)."""
        import docker.errors

        error: Exception | None = None
        for pause in (0.0, 0.2, 1.0):
            time.sleep(pause)
            try:
                self.api.remove_container(self.id, force=True)
                return
            except docker.errors.NotFound:
                return
            except Exception as exc:
                error = exc
        log.warning(
            "container %s outlived its session (%s); docker rm -f %s removes it", self.id, error, self.id
        )

    def _check_inside(self, parts: list[str]) -> None:
        """Refuse paths that are, or pass through, symlinks leading out of the workspace."""
        target = posixpath.join(self.workdir, *parts)
        root = posixpath.normpath(self.workdir)
        argv = ["/bin/sh", "-c", _RESOLVE, "sh", target, root]
        if self.channel is not None and self.channel.usable:
            sink = CappedOutput(1024)
            code, _ = self.channel.run(shlex.join(argv), sink, sink, time.perf_counter() + 30)
        else:
            exec_id = self.api.exec_create(self.id, argv, user=f"{INSIDE_ID}:{INSIDE_ID}")["Id"]
            self.api.exec_start(exec_id)
            code = self._exit_code(exec_id)
        if code != 0:
            raise SandboxError(f"{'/'.join(parts)!r} is a symlink or leads outside the workspace")

    def _put_archive(self, path: str, archive: bytes) -> None:
        """Podman's archive endpoint sometimes fails once under load ("broken pipe"); try twice."""
        import docker.errors

        try:
            self.api.put_archive(self.id, path, archive)
        except docker.errors.APIError:
            time.sleep(0.2)
            self.api.put_archive(self.id, path, archive)

    def _exit_code(self, exec_id: str) -> int | None:
        """The engine may record the exit code a moment after the stream ends (seen with Podman)."""
        for _ in range(200):
            state = self.api.exec_inspect(exec_id)
            if not state.get("Running") and state.get("ExitCode") is not None:
                return int(state["ExitCode"])
            time.sleep(0.01)
        return None

    def _kill_command(self, pid_file: str, marker: str) -> None:
        argv = ["/bin/sh", "-c", _KILL_TREE, "sh", pid_file, marker]
        exec_id = self.api.exec_create(self.id, argv, user=f"{INSIDE_ID}:{INSIDE_ID}")["Id"]
        self.api.exec_start(exec_id)


def _tar_info(name: str, kind: bytes, mode: int) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.mode, info.uid, info.gid, info.mtime = kind, mode, INSIDE_ID, INSIDE_ID, int(time.time())
    return info


def _tar_dirs(path: str) -> bytes:
    """A tar of `path` and its parents as directories owned by the sandbox user."""
    parts = [part for part in path.split("/") if part]
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for depth in range(1, len(parts) + 1):
            tar.addfile(_tar_info("/".join(parts[:depth]), tarfile.DIRTYPE, 0o755))
    return buffer.getvalue()


class DockerSandbox(SpareKeeping):
    """Options: `image` (used when the spec names none), `base_url` (default: DOCKER_HOST)."""

    name = "docker"
    session_alive = staticmethod(DockerSession.alive)  # type: ignore[arg-type]
    _process_local = ("_client", "_reaped")  # a copy connects (and reaps) anew
    _client: Any = None
    _reaped = False

    def __init__(self, image: str | None = None, base_url: str | None = None):
        self.image = image
        self.base_url = base_url
        self._keep_spares()

    def client(self) -> Any:
        if self._client is None:
            try:
                import docker
            except ImportError as exc:
                raise SandboxError(
                    "the docker backend needs the `docker` package: pip install 'recreate[docker]'"
                ) from exc
            try:
                self._client = (
                    docker.DockerClient(base_url=self.base_url) if self.base_url else docker.from_env()
                )
            except docker.errors.DockerException as exc:
                raise SandboxError(f"cannot reach a Docker Engine API: {exc}") from exc
        return self._client

    def _open_now(self, spec: SandboxSpec | None) -> DockerSession:
        spec = spec or SandboxSpec()
        image = spec.image or self.image
        if not image:
            raise SandboxError(
                "the docker backend needs an image: SandboxSpec(image=...) or get_sandbox('docker', image=)"
            )
        client = self.client()
        if not self._reaped:
            reap_orphans(client)
            self._reaped = True
        try:
            return DockerSession(client, spec, image)
        except SandboxError:
            raise
        except Exception as exc:
            raise SandboxError(f"cannot start a container from {image!r}: {exc}") from exc

    def available(self) -> tuple[bool, str]:
        try:
            version = self.client().version()
        except Exception as exc:
            return False, (
                f"{exc}; set DOCKER_HOST, or start Podman's API: scripts/podman_service.sh start DIR"
            )
        return (
            True,
            f"{version.get('Components', [{}])[0].get('Name', 'Engine')} {version.get('Version', '?')}",
        )
