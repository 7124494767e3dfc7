"""docker specifics: labels, the orphan reaper (ours only), limits, clear errors."""

from __future__ import annotations

import contextlib
import os
import socket

import pytest

from recreate.sandbox import SandboxError, SandboxSpec, get_sandbox
from recreate.sandbox.docker import LABEL, OWNER_LABEL, reap_orphans
from recreate.sandbox.process import owner_label


@pytest.fixture
def sandbox(busybox_image: str):
    return get_sandbox("docker", image=busybox_image)


def test_reaper_removes_only_our_dead_owners_containers(sandbox, busybox_image: str) -> None:
    api = sandbox.client().api
    dead_owner = f"{socket.gethostname()}/{2**22 + 12345}/1"
    other_host = f"elsewhere.example/{os.getpid()}/1"
    made = {
        "dead": {LABEL: "1", OWNER_LABEL: dead_owner},
        "alive": {LABEL: "1", OWNER_LABEL: owner_label()},
        "other_host": {LABEL: "1", OWNER_LABEL: other_host},
        "not_ours": {"some.other.tool": "1"},
    }
    ids = {
        name: api.create_container(busybox_image, ["true"], labels=labels)["Id"]
        for name, labels in made.items()
    }
    try:
        removed = reap_orphans(sandbox.client())
        remaining = {c["Id"] for c in api.containers(all=True)}
        assert ids["dead"] in removed and ids["dead"] not in remaining
        assert {ids["alive"], ids["other_host"], ids["not_ours"]} <= remaining
    finally:
        for container_id in ids.values():
            with contextlib.suppress(Exception):  # already gone is fine
                api.remove_container(container_id, force=True)


def test_container_carries_labels_and_limits_and_is_removed_on_close(sandbox) -> None:
    session = sandbox.open(SandboxSpec(labels={"recreate.run": "test-run"}, memory_mb=96, max_processes=40))
    info = session.api.inspect_container(session.id)
    assert info["Config"]["Labels"]["recreate.run"] == "test-run"
    assert info["Config"]["Labels"][OWNER_LABEL] == owner_label()
    assert info["HostConfig"]["Memory"] == 96 * 1024 * 1024 and info["HostConfig"]["PidsLimit"] == 40
    assert info["HostConfig"]["NetworkMode"] == "none"
    session.close()
    assert session.api.containers(all=True, filters={"id": session.id}) == []


def test_image_is_required(busybox_image: str) -> None:
    with pytest.raises(SandboxError, match="needs an image"):
        get_sandbox("docker").open(SandboxSpec())


def test_unknown_image_is_a_clear_error(docker_host: str) -> None:
    with pytest.raises(SandboxError, match="cannot start a container"):
        get_sandbox("docker", image="recreate-test/no-such-image:0").open(SandboxSpec())


def test_unreachable_engine_is_reported(tmp_path) -> None:
    sandbox = get_sandbox("docker", base_url=f"unix://{tmp_path}/absent.sock")
    ok, detail = sandbox.available()
    assert not ok and "podman_service.sh" in detail


def test_a_vanished_container_is_a_clear_error(sandbox) -> None:
    session = sandbox.open(SandboxSpec())
    session.api.remove_container(session.id, force=True)
    with pytest.raises(SandboxError, match="not usable any more"):
        session.run("true", timeout=30)
    session.close()
