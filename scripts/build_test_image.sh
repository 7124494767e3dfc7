#!/usr/bin/env bash
# Build the offline test image (a busybox-static rootfs imported through the Docker Engine API; no
# registry) and print its tag. An image with that tag is reused. Uses DOCKER_HOST when set, else a
# temporary Podman API service. Needs: apt-get install -y busybox-static podman runc
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
python="${PYTHON:-$repo/.venv/bin/python}"
if [ -z "${DOCKER_HOST:-}" ]; then
    service_dir="$(mktemp -d)"
    trap '"$repo/scripts/podman_service.sh" stop "$service_dir"; rm -rf "$service_dir"' EXIT
    DOCKER_HOST="$("$repo/scripts/podman_service.sh" start "$service_dir")"
    export DOCKER_HOST
fi
cd "$repo" && "$python" -m recreate.sandbox.images
