"""`recreate ui` as served: only requests addressed to this server (its bound host, localhost, 127.0.0.1,
[::1], with its port) are answered; a DNS-rebinding page's Host header gets 421, and a request another
site's page makes in the background 403. Real server, real requests with forged headers."""

from __future__ import annotations

import http.client
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest

from recreate.local.server import free_port
from recreate.ui.app import allowed_hosts


def _status(port: int, host: str | None, path: str = "/", **headers: str) -> int:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    conn.putrequest("GET", path, skip_host=True)
    if host is not None:
        conn.putheader("Host", host)
    for name, value in headers.items():
        conn.putheader(name.replace("_", "-"), value)
    conn.endheaders()
    status = conn.getresponse().status
    conn.close()
    return status


@pytest.fixture(scope="module")
def ui_port(tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    home, port = tmp_path_factory.mktemp("ui-home"), free_port()
    args = [sys.executable, "-m", "recreate", "ui", "--home", str(home), "--port", str(port),
            "--allow-host", "recreate.lan"]  # fmt: skip
    server = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                _status(port, f"127.0.0.1:{port}")
                break
            except OSError:
                if server.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"recreate ui did not start: {server.stderr.read()}") from None
                time.sleep(0.2)
        yield port
    finally:
        server.terminate()
        server.wait(timeout=10)


def test_requests_addressed_to_this_server_are_answered(ui_port):
    for host in (f"127.0.0.1:{ui_port}", f"localhost:{ui_port}", f"[::1]:{ui_port}", f"LOCALHOST:{ui_port}",
                 f"recreate.lan:{ui_port}"):  # fmt: skip
        assert _status(ui_port, host) == 200, host


@pytest.mark.parametrize(
    "host",
    ["evil.example:{port}", "evil.example", "127.0.0.1", "127.0.0.1:1", "localhost.evil.example:{port}",
     "127.0.0.1:{port}.evil.example", "", None, "127.0.0.1:{port}@evil.example"],
)  # fmt: skip
def test_a_foreign_host_header_is_refused(ui_port, host):
    forged = host.format(port=ui_port) if host is not None else None
    for path in ("/", "/runs/x", "/static/app.css"):
        assert _status(ui_port, forged, path) in (400, 421), (forged, path)


def test_allowed_hosts_brackets_ipv6_and_drops_the_port_only_on_80():
    assert allowed_hosts("::1", 8765) == {"[::1]:8765", "localhost:8765", "127.0.0.1:8765"}
    assert "localhost" in allowed_hosts("127.0.0.1", 80) and "localhost" not in allowed_hosts("127.0.0.1", 81)


@pytest.mark.parametrize(
    ("site", "mode", "status"),
    [
        ("cross-site", "no-cors", 403),  # an <img> or fetch() on another site's page
        ("cross-site", "cors", 403),
        ("same-site", "no-cors", 403),  # a page of another port of this machine
        ("cross-site", "navigate", 200),  # following a link to the UI
        ("same-origin", "cors", 200),  # the UI's own live refresh
        ("none", "navigate", 200),  # typed into the address bar
        (None, None, 200),  # a client that sends no Fetch Metadata
    ],
)
def test_a_request_another_sites_page_makes_in_the_background_is_refused(ui_port, site, mode, status):
    sent = {"Sec_Fetch_Site": site, "Sec_Fetch_Mode": mode} if site else {}
    for path in ("/experience?q=anything", "/runs-table", "/"):
        assert _status(ui_port, f"127.0.0.1:{ui_port}", path, **sent) == status, (site, mode, path)
