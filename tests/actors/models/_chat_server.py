"""A chat-completions server of the tests' own, on loopback: it answers from a script, records each request.

A real HTTP server (the standard library's, one thread per connection), so the client under test
goes through httpx, sockets and HTTP as it would against a real server. Each scripted
:class:`Reply` is a status, a body and headers, optionally after a delay, or a list of server-sent
event chunks written one by one.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Reply:
    status: int = 200
    body: dict[str, Any] | str = ""
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0
    #: Server-sent events: each item is one ``data:`` payload (a dict as JSON, or a raw string such
    #: as ``[DONE]``; a string starting with ``:`` is a comment line), written and flushed on its own
    #: after ``chunk_delay`` seconds, in a chunked body.
    chunks: list[dict[str, Any] | str] | None = None
    chunk_delay: float = 0.0
    #: Drop the connection before chunk number ``cut_after`` (no end of the chunked body).
    cut_after: int | None = None


@dataclass
class Request:
    path: str
    headers: dict[str, str]
    raw: bytes
    at: float

    @property
    def body(self) -> Any:
        return json.loads(self.raw)


def completion(message: dict[str, Any], finish_reason: str | None = "stop") -> dict[str, Any]:
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1764590000,
        "model": "test-model",
        "choices": [{"index": 0, "message": message, "finish_reason": finish_reason}],
    }


def ok(message: dict[str, Any], finish_reason: str | None = "stop", **kw: Any) -> Reply:
    return Reply(200, completion(message, finish_reason), **kw)


class ChatServer:
    """The server: ``script`` is consumed one reply per request; ``requests`` records what came."""

    def __init__(self) -> None:
        self.script: list[Reply] = []
        self.requests: list[Request] = []
        self.release = threading.Event()  # set at shutdown: delayed replies stop waiting
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                length = int(self.headers.get("content-length", "0"))
                raw = self.rfile.read(length)
                server.requests.append(
                    Request(self.path, {k.lower(): v for k, v in self.headers.items()}, raw, time.monotonic())
                )
                reply = server.script.pop(0) if server.script else Reply(500, "empty script")
                if reply.delay and server.release.wait(reply.delay):
                    return
                try:
                    if reply.chunks is not None:
                        self._stream(reply)
                    else:
                        self._answer(reply)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (a timeout test)

            def _answer(self, reply: Reply) -> None:
                data = (json.dumps(reply.body) if isinstance(reply.body, dict) else reply.body).encode()
                self.send_response(reply.status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                for key, value in reply.headers.items():
                    self.send_header(key, value)
                self.end_headers()
                self.wfile.write(data)

            def _stream(self, reply: Reply) -> None:
                self.send_response(reply.status)
                self.send_header("content-type", "text/event-stream")
                self.send_header("cache-control", "no-cache")
                self.send_header("transfer-encoding", "chunked")
                for key, value in reply.headers.items():
                    self.send_header(key, value)
                self.end_headers()
                for n, chunk in enumerate(reply.chunks or []):
                    if reply.chunk_delay and server.release.wait(reply.chunk_delay):
                        return
                    if n == reply.cut_after:  # the connection drops mid-stream
                        self.close_connection = True
                        return
                    if isinstance(chunk, str) and chunk.startswith(":"):
                        data = f"{chunk}\n\n".encode()  # a comment (a keep-alive)
                    else:
                        payload = json.dumps(chunk) if isinstance(chunk, dict) else chunk
                        data = f"data: {payload}\n\n".encode()
                    self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
                    self.wfile.flush()
                self.wfile.write(b"0\r\n\r\n")

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(
            target=self.httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}"

    @property
    def base_url(self) -> str:
        return self.url + "/v1"

    def bodies(self) -> list[Any]:
        return [r.body for r in self.requests]


def serve() -> Iterator[ChatServer]:
    s = ChatServer()
    s.thread.start()
    try:
        yield s
    finally:
        s.release.set()
        s.httpd.shutdown()
        s.httpd.server_close()
        s.thread.join(5)
