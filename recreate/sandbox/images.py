"""Offline test image: a busybox-static rootfs imported through the Docker Engine API (no registry).

`python -m recreate.sandbox.images` builds it against `DOCKER_HOST` and prints the tag; tests and
`scripts/build_test_image.sh` use the same code. The tag carries a hash of the busybox binary, so an
image that already exists is reused.
"""

from __future__ import annotations

import hashlib
import io
import re
import shutil
import subprocess
import tarfile
import tempfile
from pathlib import Path
from typing import Any

from recreate.sandbox.base import SandboxError

REPOSITORY = "recreate-test/busybox"
NOBODY = 65534

_PASSWD = "root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/sh\n"
_GROUP = "root:x:0:\nnogroup:x:65534:\n"


def find_busybox() -> Path:
    """The host's busybox, which must be statically linked to run in an empty rootfs."""
    found = shutil.which("busybox")
    if not found:
        raise SandboxError("busybox is not installed; install it with `apt-get install -y busybox-static`")
    path = Path(found).resolve()
    if b"interpreter" in subprocess.run(["file", "-b", str(path)], capture_output=True).stdout:
        raise SandboxError(f"{path} is dynamically linked; install `busybox-static` instead of `busybox`")
    return path


def image_tag(busybox: Path) -> str:
    digest = hashlib.sha256(busybox.read_bytes()).hexdigest()[:12]
    return f"{REPOSITORY}:{digest}"


def write_rootfs(busybox: Path, dest: Path) -> Path:
    """Write a minimal rootfs tarball: busybox + applet links, /tmp, /workspace (owned by nobody)."""
    applets = subprocess.run(
        [str(busybox), "--list"], capture_output=True, text=True, check=True
    ).stdout.split()
    with tarfile.open(dest, "w") as tar:
        for name, mode, owner in [
            ("bin", 0o755, 0),
            ("etc", 0o755, 0),
            ("proc", 0o755, 0),
            ("dev", 0o755, 0),
            ("sys", 0o755, 0),
            ("root", 0o700, 0),
            ("tmp", 0o1777, 0),
            ("workspace", 0o755, NOBODY),
        ]:
            info = tarfile.TarInfo(name)
            info.type, info.mode, info.uid, info.gid = tarfile.DIRTYPE, mode, owner, owner
            tar.addfile(info)
        tar.add(str(busybox), arcname="bin/busybox", filter=_owned_by_root)
        for applet in sorted(set(applets) - {"busybox"}):
            link = tarfile.TarInfo(f"bin/{applet}")
            link.type, link.linkname, link.mode = tarfile.SYMTYPE, "busybox", 0o777
            tar.addfile(link)
        for name, text in [("etc/passwd", _PASSWD), ("etc/group", _GROUP)]:
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), 0o644
            tar.addfile(info, io.BytesIO(data))
    return dest


def _owned_by_root(info: tarfile.TarInfo) -> tarfile.TarInfo:
    info.uid = info.gid = 0
    info.uname = info.gname = "root"
    return info


def ensure_busybox_image(client: Any) -> str:
    """Import the busybox image into the engine behind `client` (a docker.DockerClient) unless present."""
    import docker.errors

    busybox = find_busybox()
    tag = image_tag(busybox)
    try:
        client.images.get(tag)
        return tag
    except docker.errors.ImageNotFound:
        pass
    repository, version = tag.split(":")
    with tempfile.TemporaryDirectory(prefix="recreate-rootfs-") as tmp:
        tarball = write_rootfs(busybox, Path(tmp) / "rootfs.tar")
        answer = client.api.import_image_from_file(str(tarball))
    # Podman ignores the import's repository/tag parameters, so tag the new image id explicitly.
    image_ids = re.findall(r"sha256:[0-9a-f]{64}", str(answer))
    if not image_ids:
        raise SandboxError(f"image import returned no image id: {answer!r}")
    client.api.tag(image_ids[-1], repository, version)
    return tag


def main() -> None:
    import docker

    print(ensure_busybox_image(docker.from_env()))


if __name__ == "__main__":
    main()
