"""`python -m recreate.testing`: serve scripted chat completions on 127.0.0.1, to dry-run recreate offline.

    python -m recreate.testing --port 8011 &                # the `loop` behaviour: evolve runs end to end
    export OPENAI_BASE_URL=http://127.0.0.1:8011/v1
    recreate evolve --seed scaffolds/minimal --domain jsonl --data examples/custom_domain/tasks.jsonl ...

`--responder` picks the behaviour: `loop` (default), `ok`, or your own `MODULE:FUNCTION` /
`FILE.py:FUNCTION` taking the request body and returning a `recreate.testing.Reply` (see behaviours.py).
"""

from __future__ import annotations

import argparse
import math
import signal
import sys
import threading
from collections.abc import Callable
from typing import NoReturn

from recreate.testing.behaviours import load_responder
from recreate.testing.openai_server import ScriptedOpenAIServer


def _in_range(kind: type[int] | type[float], low: float, high: float) -> Callable[[str], float]:
    """An argparse type: a `kind` from `low` to `high` (finite), else a usage error saying so."""

    def parse(text: str) -> float:
        try:
            value = kind(text)
        except ValueError:
            value = math.nan
        if not low <= value <= high:
            what = "a whole number" if kind is int else "a number"
            raise argparse.ArgumentTypeError(f"{text!r} is not {what} from {low:g} to {high:g}")
        return value

    return parse


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        """A bad option in one line (argparse's own error prints its usage first)."""
        self.exit(2, f"error: {message} (see --help)\n")


def main(argv: list[str] | None = None) -> int:
    parser = _Parser(
        prog="python -m recreate.testing",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--port", type=_in_range(int, 0, 65535), default=8011, help="port on 127.0.0.1 (0: any free port)"
    )
    parser.add_argument("--responder", default="loop", help="loop, ok, MODULE:FUNCTION or FILE.py:FUNCTION")
    parser.add_argument("--model", default="scripted", help="the model name /v1/models lists")
    parser.add_argument(
        "--latency", type=_in_range(float, 0, 3600), default=0.0, help="seconds before each reply"
    )
    parser.add_argument(
        "--fault-rate", type=_in_range(float, 0, 1), default=0.0, help="share of calls answered 429/500/503"
    )
    args = parser.parse_args(argv)
    try:
        responder = load_responder(args.responder)
    except (ValueError, ImportError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    server = ScriptedOpenAIServer(
        responder, latency_s=args.latency, fault_rate=args.fault_rate, model=args.model, port=args.port
    )
    try:
        server.start()
    except OSError as exc:
        print(
            f"error: --port {args.port}: {exc.strerror or exc}; pick another port (0: any free one)",
            file=sys.stderr,
        )
        return 2
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    print(f"scripted endpoint ({args.responder}) at {server.url}", flush=True)
    print(f"  export OPENAI_BASE_URL={server.url}   (Ctrl-C stops it)", flush=True)
    try:
        stop.wait()
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
