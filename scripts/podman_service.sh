#!/usr/bin/env bash
# Start or stop Podman's Docker-compatible API service, configured the way these machines need it
# (no CAP_SYS_RESOURCE: empty default_ulimits; hybrid cgroups: the runc runtime).
#
#   scripts/podman_service.sh start DIR   # prints DOCKER_HOST (unix://DIR/podman.sock) once the API answers
#   scripts/podman_service.sh stop DIR
set -euo pipefail

action=${1:?usage: podman_service.sh start|stop DIR}
dir=${2:?usage: podman_service.sh start|stop DIR}
mkdir -p "$dir" && dir=$(cd "$dir" && pwd)  # absolute: the service runs from inside it
sock="$dir/podman.sock"
pidfile="$dir/podman.pid"

case "$action" in
start)
    command -v podman >/dev/null || { echo "podman is not installed (apt-get install -y podman runc)" >&2; exit 3; }
    mkdir -p "$dir"
    printf '[containers]\ndefault_ulimits = []\n' >"$dir/containers.conf"
    runtime=$(command -v runc || true)
    # run from $dir: conmon leaves an `oom` marker file in the service's working directory
    (cd "$dir" && CONTAINERS_CONF="$dir/containers.conf" exec setsid podman ${runtime:+--runtime "$runtime"} \
        system service --time=0 "unix://$sock" >"$dir/podman.log" 2>&1) &
    echo $! >"$pidfile"
    for _ in $(seq 1 300); do
        if [ -S "$sock" ] && podman --url "unix://$sock" version >/dev/null 2>&1; then
            echo "unix://$sock"
            exit 0
        fi
        kill -0 "$(cat "$pidfile")" 2>/dev/null || break
        sleep 0.1
    done
    echo "podman API service did not start; log:" >&2
    cat "$dir/podman.log" >&2
    exit 1
    ;;
stop)
    if [ -f "$pidfile" ]; then
        pid=$(cat "$pidfile")
        kill "$pid" 2>/dev/null || true
        for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
        kill -9 "$pid" 2>/dev/null || true
        rm -f "$pidfile" "$sock"
    fi
    ;;
*)
    echo "usage: podman_service.sh start|stop DIR" >&2
    exit 2
    ;;
esac
