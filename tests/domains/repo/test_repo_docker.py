"""SWE-bench proper through the docker backend, offline: a fixture instance built into a local image that
is laid out like SWE-bench's evaluation images (the repository at /testbed, the interpreter at
/opt/miniconda3/envs/testbed/bin/python) and named as the SWE-bench harness names them. The image is a
busybox rootfs plus this host's Python, pytest and git, imported through the Docker Engine API."""

from __future__ import annotations

import hashlib
import io
import json
import re
import subprocess
import tarfile
import tempfile
from pathlib import Path

import pytest

from recreate.domains import get_domain
from recreate.domains.repo.domain import FORGED_CONFTEST, new_file_patch
from recreate.domains.repo.env import env_path
from recreate.domains.repo.instance import RepoEnvironment, swebench_image
from recreate.domains.repo.snapshot import base_tree
from recreate.sandbox import fresh_session, get_sandbox

pytestmark = [pytest.mark.docker, pytest.mark.slow]
INSTANCE_ID = "tinycalc__tinycalc-1"
PYTHON = Path("/usr/bin/python3.11")
SKIPPED = {"test", "idlelib", "tkinter", "ensurepip", "lib2to3", "turtledemo", "config-3.11-x86_64-linux-gnu"}


def _libraries(binaries: list[Path]) -> set[Path]:
    found: set[Path] = set()
    for binary in binaries:
        out = subprocess.run(["ldd", str(binary)], capture_output=True, text=True).stdout
        found |= {Path(p) for p in re.findall(r"(/\S+\.so[.\d]*)", out)}
    return found


def _root_owned(info: tarfile.TarInfo) -> tarfile.TarInfo | None:
    if any(part in SKIPPED for part in Path(info.name).parts):
        return None
    info.uid = info.gid = 0
    info.uname = info.gname = "root"
    return info


def write_image_tar(dest: Path, testbed: bytes, site_packages: Path) -> None:
    from recreate.sandbox.images import find_busybox, write_rootfs

    write_rootfs(find_busybox(), dest)
    stdlib = Path("/usr/lib/python3.11")
    git = Path("/usr/bin/git")
    with tarfile.open(dest, "a") as tar:
        for path in sorted(_libraries([PYTHON, git, *stdlib.glob("lib-dynload/*.so")])):
            tar.add(str(path.resolve()), arcname=str(path).lstrip("/"), filter=_root_owned)
        for path in (PYTHON, git):
            tar.add(str(path), arcname=str(path).lstrip("/"), filter=_root_owned)
        tar.add(str(stdlib), arcname=str(stdlib).lstrip("/"), filter=_root_owned)
        tar.add(str(site_packages), arcname="usr/lib/python3/dist-packages", filter=_root_owned)
        link = tarfile.TarInfo("opt/miniconda3/envs/testbed/bin/python")
        link.type, link.linkname, link.mode = tarfile.SYMTYPE, str(PYTHON), 0o777
        tar.addfile(link)
        with tarfile.open(fileobj=io.BytesIO(testbed)) as tree:
            for member in tree.getmembers():
                data = tree.extractfile(member) if member.isfile() else None
                member.name = f"testbed/{member.name}"
                member.mode = 0o755 if member.isdir() else 0o644
                tar.addfile(_root_owned(member), data)


def ensure_image(client, testbed: bytes, site_packages: Path) -> str:
    """The fixture image, tagged with the SWE-bench name of INSTANCE_ID (built once per content)."""
    import docker.errors

    name = swebench_image(INSTANCE_ID)
    version = hashlib.sha256(testbed + PYTHON.read_bytes()).hexdigest()[:12]
    cached = f"recreate-test/repo-testbed:{version}"
    try:
        client.images.get(cached)
    except docker.errors.ImageNotFound:
        with tempfile.TemporaryDirectory(prefix="recreate-repo-image-") as tmp:
            tarball = Path(tmp) / "rootfs.tar"
            write_image_tar(tarball, testbed, site_packages)
            answer = client.api.import_image_from_file(str(tarball))
        image_id = re.findall(r"sha256:[0-9a-f]{64}", str(answer))[-1]
        client.api.tag(image_id, *cached.split(":"))
    repository, tag = name.rsplit(":", 1)
    client.api.tag(cached, repository, tag)
    return name


@pytest.fixture(scope="module")
def swebench_data(tiny_dataset, docker_host, tmp_path_factory):
    """A SWE-bench-style JSONL row (no snapshot, no environment: the image holds the repository)."""
    import docker

    folder = tiny_dataset[0]
    row = json.loads((folder / "tinycalc-0.1.jsonl").read_text().splitlines()[0])
    testbed = base_tree(folder / row["snapshot"], row["base_commit"])
    site = env_path(RepoEnvironment()) / "lib" / "python3.11" / "site-packages"
    image = ensure_image(docker.DockerClient(base_url=docker_host), testbed, site)
    swebench = {k: row[k] for k in ("problem_statement", "patch", "test_patch", "base_commit")}
    swebench |= {"instance_id": INSTANCE_ID, "repo": "tinycalc/tinycalc", "version": "0.1"}
    swebench |= {
        "FAIL_TO_PASS": json.dumps(row["FAIL_TO_PASS"]),
        "PASS_TO_PASS": json.dumps(row["PASS_TO_PASS"]),
    }
    data = tmp_path_factory.mktemp("swebench") / "swebench.jsonl"
    data.write_text(json.dumps(swebench) + "\n")
    return data, image


def test_swebench_instance_is_judged_in_its_image(swebench_data):
    data, image = swebench_data
    domain = get_domain("repo", data=data)
    task = domain.tasks()[0]
    assert domain.instance(task).environment.image == image
    docker = get_sandbox("docker")
    gold = domain.evaluate(task, task.reference, docker)
    assert gold.passed, gold.feedback
    assert gold.details["tests_s"] > 0 and gold.details["eval_wall_s"] > 0
    assert not domain.evaluate(task, "", docker).passed
    forged = domain.evaluate(task, new_file_patch("conftest.py", FORGED_CONFTEST), docker)
    assert not forged.passed and "conftest.py" in forged.feedback


def test_agent_workspace_comes_from_the_image(swebench_data):
    data, image = swebench_data
    domain = get_domain("repo", data=data)
    task = domain.tasks()[0]
    spec = domain.agent_spec()
    assert spec.image == image
    with fresh_session(get_sandbox("docker"), spec) as session:
        domain.prepare(task, session)
        session.put("fix.diff", task.reference)
        done = session.run("git apply fix.diff && rm fix.diff && git diff", timeout=60)
    assert done.ok, done
    assert domain.evaluate(task, done.stdout, get_sandbox("docker")).passed
