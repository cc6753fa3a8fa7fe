"""OpenAIChat against a real chat-completions server on loopback (no mocks of httpx)."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import anyio
import pytest

from actors import tool
from actors.models import Message, ModelError, ModelReply, OpenAIChat, ToolCall

Reply = tuple[int, dict[str, Any] | str, dict[str, str]]


class FakeServer:
    """A chat-completions server that answers from a script and records each request."""

    def __init__(self) -> None:
        self.script: list[Reply] = []
        self.requests: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        self.paths: list[str] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("content-length", "0"))
                server.requests.append(json.loads(self.rfile.read(length)))
                server.headers.append({k.lower(): v for k, v in self.headers.items()})
                server.paths.append(self.path)
                status, body, headers = server.script.pop(0) if server.script else (500, "empty script", {})
                data = (json.dumps(body) if isinstance(body, dict) else body).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                for key, value in headers.items():
                    self.send_header(key, value)
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(
            target=self.httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"


@pytest.fixture
def server() -> Iterator[FakeServer]:
    s = FakeServer()
    s.thread.start()
    try:
        yield s
    finally:
        s.httpd.shutdown()
        s.httpd.server_close()
        s.thread.join(5)


def completion(message: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
    }


def ok(message: dict[str, Any]) -> Reply:
    return (200, completion(message), {})


@tool
def refund(order_id: str, amount: float) -> str:
    """Refund an order."""
    return "ok"


def client(server: FakeServer, **kw: Any) -> OpenAIChat:
    kw.setdefault("backoff", 0.01)
    return OpenAIChat("gpt-test", base_url=server.base_url, **kw)


@pytest.mark.anyio
async def test_tool_call_reply_and_request_shape(server: FakeServer) -> None:
    server.script = [
        ok(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "call_abc",
                        "type": "function",
                        "function": {"name": "refund", "arguments": '{"order_id": "1042", "amount": 5.5}'},
                    }
                ],
            }
        ),
        ok({"role": "assistant", "content": "Refunded 5.50."}),
    ]
    model = client(server, api_key="sk-test")
    convo = [Message("system", "Be brief."), Message("user", "Refund order 1042", name="alice")]
    with anyio.fail_after(10):
        first = await model.complete(convo, [refund.schema()])
        assert first == ModelReply("", [ToolCall("refund", {"order_id": "1042", "amount": 5.5}, "call_abc")])
        convo += [
            first.to_message(),
            Message("tool", "ok", tool_call_id="call_abc", name="refund"),
        ]
        second = await model.complete(convo, [refund.schema()])
        await model.aclose()
    assert second == ModelReply("Refunded 5.50.")
    assert server.paths == ["/v1/chat/completions"] * 2
    assert server.headers[0]["authorization"] == "Bearer sk-test"
    req = server.requests[1]
    assert req["model"] == "gpt-test"
    assert req["tools"] == [refund.schema()]
    assert req["messages"][0] == {"role": "system", "content": "Be brief."}
    assert req["messages"][1] == {"role": "user", "content": "Refund order 1042", "name": "alice"}
    assistant = req["messages"][2]
    assert assistant["role"] == "assistant" and assistant["content"] is None
    call = assistant["tool_calls"][0]
    assert call["id"] == "call_abc" and call["type"] == "function"
    assert call["function"]["name"] == "refund"
    assert json.loads(call["function"]["arguments"]) == {"order_id": "1042", "amount": 5.5}
    assert req["messages"][3] == {"role": "tool", "content": "ok", "tool_call_id": "call_abc"}


@pytest.mark.anyio
async def test_no_tools_no_key_and_generated_ids(server: FakeServer) -> None:
    server.script = [
        ok(
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [{"type": "function", "function": {"name": "t"}}],
            }
        )
    ]
    async with client(server) as model:
        with anyio.fail_after(10):
            reply = await model.complete([Message("user", "hi")])
    assert "tools" not in server.requests[0]
    assert "authorization" not in server.headers[0]
    assert reply.tool_calls[0].name == "t" and reply.tool_calls[0].arguments == {}
    assert reply.tool_calls[0].id.startswith("call_")


@pytest.mark.anyio
async def test_500_then_200_is_retried(server: FakeServer) -> None:
    server.script = [
        (500, {"error": {"message": "overloaded"}}, {}),
        (429, {"error": {"message": "slow down"}}, {"retry-after": "0"}),
        ok({"role": "assistant", "content": "fine"}),
    ]
    model = client(server)
    with anyio.fail_after(10):
        assert await model.complete([Message("user", "hi")]) == ModelReply("fine")
    await model.aclose()
    assert len(server.requests) == 3


@pytest.mark.anyio
async def test_4xx_is_a_typed_error_without_retry(server: FakeServer) -> None:
    server.script = [(400, {"error": {"message": "bad tool schema"}}, {})]
    model = client(server)
    with anyio.fail_after(10), pytest.raises(ModelError, match=r"400.*bad tool schema") as info:
        await model.complete([Message("user", "hi")])
    await model.aclose()
    assert info.value.status_code == 400
    assert len(server.requests) == 1


@pytest.mark.anyio
async def test_retries_are_bounded(server: FakeServer) -> None:
    server.script = [(503, "unavailable", {})] * 3
    model = client(server, max_retries=2)
    with anyio.fail_after(10), pytest.raises(ModelError, match="503 after 3 attempts") as info:
        await model.complete([Message("user", "hi")])
    await model.aclose()
    assert info.value.status_code == 503 and info.value.body == "unavailable"
    assert len(server.requests) == 3


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@pytest.mark.anyio
async def test_connection_refused_is_retried_then_a_model_error() -> None:
    model = OpenAIChat("m", base_url=f"http://127.0.0.1:{_free_port()}/v1", max_retries=2, backoff=0.01)
    with anyio.fail_after(10), pytest.raises(ModelError, match="unreachable after 3 attempts"):
        await model.complete([Message("user", "hi")])
    await model.aclose()


@pytest.mark.anyio
async def test_malformed_replies_are_model_errors(server: FakeServer) -> None:
    bad_args: Callable[[], Reply] = lambda: ok(  # noqa: E731
        {
            "role": "assistant",
            "tool_calls": [{"id": "c", "function": {"name": "t", "arguments": "{not json"}}],
        }
    )
    server.script = [(200, "not json at all", {}), (200, {"choices": []}, {}), bad_args()]
    model = client(server)
    with anyio.fail_after(10):
        with pytest.raises(ModelError, match="not JSON"):
            await model.complete([Message("user", "hi")])
        with pytest.raises(ModelError, match="not a chat completion"):
            await model.complete([Message("user", "hi")])
        with pytest.raises(ModelError, match="arguments that are not JSON"):
            await model.complete([Message("user", "hi")])
    await model.aclose()


@pytest.mark.anyio
async def test_timeout_is_retried_then_an_error(server: FakeServer) -> None:
    release = threading.Event()
    original = server.httpd.RequestHandlerClass

    class Slow(original):  # type: ignore[misc, valid-type]
        def do_POST(self) -> None:
            release.wait(5)
            super().do_POST()

    server.httpd.RequestHandlerClass = Slow
    model = client(server, timeout=0.1, max_retries=1)
    try:
        with anyio.fail_after(10), pytest.raises(ModelError, match=r"unreachable after 2 attempts.*Timeout"):
            await model.complete([Message("user", "hi")])
    finally:
        release.set()
        await model.aclose()
