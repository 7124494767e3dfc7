"""The command channel's stream parsing, without an engine (the engine-backed tests are in test_docker)."""

from __future__ import annotations

import random
import socket
import struct
import threading
import time

import pytest

from recreate.sandbox import SandboxError
from recreate.sandbox.docker_channel import CommandChannel, _field, _Marked
from recreate.sandbox.process import CappedOutput


def test_end_marker_split_anywhere_leaves_the_output_intact() -> None:
    stream = b"line one\n\x1e not a marker \x1e" + bytes(range(256)) + b"\x1etok 17\x1etrailing"
    rng = random.Random(0)
    for _ in range(200):
        out = CappedOutput(10_000)
        marked = _Marked(out, b"\x1etok ")
        cuts = sorted(rng.sample(range(1, len(stream)), 5))
        for a, b in zip([0, *cuts], [*cuts, len(stream)], strict=True):
            marked.feed(stream[a:b])
        assert bytes(out.head) == stream[: stream.index(b"\x1etok ")]
        assert _field(marked) == b"17"


def _frame(stream_id: int, data: bytes) -> bytes:
    return struct.pack(">BxxxL", stream_id, len(data)) + data


def test_channel_demultiplexes_frames_and_reports_a_lost_server() -> None:
    ours, theirs = socket.socketpair()
    channel = CommandChannel(ours)
    theirs.sendall(_frame(1, b"\x1eready su\x1e"))
    assert channel.wait_ready(5) == "su" and channel.usable

    def server() -> None:
        line = theirs.makefile("rb").readline()
        token = line.split(b" ")[0]
        theirs.sendall(_frame(1, b"hel") + _frame(2, b"oops\n\x1e" + token) + _frame(1, b"lo\x1e" + token))
        theirs.sendall(_frame(2, b"\x1e") + _frame(1, b" 3\x1e"))
        theirs.close()

    threading.Thread(target=server).start()
    out, err = CappedOutput(100), CappedOutput(100)
    assert channel.run("echo hello", out, err, deadline=time.perf_counter() + 10) == (3, True)
    assert (out.text(), err.text()) == ("hello", "oops\n")
    with pytest.raises(SandboxError, match="not usable any more|stopped"):
        channel.run("true", CappedOutput(10), CappedOutput(10), deadline=time.perf_counter() + 10)
    assert channel.broken and not channel.usable
