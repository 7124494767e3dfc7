"""A `create_domain_agent(..., model="local")` block entered again while open reuses its server (one
server, one graph); only the outermost exit stops it, and only what the block started (real engine)."""

from __future__ import annotations

import threading
from pathlib import Path

from recreate import create_domain_agent
from recreate.local.server import is_alive, running_servers
from tests.agent.conftest import MINIMAL


def test_entering_again_reuses_the_server_and_the_outermost_exit_stops_it(
    local_extra, recreate_home: Path, bwrap
) -> None:
    served = create_domain_agent(MINIMAL, model="local", sandbox=bwrap)
    served.__exit__(None, None, None)  # leaving a block never entered stops nothing, raises nothing
    with served as outer:
        pid = served.server.pid
        with served as inner:
            assert inner is outer and served.server.pid == pid
            assert [s.pid for s in running_servers(recreate_home)] == [pid]
        assert is_alive(pid) and served.server.pid == pid  # the outer block still has its model
    assert not is_alive(pid) and not running_servers(recreate_home) and served.server is None

    with served:  # entered again after it closed: a server of its own, stopped after
        again = served.server.pid
        assert again != pid and [s.pid for s in running_servers(recreate_home)] == [again]
    assert not is_alive(again) and not running_servers(recreate_home)


def test_a_failed_build_stops_the_server_it_started(local_extra, recreate_home: Path, bwrap) -> None:
    served = create_domain_agent(MINIMAL, model="local", sandbox=bwrap, no_such_option=1)
    for _ in range(2):  # and the block can be tried again
        try:
            with served:
                raise AssertionError("the build should have failed")
        except TypeError:
            pass
        assert not running_servers(recreate_home) and served.server is None


def test_threads_entering_at_once_share_one_server(local_extra, recreate_home: Path, bwrap) -> None:
    served = create_domain_agent(MINIMAL, model="local", sandbox=bwrap)
    both_in = threading.Barrier(2, timeout=120)
    pids: list[int] = []

    def use() -> None:
        with served:
            pids.append(served.server.pid)
            both_in.wait()  # neither leaves before the other is in

    threads = [threading.Thread(target=use) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=180)
    assert len(pids) == 2 and pids[0] == pids[1]
    assert not is_alive(pids[0]) and not running_servers(recreate_home)
