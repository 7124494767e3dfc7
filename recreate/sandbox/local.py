"""`local`: commands run as plain subprocesses in a private temp directory. NOT isolation.

Explicit opt-in only (`get_sandbox("local")`). What it does NOT isolate: the host filesystem (all
that the command's uid may read or write) and the network. What it does give: a fresh environment
without our secrets, its own process group, rlimits, capped output, timeouts that kill all the
command started (see `host`), a memory cgroup for the session where the machine allows one, and,
when we run as root, a throwaway unprivileged uid (so `/root` and our own `/proc/PID/environ` are
unreadable, a fork bomb hits its process limit, and `close()` can kill everything the session
started). Unprivileged, a timeout or close finds what left a command's tree by the command's
environment marker only: a process that also cleared its environment survives them.

Unprivileged, the command runs as our own user, who may read `/proc/PID/environ` of this process and
of the shell that started it: a fresh environment cannot hide a secret there. So then `open` refuses
while a credential-looking variable (…_API_KEY, …_TOKEN, …SECRET…) is set, and says which.
The workspace is a host temp directory (`session.workdir`), not `spec.workdir`. Without a mount namespace
a read-only bind can only name a path where it is (`ro_binds` of (p, p)); `open` refuses one that would
show a path elsewhere (the jsonl evaluator's /evaluator), rather than run commands that cannot find it.
"""

from __future__ import annotations

import os
import warnings

from recreate.sandbox.base import SandboxError, SandboxSpec
from recreate.sandbox.commands import CommandRunner
from recreate.sandbox.host import HostSession, uid_processes
from recreate.sandbox.process import rlimits, sandbox_uid
from recreate.sandbox.shell import host_secret_names, sandbox_env


class NoIsolationWarning(UserWarning):
    """The `local` backend was used: commands are not isolated from this machine."""


class LocalSession(HostSession):
    backend = "local"

    def __init__(self, spec: SandboxSpec, base_dir: str | None = None):
        super().__init__(spec, sandbox_uid(), base_dir)
        # Unprivileged, RLIMIT_NPROC counts all of our own processes too; leave room for them.
        self._own_processes = 0 if self.uid is not None else len(uid_processes(os.getuid()))
        self.start_runner()

    @property
    def workdir(self) -> str:
        return str(self.workspace)

    def _start_runner(self) -> CommandRunner:
        return CommandRunner(
            uid=self.uid,
            gid=self.uid,
            cwd=str(self.workspace),
            cgroup_procs=self.cgroup_procs(),
            limits=rlimits(self.spec, self._own_processes + 1),  # + the runner itself
        )

    def _command_env(self, env: dict[str, str] | None) -> dict[str, str]:
        return sandbox_env(str(self.workspace), self.spec.env, env, tmpdir=str(self.tmp))

    def _members(self) -> list[int] | None:
        # Unprivileged, the session's processes are ours too: not to be told from the rest of ours.
        return uid_processes(self.uid) if self.uid is not None else None

    def _shell_state(self) -> str | None:
        return str(self.root / "shell") if self.spec.persistent else None

    def _stop(self) -> None:
        """Nothing beyond what every host session stops."""


class LocalSandbox:
    name = "local"

    def __init__(self, base_dir: str | None = None):
        self.base_dir = base_dir

    def open(self, spec: SandboxSpec | None = None) -> LocalSession:
        secrets = host_secret_names() if os.geteuid() != 0 else []
        if secrets:
            raise SandboxError(
                f"the 'local' sandbox refuses to run while {', '.join(secrets)} is set: its commands run as "
                "your user and can read this process's environment (/proc/PID/environ); unset it, or use "
                "the 'bwrap' or 'docker' backend"
            )
        moved = [(source, target) for source, target in (spec.ro_binds if spec else ()) if source != target]
        if moved:  # nothing would be at the target: the command fails, and reads as the task's failure
            source, target = moved[0]
            raise SandboxError(
                f"the 'local' sandbox cannot show {source} at {target} (it has no mount namespace; it shows "
                "host paths only where they are); use the 'bwrap' or 'docker' backend"
            )
        warnings.warn(
            "the 'local' sandbox backend does not isolate commands from this machine (no filesystem or "
            "network isolation); use 'bwrap' or 'docker' for model-written code",
            NoIsolationWarning,
            stacklevel=2,
        )
        return LocalSession(spec or SandboxSpec(), self.base_dir)

    def available(self) -> tuple[bool, str]:
        return True, "always available; no isolation (explicit opt-in only)"
