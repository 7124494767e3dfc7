"""A Docker Engine API for tests: DOCKER_HOST when set, else Podman's API service started here.

Other test areas can use the fixtures too: `from tests.podman import docker_host, busybox_image`
in their conftest.py. Docker tests are skipped only when neither DOCKER_HOST nor podman is there.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SERVICE_SCRIPT = REPO / "scripts" / "podman_service.sh"


@pytest.fixture(scope="session")
def docker_host(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """URL of a working Docker Engine API; DOCKER_HOST points at it for the session."""
    pytest.importorskip("docker")
    if os.environ.get("DOCKER_HOST"):
        yield os.environ["DOCKER_HOST"]
        return
    if shutil.which("podman") is None:
        pytest.skip("no DOCKER_HOST and podman is not installed (apt-get install -y podman runc)")
    service_dir = tmp_path_factory.mktemp("podman")
    started = subprocess.run(
        [str(SERVICE_SCRIPT), "start", str(service_dir)], capture_output=True, text=True, timeout=60
    )
    if started.returncode != 0:
        pytest.fail(f"could not start Podman's API service: {started.stderr.strip()}")
    url = started.stdout.strip()
    os.environ["DOCKER_HOST"] = url
    try:
        yield url
    finally:
        del os.environ["DOCKER_HOST"]
        subprocess.run([str(SERVICE_SCRIPT), "stop", str(service_dir)], capture_output=True, timeout=60)


@pytest.fixture(scope="session")
def busybox_image(docker_host: str) -> str:
    """Tag of the offline busybox test image (imported once, then reused by tag)."""
    import docker

    from recreate.sandbox import SandboxError
    from recreate.sandbox.images import ensure_busybox_image

    try:
        return ensure_busybox_image(docker.DockerClient(base_url=docker_host))
    except SandboxError as exc:
        pytest.skip(str(exc))
