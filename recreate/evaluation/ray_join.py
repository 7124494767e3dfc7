"""Joining a Ray cluster through its client port (`--executor ray://HOST:PORT`), in one line when it
fails. Ray's client waits ~30 s before saying that nothing listens or that the head refused its token,
and without end for a head that takes the connection and answers nothing (its first ping has no
deadline) or whose client server for this driver never starts (the answer to its start has none):
`check_cluster` finds the first three before Ray's client runs; `join` gives each join a deadline.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from typing import Any
from urllib.parse import urlsplit

from recreate.errors import Arg, ArgumentError
from recreate.evaluation.machine import one_line

AUTH_MODE = "RAY_AUTH_MODE"  # "token": this driver sends Ray's auth token (a cluster's client port may ask)
CONNECT_TIMEOUT_S = 5.0  # to reach a cluster's client port
PING_TIMEOUT_S = 2.0  # for its answer to one ping (milliseconds, from a Ray client server)
ANSWER_S = 20.0  # a second ping's wait: a head that answers neither takes the connection and nothing else
JOIN_TRIES = 3  # a head's client server for this driver may fail to start; the next join gets a new one
JOIN_TRY_S = 60.0  # one join's wait for the head: Ray's client waits forever on a head that stops answering


def check_cluster(address: str, import_ray: Callable[[], Any]) -> None:
    """Raises, in one line, when nothing listens at `address`, when it answers no ping, or when it
    refuses this process's credentials."""
    _answers(address)
    _admits(address, import_ray())


def _answers(address: str) -> None:
    """Raises, in one line and at most `CONNECT_TIMEOUT_S`, when nothing listens at `address` (Ray's
    client would try for ~30 s before saying so)."""
    parts = urlsplit(address)
    try:
        socket.create_connection((parts.hostname, parts.port), timeout=CONNECT_TIMEOUT_S).close()
    except OSError as exc:
        raise ArgumentError(
            f"{{executor}}: nothing answers at {parts.hostname}:{parts.port} ({one_line(exc)}); start the "
            "cluster's head there (`ray start --head` serves clients on 10001) or fix the address, "
            "or run with --executor threads",
            executor=Arg("executor", repr(address), address),
        ) from None


def _admits(address: str, ray: Any) -> None:
    """Raises, in one line, when the cluster at `address` refuses this process's credentials (Ray's client
    would retry for ~30 s, then say "connection timeout") or takes the connection and answers no ping
    (Ray's client would wait for its first answer without end): pings through Ray's own channel, which
    carries Ray's auth token when RAY_AUTH_MODE=token here. Any other answer is left to Ray's client."""
    import grpc
    from ray._private.grpc_utils import init_grpc_channel
    from ray.core.generated import ray_client_pb2, ray_client_pb2_grpc

    parts = urlsplit(address)
    ping = ray_client_pb2.ClusterInfoRequest(type=ray_client_pb2.ClusterInfoType.PING)
    channel = init_grpc_channel(parts.netloc)  # as Ray's client names it ([::1]:10001 too)
    silent = False
    try:
        for wait in (PING_TIMEOUT_S, ANSWER_S):  # a busy head may be slow to answer the first
            try:
                ray_client_pb2_grpc.RayletDriverStub(channel).ClusterInfo(ping, timeout=wait)
            except grpc.RpcError as exc:
                silent = exc.code() == grpc.StatusCode.DEADLINE_EXCEEDED
                if not silent:
                    raise
            else:
                silent = False
            if not silent:
                break
    except ray.exceptions.AuthenticationError:  # token mode here, and no token found
        refused = True
    except grpc.RpcError as exc:
        refused = exc.code() == grpc.StatusCode.UNAUTHENTICATED
    else:
        refused = False
    finally:
        channel.close()
    if silent:
        raise ArgumentError(
            f"{{executor}}: the Ray cluster at {parts.hostname}:{parts.port} took the connection and "
            f"answered no ping within {ANSWER_S:g} s (a stuck or overloaded head, or not a Ray client "
            "port); check the head (`ray status` there), or run with --executor threads",
            executor=Arg("executor", repr(address), address),
        )
    if refused:
        token_mode = os.environ.get(AUTH_MODE, "").lower() == "token"
        sends = "a token that is not the cluster's, or none" if token_mode else "no token"
        raise ArgumentError(
            f"{{executor}}: the Ray cluster at {parts.hostname}:{parts.port} requires its auth token and "
            f"this process sends {sends}; set {AUTH_MODE}=token here and the cluster's token "
            "(`ray get-auth-token` on its head prints it) in RAY_AUTH_TOKEN, in a file named by "
            "RAY_AUTH_TOKEN_PATH or in ~/.ray/auth_token, or run with --executor threads",
            executor=Arg("executor", repr(address), address),
        )


def join(ray: Any, address: str, quiet: dict[str, Any]) -> None:
    """`ray.init` on the cluster, again when the head's side of the join failed: the head starts a
    client server for each driver, and one can fail to start, to take its token or to answer at all
    (seen on a busy head). Not again when the head never answered (Ray's client waited ~30 s already);
    a refused token was ruled out before (`check_cluster`)."""
    for tries_left in reversed(range(JOIN_TRIES)):
        try:
            _before_deadline(lambda: ray.init(address=address, **quiet))
            return
        except ConnectionError as exc:
            if not tries_left or "connection timeout" in str(exc):
                raise
            ray.shutdown()


def _before_deadline(join: Any) -> None:
    """`join()` (a Ray client's `ray.init`) on a thread of its own, given up after `JOIN_TRY_S`: a head
    whose client server stops answering leaves Ray's client waiting for the answer to its start without
    end. Closing the client's channel wakes it (the join thread then disconnects Ray's client itself) and
    the caller tries again (a ConnectionError); a join that stays stuck (before Ray's client holds a
    channel we can reach) ends the joining."""
    done: Future[None] = Future()

    def run() -> None:
        try:
            done.set_result(join())
        except BaseException as exc:  # the caller's to raise
            done.set_exception(exc)

    thread = threading.Thread(target=run, name="ray-join", daemon=True)
    thread.start()
    thread.join(timeout=JOIN_TRY_S)
    if not thread.is_alive():  # joined, or failed of itself (its own error, whatever its type)
        return done.result()
    import ray.util.client

    client = ray.util.client.ray.get_context().client_worker
    with _silenced("ray.util.client.dataclient", "ray.util.client.logsclient"):  # our own ending
        if client is not None and client.channel is not None:
            client._in_shutdown = True  # (as its close() starts) its streams end, no reconnects
            client.channel.close()  # ends its calls; Ray's disconnect alone waits for the head's stream
        thread.join(timeout=10)
    late = f"the head took the connection and did not answer within {JOIN_TRY_S:g} s"
    if thread.is_alive():
        raise RuntimeError(late)
    raise ConnectionError(late)  # (a join that ended as we gave up had its channel closed too)


@contextlib.contextmanager
def _silenced(*names: str) -> Iterator[None]:
    loggers = [logging.getLogger(name) for name in names]
    before = [log.disabled for log in loggers]
    for log in loggers:
        log.disabled = True
    try:
        yield
    finally:
        for log, was in zip(loggers, before, strict=True):
            log.disabled = was
