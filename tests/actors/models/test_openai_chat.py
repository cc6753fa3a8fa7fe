"""OpenAIChat against a chat-completions server of the tests' own on loopback (no mocks of httpx).

The request: its path, headers, query, and what is sent when there are no tools; the environment
defaults; redirects; a 4xx; reply shapes of real servers (ids missing, arguments as an object, the
legacy ``function_call``). Retries and timeouts: test_openai_retry.py; why a reply ended and content
parts: test_openai_replies.py; the body against the official SDK's: test_openai_wire.py.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import anyio
import pytest
from _chat_server import ChatServer, Reply, ok, serve

from actors import tool
from actors.models import Message, ModelError, ModelReply, OpenAIChat, ToolCall

pytestmark = pytest.mark.anyio
LIMIT = 10.0


@pytest.fixture
def server() -> Iterator[ChatServer]:
    yield from serve()


@tool
def refund(order_id: str, amount: float) -> str:
    """Refund an order."""
    return "ok"


def client(server: ChatServer, **kw: Any) -> OpenAIChat:
    kw.setdefault("backoff", 0.01)
    return OpenAIChat("gpt-test", base_url=server.base_url, **kw)


def call(name: str, arguments: Any, call_id: str | None = "call_1") -> dict[str, Any]:
    out: dict[str, Any] = {"type": "function", "function": {"name": name, "arguments": arguments}}
    if call_id is not None:
        out["id"] = call_id
    return out


async def test_a_tool_call_round_trip(server: ChatServer) -> None:
    args = '{"order_id": "1042", "amount": 5.5}'
    server.script = [
        ok(
            {"role": "assistant", "content": None, "tool_calls": [call("refund", args, "call_abc")]},
            "tool_calls",
        ),
        ok({"role": "assistant", "content": "Refunded 5.50."}),
    ]
    convo = [Message("system", "Be brief."), Message("user", "Refund order 1042", name="alice")]
    async with client(server, api_key="sk-test") as model:
        with anyio.fail_after(LIMIT):
            first = await model.complete(convo, [refund.schema()])
            expected = ToolCall(
                "refund", {"order_id": "1042", "amount": 5.5}, "call_abc", arguments_text=args
            )
            assert first == ModelReply("", [expected])
            convo += [first.to_message(), Message("tool", "ok", tool_call_id="call_abc", name="refund")]
            second = await model.complete(convo, [refund.schema()])
    assert second == ModelReply("Refunded 5.50.")
    assert [r.path for r in server.requests] == ["/v1/chat/completions"] * 2
    assert server.requests[0].headers["authorization"] == "Bearer sk-test"
    assert server.requests[0].headers["content-type"] == "application/json"
    body = server.requests[1].body
    assert body["model"] == "gpt-test" and body["tools"] == [refund.schema()]
    assert body["messages"] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Refund order 1042", "name": "alice"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "call_abc", "type": "function", "function": {"name": "refund", "arguments": args}}
            ],
        },
        {"role": "tool", "tool_call_id": "call_abc", "content": "ok"},
    ]


async def test_arguments_go_back_as_the_model_wrote_them(server: ChatServer) -> None:
    # Spacing and non-ASCII exactly as received: no re-encoding, no \\u escapes (prefix caches match).
    args = '{"city":  "Zürich",\n "note": "naïve ☃"}'
    server.script = [
        ok({"role": "assistant", "tool_calls": [call("refund", args)]}, "tool_calls"),
        ok({"role": "assistant", "content": "ok"}),
    ]
    async with client(server) as model:
        with anyio.fail_after(LIMIT):
            reply = await model.complete([Message("user", "hi")], [refund.schema()])
            assert reply.tool_calls[0].arguments == {"city": "Zürich", "note": "naïve ☃"}
            convo = [Message("user", "hi"), reply.to_message(), Message("tool", "x", tool_call_id="call_1")]
            await model.complete(convo, [refund.schema()])
    raw = server.requests[1].raw
    assert '"arguments":"{\\"city\\":  \\"Zürich\\",\\n \\"note\\": \\"naïve ☃\\"}"'.encode() in raw
    assert b"\\u00fc" not in raw
    # A call the run made itself (no text from a model) is sent as compact JSON, non-ASCII as is.
    made = ModelReply(tool_calls=[ToolCall("refund", {"city": "Zürich"}, "c9")]).to_message()
    server.script = [ok({"role": "assistant", "content": "ok"})]
    async with client(server) as model:
        with anyio.fail_after(LIMIT):
            await model.complete([made, Message("tool", "x", tool_call_id="c9")], [refund.schema()])
    assert '"arguments":"{\\"city\\":\\"Zürich\\"}"'.encode() in server.requests[2].raw


async def test_no_tools_sends_no_tool_choice_and_no_key_sends_no_authorization(
    server: ChatServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    server.script = [ok({"role": "assistant", "content": "hello"})] * 2
    extra = {"temperature": 0, "tool_choice": "auto", "parallel_tool_calls": False}
    async with client(server, extra=extra) as model:
        with anyio.fail_after(LIMIT):
            assert await model.complete([Message("user", "hi")]) == ModelReply("hello")
            await model.complete([Message("user", "hi")], [refund.schema()])
    first, second = server.bodies()
    assert first == {"model": "gpt-test", "messages": [{"role": "user", "content": "hi"}], "temperature": 0}
    assert second["tool_choice"] == "auto" and second["parallel_tool_calls"] is False
    assert "authorization" not in server.requests[0].headers


async def test_base_url_and_api_key_default_to_the_environment(
    server: ChatServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_BASE_URL", server.base_url + "/")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-from-env")
    server.script = [ok({"role": "assistant", "content": "hi"})]
    async with OpenAIChat("m") as model:
        assert model.base_url == server.base_url
        with anyio.fail_after(LIMIT):
            await model.complete([Message("user", "hi")])
    assert server.requests[0].headers["authorization"] == "Bearer sk-from-env"
    # Given explicitly, they win over the environment.
    assert OpenAIChat("m", base_url="http://elsewhere/v1", api_key="k").api_key == "k"
    monkeypatch.delenv("OPENAI_BASE_URL")
    assert OpenAIChat("m").base_url == "https://api.openai.com/v1"


async def test_default_headers_and_query_go_with_every_request(server: ChatServer) -> None:
    # Azure's shape: an api-key header instead of a bearer token, and an api-version query parameter.
    server.script = [ok({"role": "assistant", "content": "hi"})] * 2
    headers = {"api-key": "azure-key", "OpenAI-Organization": "org-1", "OpenAI-Project": "proj-1"}
    async with client(server, default_headers=headers, default_query={"api-version": "2024-10-21"}) as model:
        with anyio.fail_after(LIMIT):
            await model.complete([Message("user", "hi")])
            await model.complete([Message("user", "again")])
    for request in server.requests:
        assert request.path == "/v1/chat/completions?api-version=2024-10-21"
        assert request.headers["api-key"] == "azure-key"
        assert request.headers["openai-organization"] == "org-1"
        assert request.headers["openai-project"] == "proj-1"


@pytest.mark.parametrize("status", [307, 308])
async def test_redirects_are_followed_with_the_same_body(server: ChatServer, status: int) -> None:
    server.script = [
        Reply(status, "", {"location": "/v2/chat/completions"}),
        ok({"role": "assistant", "content": "moved"}),
    ]
    async with client(server) as model:
        with anyio.fail_after(LIMIT):
            assert await model.complete([Message("user", "hi")]) == ModelReply("moved")
    assert [r.path for r in server.requests] == ["/v1/chat/completions", "/v2/chat/completions"]
    assert server.requests[0].raw == server.requests[1].raw


async def test_a_4xx_is_a_typed_error_without_retry(server: ChatServer) -> None:
    server.script = [Reply(400, {"error": {"message": "bad tool schema"}})]
    async with client(server) as model:
        with (
            anyio.fail_after(LIMIT),
            pytest.raises(ModelError, match=r"answered 400: bad tool schema$") as info,
        ):
            await model.complete([Message("user", "hi")])
    assert info.value.status_code == 400 and "bad tool schema" in info.value.body
    assert len(server.requests) == 1


async def test_missing_ids_object_arguments_and_the_legacy_function_call(server: ChatServer) -> None:
    server.script = [
        # vLLM/Ollama-shaped: no id, arguments already an object.
        ok({"role": "assistant", "content": "", "tool_calls": [call("refund", {"order_id": "7"}, None)]}),
        # No arguments at all.
        ok({"role": "assistant", "tool_calls": [call("refund", None, None)]}),
        # The legacy shape.
        ok({"role": "assistant", "function_call": {"name": "refund", "arguments": '{"order_id": "8"}'}}),
    ]
    async with client(server) as model:
        with anyio.fail_after(LIMIT):
            objects, empty, legacy = [await model.complete([Message("user", "hi")]) for _ in range(3)]
    (c1,) = objects.tool_calls
    assert (c1.name, c1.arguments, c1.arguments_text, c1.arguments_error) == (
        "refund",
        {"order_id": "7"},
        None,
        None,
    )
    assert c1.id.startswith("call_")
    assert empty.tool_calls[0].arguments == {} and empty.tool_calls[0].arguments_error is None
    (c3,) = legacy.tool_calls
    assert (c3.name, c3.arguments) == ("refund", {"order_id": "8"})


async def test_bodies_that_are_not_completions_are_model_errors(server: ChatServer) -> None:
    server.script = [
        Reply(200, "not json at all"),
        Reply(200, {"choices": []}),
        Reply(200, {"error": {"message": "upstream provider failed"}}),
        ok({"role": "assistant", "tool_calls": [{"type": "function", "function": {"arguments": "{}"}}]}),
    ]
    async with client(server) as model:
        with anyio.fail_after(LIMIT):
            with pytest.raises(ModelError, match="not JSON"):
                await model.complete([Message("user", "hi")])
            with pytest.raises(ModelError, match="not a chat completion"):
                await model.complete([Message("user", "hi")])
            with pytest.raises(ModelError, match="the server says: upstream provider failed"):
                await model.complete([Message("user", "hi")])
            with pytest.raises(ModelError, match="tool call without a function name"):
                await model.complete([Message("user", "hi")])


def test_bad_options_are_refused() -> None:
    with pytest.raises(ValueError, match="max_retries"):
        OpenAIChat("m", base_url="http://x", max_retries=-1)
    with pytest.raises(ValueError, match="deadline must be > 0"):
        OpenAIChat("m", base_url="http://x", deadline=0)
    with pytest.raises(ValueError, match="connect_timeout"):
        OpenAIChat("m", base_url="http://x", connect_timeout=-1)
