"""Joins that Ray's client alone would wait on without end: a gRPC server on a Ray client port that
takes the connection and never finishes the join (its pings answered, each join's start held), or
answers nothing at all. The driver is a process of its own (its Ray client state is its own)."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from recreate.evaluation import ray_join
from tests.evaluation.test_ray_client import RAY_SETTINGS
from tests.evaluation.test_ray_executor import needs_ray


class _SilentHead:
    """A gRPC server on a Ray client port that takes connections and never finishes a join: with
    `pings`, it answers pings (as a head's proxier does) and holds each driver's data stream unanswered
    (as a client server that never starts); without, it answers nothing at all."""

    def __init__(self, pings: bool) -> None:
        import grpc
        from ray.core.generated import ray_client_pb2, ray_client_pb2_grpc

        head = self
        self.streams = 0
        self.released = threading.Event()

        class Driver(ray_client_pb2_grpc.RayletDriverServicer):
            def ClusterInfo(self, request, context):  # noqa: N802 (gRPC's name)
                if not pings:
                    head.released.wait()
                return ray_client_pb2.ClusterInfoResponse(json="true")

        class Data(ray_client_pb2_grpc.RayletDataStreamerServicer):
            def Datapath(self, request_iterator, context):  # noqa: N802
                head.streams += 1
                head.released.wait()
                return iter(())

        class Logs(ray_client_pb2_grpc.RayletLogStreamerServicer):
            def Logstream(self, request_iterator, context):  # noqa: N802
                head.released.wait()
                return iter(())

        self.server = grpc.server(ThreadPoolExecutor(max_workers=16))
        ray_client_pb2_grpc.add_RayletDriverServicer_to_server(Driver(), self.server)
        ray_client_pb2_grpc.add_RayletDataStreamerServicer_to_server(Data(), self.server)
        ray_client_pb2_grpc.add_RayletLogStreamerServicer_to_server(Logs(), self.server)
        self.address = f"ray://127.0.0.1:{self.server.add_insecure_port('127.0.0.1:0')}"
        self.server.start()

    def close(self) -> None:
        self.released.set()
        self.server.stop(grace=None)


_JOIN_WITHIN = """
import sys
from recreate.evaluation import ray_executor, ray_join
ray_join.JOIN_TRY_S, ray_join.ANSWER_S = 3.0, 3.0
try:
    ray_executor.make_executor(sys.argv[1]).connect()
except (RuntimeError, ValueError) as exc:
    sys.exit(f"error: {exc}")
"""


@needs_ray
def test_a_head_that_never_answers_the_join_is_one_line_not_a_hang(tmp_path):
    """A head's client server that never starts: pings answered, each join's start held; tried again."""
    done, took, head = _join_silent_head(tmp_path, pings=True)
    assert done.returncode == 1 and took < 60, (took, done.stderr[-3000:])
    err = done.stderr.strip()
    assert err == (
        f"error: cannot join the Ray cluster at {head.address} (ConnectionError: the head took the "
        "connection and did not answer within 3 s); or run with --executor threads"
    )
    assert head.streams == 3  # joined again while the head answered pings


@needs_ray
def test_a_head_that_answers_no_ping_is_one_line_at_once(tmp_path):
    done, took, head = _join_silent_head(tmp_path, pings=False)
    assert done.returncode == 1 and took < 30, (took, done.stderr[-3000:])
    host_port = head.address.removeprefix("ray://")
    assert done.stderr.strip() == (
        f"error: executor='{head.address}': the Ray cluster at {host_port} took the connection and "
        "answered no ping within 3 s (a stuck or overloaded head, or not a Ray client port); check the "
        "head (`ray status` there), or run with --executor threads"
    )
    assert head.streams == 0  # no join was tried (Ray's client would have waited for its ping forever)


def _join_silent_head(
    tmp_path: Path, *, pings: bool
) -> tuple[subprocess.CompletedProcess[str], float, _SilentHead]:
    head = _SilentHead(pings)
    env = {k: v for k, v in os.environ.items() if k not in RAY_SETTINGS} | {"HOME": str(tmp_path)}
    started = time.monotonic()
    try:
        done = subprocess.run([sys.executable, "-c", _JOIN_WITHIN, head.address], env=env,
                              capture_output=True, text=True, timeout=90)  # fmt: skip
    finally:
        head.close()
    return done, time.monotonic() - started, head


def test_a_join_that_ends_of_itself_gives_its_own_result_or_error(monkeypatch):
    monkeypatch.setattr(ray_join, "JOIN_TRY_S", 30.0)
    started = time.monotonic()
    assert ray_join._before_deadline(lambda: None) is None

    def times_out_in_ray() -> None:  # Ray's own timeouts are TimeoutErrors: not our deadline's
        raise TimeoutError("Ray's own")

    with pytest.raises(TimeoutError, match="Ray's own"):
        ray_join._before_deadline(times_out_in_ray)
    assert time.monotonic() - started < 5
