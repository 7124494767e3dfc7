"""Sandbox overheads: trivial-command round trip (p50/p95) per backend, open+close cost, and a docker
session's command (over the container's attach channel; and its one-engine-exec fallback) against
`docker exec` (or `podman exec`) via a CLI subprocess on the same container.

    .venv/bin/python benchmarks/sandbox.py [--runs 100]

Uses DOCKER_HOST when set, else starts Podman's API service for the run (needs busybox-static for
the offline image). Baselines run side by side: a plain host `sh -c true`, and a fresh bwrap per
command (what the per-session bwrap + nsenter design avoids).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import tempfile
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from recreate.sandbox import SandboxSpec, get_sandbox
from recreate.sandbox.bwrap import bwrap_argv
from recreate.sandbox.spares import ASKS_BEFORE_SPARES

REPO = Path(__file__).resolve().parents[1]
SERVICE = REPO / "scripts" / "podman_service.sh"
OURS = "docker: our session.run (attach channel)"
FALLBACK = "docker: our session.run, engine-exec fallback"


def timings_ms(action: Callable[[], object], runs: int, warmup: int = 3) -> list[float]:
    for _ in range(warmup):
        action()
    samples = []
    for _ in range(runs):
        started = time.perf_counter()
        action()
        samples.append((time.perf_counter() - started) * 1000)
    return samples


def p50_p95(samples: list[float]) -> tuple[float, float]:
    ordered = sorted(samples)
    return statistics.median(ordered), ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]


def checked(run: Callable[[], object]) -> Callable[[], object]:
    def action() -> object:
        result = run()
        if getattr(result, "exit_code", 0) != 0 and getattr(result, "returncode", 0) != 0:
            raise RuntimeError(f"benchmark command failed: {result}")
        return result

    return action


def session_rows(backend: str, runs: int, options: dict[str, str]) -> list[tuple[str, list[float]]]:
    sandbox = get_sandbox(backend, **options)
    rows = []
    for persistent in (False, True):
        with sandbox.open(SandboxSpec(persistent=persistent)) as session:
            label = f"{backend}: run('true'){' persistent' if persistent else ''}"
            rows.append((label, timings_ms(checked(lambda s=session: s.run("true", timeout=60)), runs)))
    open_runs = max(5, runs // 10)
    cold = getattr(sandbox, "_open_now", sandbox.open)  # a backend's open without its spares
    rows.append((f"{backend}: open + close", timings_ms(lambda: cold(SandboxSpec()).close(), open_runs, 1)))
    if hasattr(sandbox, "close_spares"):
        rows.append((f"{backend}: open with a spare ready", spare_opens_ms(sandbox, open_runs)))
    return rows


def spare_opens_ms(sandbox: Any, runs: int) -> list[float]:
    """An open of a spec asked for before, its spare opened while the caller did something else."""
    spec, samples = SandboxSpec(), []
    for _ in range(ASKS_BEFORE_SPARES):
        sandbox.open(spec).close()
    for _ in range(runs):
        time.sleep(0.3)  # the caller's model call, during which the spare opens
        began = time.perf_counter()
        session = sandbox.open(spec)
        samples.append((time.perf_counter() - began) * 1000)
        session.close()
    sandbox.close_spares()
    return samples


def fresh_bwrap_per_command(runs: int) -> list[float]:
    argv = [a for a in bwrap_argv(SandboxSpec(), 0) if a not in ("--info-fd", "0")]
    return timings_ms(checked(lambda: subprocess.run([*argv, "/bin/sh", "-c", "true"])), runs)


def docker_rows(runs: int, image: str) -> list[tuple[str, list[float]]]:
    """Our session.run against each CLI present, on one container: `docker exec` (through DOCKER_HOST,
    the same API) and `podman exec` (local podman, same storage when the service runs as root)."""
    sandbox = get_sandbox("docker", image=image)
    clis = {name: path for name in ("docker", "podman") if (path := shutil.which(name))}
    with sandbox.open(SandboxSpec()) as session:
        rows = [(OURS, timings_ms(checked(lambda: session.run("true")), runs))]
        mode, session.channel.mode = session.channel.mode, "none"
        rows.append((FALLBACK, timings_ms(checked(lambda: session.run("true")), runs)))
        session.channel.mode = mode
        for name, path in clis.items():
            command = [path, "exec", "-u", "65534:65534", session.id, "/bin/sh", "-c", "true"]
            action = checked(lambda c=command: subprocess.run(c, capture_output=True))
            rows.append((f"docker: `{name} exec` CLI", timings_ms(action, runs)))
    return rows


def ensure_docker(stack: list[Callable[[], None]]) -> str | None:
    """An image tag to benchmark with, starting Podman's API service when DOCKER_HOST is unset."""
    try:
        import docker

        from recreate.sandbox.images import ensure_busybox_image
    except ImportError:
        return None
    if not os.environ.get("DOCKER_HOST"):
        if shutil.which("podman") is None:
            return None
        service_dir = tempfile.mkdtemp()
        url = subprocess.run([str(SERVICE), "start", service_dir], capture_output=True, text=True, check=True)
        os.environ["DOCKER_HOST"] = url.stdout.strip()
        stack.append(lambda: subprocess.run([str(SERVICE), "stop", service_dir], check=False))
    return ensure_busybox_image(docker.from_env())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--runs", type=int, default=100, help="samples per round-trip figure (docker: a third)"
    )
    args = parser.parse_args()
    warnings.simplefilter("ignore")  # the local backend's no-isolation warning
    console = Console()
    rows: list[tuple[str, list[float]]] = []
    cleanup: list[Callable[[], None]] = []
    try:
        with console.status("host baseline"):
            rows.append(
                (
                    "host: subprocess sh -c true",
                    timings_ms(checked(lambda: subprocess.run(["/bin/sh", "-c", "true"])), args.runs),
                )
            )
        with console.status("local"):
            rows += session_rows("local", args.runs, {})
        if get_sandbox("bwrap").available()[0]:
            with console.status("bwrap"):
                rows += session_rows("bwrap", args.runs, {})
                rows.append(("bwrap: fresh bwrap per command (baseline)", fresh_bwrap_per_command(args.runs)))
        with console.status("docker"):
            image = ensure_docker(cleanup)
            if image:
                rows += session_rows("docker", max(10, args.runs // 3), {"image": image})
                rows += docker_rows(max(10, args.runs // 3), image)
    finally:
        for stop in cleanup:
            stop()
    table = Table("measurement", "n", "p50 ms", "p95 ms", title="sandbox overheads")
    figures = {}
    for label, samples in rows:
        p50, p95 = p50_p95(samples)
        figures[label] = p50
        table.add_row(label, str(len(samples)), f"{p50:.2f}", f"{p95:.2f}")
    console.print(table)
    host = figures["host: subprocess sh -c true"]
    for backend in ("local", "bwrap"):
        for kind in ("", " persistent"):
            ours = figures.get(f"{backend}: run('true'){kind}")
            if ours is not None:
                console.print(
                    f"{backend}{kind} p50 per command: {ours:.2f} ms = {ours / host:.2f}x a host sh -c true "
                    "(target <= 1.5 ms)"
                )
    for label, cli in figures.items():
        if OURS in figures and label.endswith("exec` CLI"):
            name = label.split("`")[1]
            console.print(f"docker session.run / {name} = {figures[OURS] / cli:.2f} (target <= 0.5)")
            console.print(f"  engine-exec fallback / {name} = {figures[FALLBACK] / cli:.2f}")


if __name__ == "__main__":
    main()
