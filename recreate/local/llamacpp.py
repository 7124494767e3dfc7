"""The light engine: llama.cpp's OpenAI-compatible server (the `xllamacpp` wheel) serving a GGUF file.

Runs as its own process (`python -m recreate.local.llamacpp --model FILE --port N`), managed by
`recreate.local.server.LocalServer`. It starts in about a second and generates 50-70 tokens/s for the
135M embedded model on one core. Its chat template for SmolLM2 drops `tools`, so agents on it use the
text action format. `logprobs` requests return the sampled tokens' log-probabilities and ids.
LoRA adapters from the trainer are not loaded here (they would need a GGUF conversion): the training
loop serves through vLLM. Its CORS answers name its own origin only, never a caller's, and it answers only
requests that carry the key `LocalServer` made for it (see `recreate.local.server`).
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
from pathlib import Path

from recreate.local.embedded import LocalModel, LocalModelError
from recreate.local.keys import KEY_ENV

ENGINE = "llamacpp"
INSTALL_HINT = "pip install 'recreate[local]' (the xllamacpp wheel)"


def default_threads() -> int:
    # one thread holds 47-60 tok/s on a loaded 2-core machine; two collapse to 9-24 under contention
    return max(1, (os.cpu_count() or 2) // 2)


def available() -> bool:
    import importlib.util

    return importlib.util.find_spec("xllamacpp") is not None


def command(
    model: LocalModel,
    *,
    port: int,
    host: str = "127.0.0.1",
    threads: int | None = None,
    parallel: int = 4,
    ctx_per_slot: int = 4096,
) -> list[str]:
    """The command line that serves `model`'s GGUF file."""
    if model.gguf is None:
        raise LocalModelError(f"{model.name} has no GGUF file; the llamacpp engine serves GGUF models only")
    if not available():
        raise LocalModelError(f"the llamacpp engine is not installed: {INSTALL_HINT}")
    return [
        sys.executable, "-m", "recreate.local.llamacpp", "--model", str(model.gguf), "--alias", model.name,
        "--host", host, "--port", str(port), "--threads", str(threads or default_threads()),
        "--parallel", str(parallel), "--ctx-per-slot", str(ctx_per_slot),
    ]  # fmt: skip


def serve(args: argparse.Namespace) -> None:
    import xllamacpp

    params = xllamacpp.CommonParams()
    params.model.path = args.model
    params.model_alias = {args.alias}
    params.hostnames = [args.host]
    params.port = args.port
    params.n_parallel = args.parallel
    params.n_ctx = args.ctx_per_slot * args.parallel
    params.cpuparams.n_threads = args.threads
    params.cpuparams_batch.n_threads = args.threads
    params.use_jinja = True
    # the key LocalServer made for this start: every request but /health needs it (popped so that nothing
    # this process starts inherits it; /proc/PID/environ, readable by this user only, still shows it)
    key = os.environ.pop(KEY_ENV, "")
    if key:
        params.api_keys = [key]
    # CORS: llama.cpp reflects any Origin by default, which lets any web page read the answers; name our
    # own origin instead (a page elsewhere gets a header that is not its origin: the browser blocks it)
    params.cors_origins = f"http://{args.host}:{args.port}"
    params.cors_origins_explicit = True
    params.cors_credentials = False
    server = xllamacpp.Server(params)
    print(f"llamacpp: serving {args.alias} at http://{args.host}:{args.port}/v1", flush=True)
    threading.Event().wait()  # the server runs in its own threads; this process lives until killed
    del server


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True, help="GGUF file")
    parser.add_argument("--alias", required=True, help="the model name the server answers to")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--threads", type=int, default=default_threads())
    parser.add_argument("--parallel", type=int, default=4)
    parser.add_argument("--ctx-per-slot", type=int, default=4096)
    args = parser.parse_args(argv)
    if not Path(args.model).is_file():
        parser.error(f"--model {args.model}: no such file")
    if not 1 <= args.port <= 65535:
        parser.error(f"--port {args.port}: not a port; pass one from 1 to 65535")
    serve(args)


if __name__ == "__main__":
    main()
