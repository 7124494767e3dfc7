"""A real OpenAI-compatible HTTP server on 127.0.0.1 that serves scripted chat completions.

For tests, benchmarks and offline dry runs of a scaffold: the real `openai` client and `ChatOpenAI` talk
to it over HTTP. Replies come from a FIFO queue (`enqueue`) and then from a responder function; each can
carry tool calls, usage, provider cost, logprobs/token ids, latency, or a fault (HTTP status, a delay
longer than the client's timeout, a malformed body, malformed tool-call JSON, empty content).

Built on the standard library's `http.server`, not starlette/uvicorn, on purpose: this module ships in the
core distribution (`python -m recreate.testing` dry-runs a scaffold on a plain install, without the `ui`
extra that brings starlette and uvicorn); it starts in about a millisecond on a thread of the caller
(hundreds of tests start one each); and its faults need no framework: a reply is bytes we write. Each
connection carries one request (`Connection: close`): a kept-alive one would stay open in the client's
pool after the server stops (langchain keeps one HTTP client per base URL), two descriptors per server.
"""

from __future__ import annotations

import json
import random
import re
import threading
import time
import uuid
import zlib
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Reply:
    content: str | None = None
    tool_calls: list[dict[str, Any]] | None = None  # [{"name": ..., "arguments": dict | raw str}]
    status: int = 200  # non-200: an error response (429, 500, ...)
    error: str | None = None  # the error response's message (default: "injected fault <status>")
    delay_s: float = 0.0  # latency before answering; longer than the client timeout = a timeout fault
    cost: float | None = None  # provider-reported cost in usage.cost
    cached_tokens: int = 0
    raw_body: str | None = None  # sent verbatim (malformed JSON faults)
    finish_reason: str | None = None


def text(content: str, **kw: Any) -> Reply:
    return Reply(content=content, **kw)


def tool_call(
    name: str, arguments: dict[str, Any] | str | None = None, *, content: str = "", **kw: Any
) -> Reply:
    return Reply(content=content, tool_calls=[{"name": name, "arguments": arguments or {}}], **kw)


Responder = Callable[[dict[str, Any]], Reply]
_TOKEN = re.compile(r"\s*\S+|\s+")


def tokenize(content: str) -> list[str]:
    return _TOKEN.findall(content)


def token_id(tok: str) -> int:
    return zlib.crc32(tok.encode()) % 50_000


