"""What a command sees: the allow-listed environment and the shell wrapper (plain or persistent)."""

from __future__ import annotations

import os
import re

from recreate.sandbox.base import SandboxError

DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
_SECRET_NAME = re.compile(r"API_?KEY|TOKEN|SECRET|PASSW(OR)?D|CREDENTIAL|PRIVATE_KEY", re.IGNORECASE)
_VALID_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_MIN_SECRET_LENGTH = 8
# Every command carries this variable (a token per command): how a timeout or close finds the
# processes that left the command's process tree (setsid, double fork) with its environment.
MARKER = "RECREATE_COMMAND"

# Restores the saved exported variables (all but this command's own marker) and directory, applies this
# call's env, runs the command in this same shell (so `cd`/`export` take effect) and saves the state
# again on exit, whatever the exit. The state files are overwritten in place (`1<>`), not truncated:
# on ext4 a truncate-and-rewrite forces the file's writeback at close (auto_da_alloc), ~0.45 ms a
# file, more than the rest of the command. What a shorter state leaves behind is never read: the env
# file ends in `return` (it is sourced), the cwd file's first line is the directory (empty when `pwd`
# fails: bash's does in a deleted directory). The save's command names are quoted, so no alias the
# command defined applies to them, and the command's functions of those names are dropped first.
# A state that cannot be written whole (the command filled /tmp) is emptied and said on stderr, and one
# that cannot be read (a save cut short by a kill) is said and skipped (`command .`: a syntax error in
# it does not end the shell): either way the session loses its variables, never its later commands.
_PERSISTENT_SCRIPT = r"""
__recreate_state=$1
__recreate_cmd=$2
__recreate_marker=$RECREATE_COMMAND
if [ -f "$__recreate_state.env" ] && ! command . "$__recreate_state.env"; then
    echo "recreate: the saved variables could not be read, this command starts without them" >&2
fi
export RECREATE_COMMAND="$__recreate_marker"
if [ -f "$__recreate_state.cwd" ] && IFS= read -r __recreate_dir <"$__recreate_state.cwd" &&
    [ -n "$__recreate_dir" ]; then
    cd "$__recreate_dir"
fi
eval "$3"
trap '\unset -f echo pwd export
{ \export -p && \echo return 0; } 1<>"$__recreate_state.env" || { >"$__recreate_state.env"
\echo "recreate: the variables could not be saved (is /tmp full?), later commands lack them" >&2; }
\pwd 1<>"$__recreate_state.cwd" || \echo 1<>"$__recreate_state.cwd"' EXIT
set --
eval "$__recreate_cmd"
"""


def sandbox_env(home: str, *layers: dict[str, str] | None, tmpdir: str = "/tmp") -> dict[str, str]:
    """A fresh environment: a fixed base plus the caller's layers. Nothing comes from our own
    environment, and anything that looks like a credential is refused."""
    env = {"PATH": DEFAULT_PATH, "HOME": home, "LANG": "C.UTF-8", "TMPDIR": tmpdir}
    for layer in layers:
        for name, value in (layer or {}).items():
            check_env_var(name, value)
            env[name] = value
    return env


def check_env_var(name: str, value: str) -> None:
    if not _VALID_NAME.fullmatch(name):
        raise SandboxError(f"invalid environment variable name {name!r}")
    if _SECRET_NAME.search(name):
        raise SandboxError(f"refusing to pass {name!r} into a sandbox: it looks like a credential")
    for host_name, host_value in os.environ.items():
        if _SECRET_NAME.search(host_name) and len(host_value) >= _MIN_SECRET_LENGTH and host_value in value:
            raise SandboxError(
                f"refusing to pass {name!r} into a sandbox: it contains the value of ${host_name}"
            )


def host_secret_names() -> list[str]:
    """Names of the variables in our own environment that look like credentials."""
    return sorted(
        name
        for name, value in os.environ.items()
        if _SECRET_NAME.search(name) and len(value) >= _MIN_SECRET_LENGTH
    )


def shell_argv(cmd: str, state_prefix: str | None = None, env: dict[str, str] | None = None) -> list[str]:
    """argv that runs `cmd` with /bin/sh; with `state_prefix`, cwd and exported variables persist
    across calls in files `<state_prefix>.env` / `.cwd`, and `env` is re-applied over the saved state."""
    if state_prefix is None:
        return ["/bin/sh", "-c", cmd]
    exports = "".join(f"export {name}={_quote(value)}\n" for name, value in (env or {}).items())
    return ["/bin/sh", "-c", _PERSISTENT_SCRIPT, "sh", state_prefix, cmd, exports]


def _quote(value: str) -> str:
    return "'" + value.replace("'", "'\"'\"'") + "'"
