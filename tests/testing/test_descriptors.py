"""The test suite's process must not pile up open files (it once held > 1,024 by the end, and the
template renderer's `select()` broke on descriptor numbers past that). What tests open most — a scripted
server per test reached through ChatOpenAI and the openai client, an experience store with its Chroma
index — is repeated here as a module of tests would, and the count must come back."""

from __future__ import annotations

import gc
import os
from pathlib import Path

import httpx
import openai
import pytest

from recreate.experience.schema import Trajectory
from recreate.experience.store import ExperienceStore
from recreate.models import make_chat_model
from recreate.testing import ScriptedOpenAIServer

ROUNDS = 10
SLACK = 4  # a thread pool's pipe, a cached client or two: not a descriptor per round


def open_descriptors() -> int:
    gc.collect()  # Chroma and httpx objects close their files when collected
    return len(os.listdir("/proc/self/fd"))


def one_test_worth(tmp_path: Path, i: int) -> None:
    """What a typical test does: its own server on a new port, a chat model, the openai client, a store."""
    with ScriptedOpenAIServer() as server:
        chat = make_chat_model(f"scripted@{server.url}")
        assert chat.invoke("hi").content == "ok"
        client = openai.OpenAI(base_url=server.url, api_key="x")
        client.chat.completions.create(model="scripted", messages=[{"role": "user", "content": "hi"}])
        assert httpx.get(server.url.removesuffix("/v1") + "/health").status_code == 200
    with ExperienceStore(tmp_path / f"exp-{i % 3}", embedding="hash") as store:
        store.add(Trajectory(task_id=f"t{i}", domain="d"))
        assert store.search("t", k=1, scope="summaries")


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="counts descriptors through /proc")
def test_many_tests_worth_of_servers_clients_and_stores_leave_no_descriptor_behind(tmp_path: Path) -> None:
    one_test_worth(tmp_path, 0)  # first use: Chroma's and httpx's process-wide pieces
    settled = open_descriptors()
    for i in range(1, ROUNDS + 1):
        one_test_worth(tmp_path, i)
    assert open_descriptors() <= settled + SLACK


def test_a_stopped_server_leaves_no_connection_open_on_either_side() -> None:
    with ScriptedOpenAIServer() as server:
        chat = make_chat_model(f"scripted@{server.url}")
        for _ in range(3):
            chat.invoke("hi")
        port = server.url.split(":")[2].split("/")[0]
    sockets = [os.readlink(f"/proc/self/fd/{fd}") for fd in os.listdir("/proc/self/fd") if _is_socket(fd)]
    established = _established_ports()
    assert int(port) not in established, f"connections to the stopped server stay open: {sockets}"


def _is_socket(fd: str) -> bool:
    try:
        return os.readlink(f"/proc/self/fd/{fd}").startswith("socket:")
    except OSError:
        return False


def _established_ports() -> set[int]:
    """Local or remote ports of this machine's TCP connections that are established or half-closed."""
    ports: set[int] = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        if not Path(table).is_file():
            continue
        for line in Path(table).read_text().splitlines()[1:]:
            local, remote, state = line.split()[1:4]
            if state in ("01", "08"):  # ESTABLISHED, CLOSE_WAIT
                ports |= {int(local.rsplit(":", 1)[1], 16), int(remote.rsplit(":", 1)[1], 16)}
    return ports