class ScriptedOpenAIServer:
    """`with ScriptedOpenAIServer() as srv: ChatOpenAI(base_url=srv.url, ...)`."""

    def __init__(
        self,
        responder: Responder | None = None,
        *,
        latency_s: float = 0.0,
        fault_rate: float = 0.0,
        fault_seed: int = 0,
        model: str = "scripted",
        port: int = 0,  # 0: any free port
        served_models: list[dict[str, Any]] | None = None,
    ):
        self.responder = responder
        self.latency_s = latency_s
        self.fault_rate = fault_rate
        self.model = model
        self.port = port
        # what GET /v1/models lists; e.g. {"id": ..., "owned_by": "vllm", "parent": ...} to pose as vLLM
        self.served_models = served_models or [{"id": model, "object": "model"}]
        self.requests: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        self.faults_served = 0
        self._queue: deque[Reply] = deque()
        self._lock = threading.Lock()
        self._rng = random.Random(fault_seed)
        self._httpd: ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        assert self._httpd is not None, "server not started"
        return f"http://127.0.0.1:{self._httpd.server_address[1]}/v1"

    def enqueue(self, *replies: Reply) -> None:
        with self._lock:
            self._queue.extend(replies)

    def start(self) -> ScriptedOpenAIServer:
        self._httpd = ThreadingHTTPServer(("127.0.0.1", self.port), _make_handler(self))
        self._httpd.daemon_threads = True
        threading.Thread(target=self._httpd.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        if self._httpd:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None

    def __enter__(self) -> ScriptedOpenAIServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def next_reply(self, body: dict[str, Any]) -> Reply:
        with self._lock:
            self.requests.append(body)
            if self.fault_rate and self._rng.random() < self.fault_rate:
                self.faults_served += 1
                return Reply(status=self._rng.choice([429, 500, 503]))
            if self._queue:
                return self._queue.popleft()
        if self.responder is not None:
            return self.responder(body)
        return Reply(content="ok")

    def completion(self, body: dict[str, Any], reply: Reply) -> dict[str, Any]:
        content = reply.content or ""
        tokens = tokenize(content)
        message: dict[str, Any] = {"role": "assistant", "content": content}
        if reply.tool_calls:
            message["tool_calls"] = [
                {
                    "id": f"call_{uuid.uuid4().hex[:12]}",
                    "type": "function",
                    "function": {
                        "name": tc["name"],
                        "arguments": tc["arguments"]
                        if isinstance(tc["arguments"], str)
                        else json.dumps(tc["arguments"]),
                    },
                }
                for tc in reply.tool_calls
            ]
            tokens += tokenize(" ".join(t["function"]["arguments"] for t in message["tool_calls"]))
        prompt_chars = sum(len(json.dumps(m)) for m in body.get("messages", []))
        usage: dict[str, Any] = {
            "prompt_tokens": max(1, prompt_chars // 4),
            "completion_tokens": len(tokens),
            "total_tokens": max(1, prompt_chars // 4) + len(tokens),
            "prompt_tokens_details": {"cached_tokens": reply.cached_tokens},
        }
        if reply.cost is not None:
            usage["cost"] = reply.cost
        choice: dict[str, Any] = {
            "index": 0,
            "message": message,
            "finish_reason": reply.finish_reason or ("tool_calls" if reply.tool_calls else "stop"),
        }
        if body.get("logprobs"):
            as_ids = bool(body.get("return_tokens_as_token_ids"))
            choice["logprobs"] = {
                "content": [
                    {
                        "token": f"token_id:{token_id(t)}" if as_ids else t,
                        "logprob": -0.05 * (1 + i % 7),
                        "bytes": list(t.encode()),
                        "top_logprobs": [],
                    }
                    for i, t in enumerate(tokens)
                ]
            }
        return {
            "id": f"chatcmpl-{uuid.uuid4().hex[:12]}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body.get("model", self.model),
            "choices": [choice],
            "usage": usage,
        }


def _stream_chunks(completion: dict[str, Any]) -> list[dict[str, Any]]:
    choice = completion["choices"][0]
    msg = choice["message"]
    base = {k: completion[k] for k in ("id", "created", "model")} | {"object": "chat.completion.chunk"}
    delta: dict[str, Any] = {"role": "assistant", "content": msg["content"]}
    if msg.get("tool_calls"):
        delta["tool_calls"] = [dict(tc, index=i) for i, tc in enumerate(msg["tool_calls"])]
    first = {"index": 0, "delta": delta, "finish_reason": None}
    if "logprobs" in choice:
        first["logprobs"] = choice["logprobs"]
    return [
        base | {"choices": [first]},
        base | {"choices": [{"index": 0, "delta": {}, "finish_reason": choice["finish_reason"]}]},
        base | {"choices": [], "usage": completion["usage"]},
    ]


def _make_handler(server: ScriptedOpenAIServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        # Headers and body go out as two writes: with Nagle on, the body waits for the client's
        # delayed ACK of the headers, adding ~40 ms to every call (a simulated endpoint must not).
        disable_nagle_algorithm = True

        def log_message(self, *args: Any) -> None:  # keep test output clean
            pass

        def _send(self, status: int, payload: str, content_type: str = "application/json") -> None:
            data = payload.encode()
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(data)))
            self.send_header("Connection", "close")  # one request per connection (module docstring)
            self.close_connection = True
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            if self.path.rstrip("/").endswith("/models"):
                self._send(200, json.dumps({"object": "list", "data": server.served_models}))
            else:
                self._send(200 if self.path == "/health" else 404, "{}")

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length", 0))
            try:
                body = json.loads(self.rfile.read(length) or b"{}")
            except json.JSONDecodeError:
                self._send(400, json.dumps({"error": {"message": "invalid JSON body"}}))
                return
            if not self.path.rstrip("/").endswith("/chat/completions"):
                self._send(404, json.dumps({"error": {"message": f"no route {self.path}"}}))
                return
            with server._lock:
                server.headers.append({k.lower(): v for k, v in self.headers.items()})
            reply = server.next_reply(body)
            try:
                time.sleep(server.latency_s + reply.delay_s)
                if reply.status != 200:
                    message = reply.error or f"injected fault {reply.status}"
                    err = {"error": {"message": message, "type": "server_error"}}
                    self._send(reply.status, json.dumps(err))
                elif reply.raw_body is not None:
                    self._send(200, reply.raw_body)
                elif body.get("stream"):
                    events = "".join(
                        f"data: {json.dumps(c)}\n\n" for c in _stream_chunks(server.completion(body, reply))
                    )
                    self._send(200, events + "data: [DONE]\n\n", "text/event-stream")
                else:
                    self._send(200, json.dumps(server.completion(body, reply)))
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client gave up (timeout fault); it will retry

    return Handler
