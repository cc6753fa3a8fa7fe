"""OpenAIChat's retries, server-directed waits and timeouts, against a loopback server of the tests' own.

A server's ``Retry-After`` (seconds or an HTTP date) and ``retry-after-ms`` are waited, past the
client's own backoff cap, up to 120 s; ``x-should-retry`` overrides the status; every wait stays
within the call's deadline; a read timeout (the server may still be generating) is not retried
unless asked, and its message says it timed out, after how long and after how many attempts.
Waits are checked from below (the server's clock sees the requests arrive); upper bounds are loose.
"""

from __future__ import annotations

import contextlib
import email.utils
import itertools
import socket
import time
from collections.abc import Iterator
from typing import Any

import anyio
import pytest
from _chat_server import ChatServer, Reply, ok, serve

from actors.models import Message, ModelError, ModelReply, OpenAIChat

pytestmark = pytest.mark.anyio
LIMIT = 20.0
HI = [Message("user", "hi")]
FINE = ok({"role": "assistant", "content": "fine"})


@pytest.fixture
def server() -> Iterator[ChatServer]:
    yield from serve()


def client(server: ChatServer, **kw: Any) -> OpenAIChat:
    kw.setdefault("backoff", 0.01)
    kw.setdefault("max_backoff", 0.05)
    return OpenAIChat("gpt-test", base_url=server.base_url, **kw)


def gaps(server: ChatServer) -> list[float]:
    at = [r.at for r in server.requests]
    return [b - a for a, b in itertools.pairwise(at)]


async def test_retry_after_seconds_is_waited_past_the_backoff_cap(server: ChatServer) -> None:
    slow_down = Reply(429, {"error": {"message": "slow down"}}, {"retry-after": "1"})
    server.script = [slow_down, slow_down, FINE]
    async with client(server) as model:
        with anyio.fail_after(LIMIT):
            assert await model.complete(HI) == ModelReply("fine")
    assert len(server.requests) == 3
    assert all(0.95 <= gap < 10 for gap in gaps(server)), gaps(server)


async def test_retry_after_ms_comes_first(server: ChatServer) -> None:
    server.script = [Reply(503, "busy", {"retry-after-ms": "400", "retry-after": "30"}), FINE]
    async with client(server) as model:
        with anyio.fail_after(LIMIT):
            assert await model.complete(HI) == ModelReply("fine")
    (gap,) = gaps(server)
    assert 0.38 <= gap < 10


async def test_an_http_date_retry_after_is_waited(server: ChatServer) -> None:
    when = email.utils.formatdate(time.time() + 2, usegmt=True)  # whole seconds: 1 to 2 s from now
    server.script = [Reply(429, "later", {"retry-after": when}), FINE]
    async with client(server) as model:
        with anyio.fail_after(LIMIT):
            assert await model.complete(HI) == ModelReply("fine")
    (gap,) = gaps(server)
    assert 0.9 <= gap < 10


async def test_a_wait_longer_than_the_cap_fails_at_once_naming_it(server: ChatServer) -> None:
    server.script = [Reply(429, {"error": {"message": "quota"}}, {"retry-after": "500"}), FINE]
    started = time.monotonic()
    async with client(server) as model:
        with anyio.fail_after(LIMIT), pytest.raises(ModelError) as info:
            await model.complete(HI)
    assert time.monotonic() - started < 5
    assert str(info.value).endswith(
        "answered 429: quota; it asks to wait 500 s, more than the 120 s a client waits"
    )
    assert info.value.status_code == 429 and len(server.requests) == 1


async def test_x_should_retry_overrides_the_status(server: ChatServer) -> None:
    server.script = [Reply(503, "do not", {"x-should-retry": "false"})]
    async with client(server) as model:
        with anyio.fail_after(LIMIT), pytest.raises(ModelError, match=r"answered 503: do not$"):
            await model.complete(HI)
    assert len(server.requests) == 1
    server.script = [Reply(400, "try again", {"x-should-retry": "true"}), FINE]
    async with client(server) as model:
        with anyio.fail_after(LIMIT):
            assert await model.complete(HI) == ModelReply("fine")
    assert len(server.requests) == 3


async def test_a_server_wait_past_the_deadline_fails_at_once(server: ChatServer) -> None:
    server.script = [Reply(429, "later", {"retry-after": "3"}), FINE]
    started = time.monotonic()
    async with client(server, deadline=1.0) as model:
        with anyio.fail_after(LIMIT), pytest.raises(ModelError) as info:
            await model.complete(HI)
    assert time.monotonic() - started < 2.5
    assert "timed out: waiting 3 s before attempt 2 would pass the call's deadline of 1 s" in str(info.value)
    assert len(server.requests) == 1


async def test_the_deadline_bounds_an_attempt(server: ChatServer) -> None:
    server.script = [Reply(delay=5), FINE]
    started = time.monotonic()
    async with client(server, deadline=0.5) as model:
        with (
            anyio.fail_after(LIMIT),
            pytest.raises(
                ModelError, match=r"timed out: the call's deadline of 0\.5 s passed during attempt 1$"
            ),
        ):
            await model.complete(HI)
    assert time.monotonic() - started < 4


async def test_retries_are_bounded(server: ChatServer) -> None:
    server.script = [Reply(503, "unavailable")] * 3
    async with client(server, max_retries=2) as model:
        with anyio.fail_after(LIMIT), pytest.raises(ModelError, match="503 after 3 attempts") as info:
            await model.complete(HI)
    assert info.value.status_code == 503 and info.value.body == "unavailable"
    assert len(server.requests) == 3


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


async def test_connection_refused_is_retried_then_a_model_error() -> None:
    model = OpenAIChat("m", base_url=f"http://127.0.0.1:{_free_port()}/v1", max_retries=2, backoff=0.01)
    with (
        anyio.fail_after(LIMIT),
        pytest.raises(ModelError, match=r"unreachable after 3 attempts \(\d+\.\d s in all\): ConnectError"),
    ):
        await model.complete(HI)
    await model.aclose()


async def test_a_connect_timeout_is_its_own_and_is_retried() -> None:
    # A listening socket whose accept queue is full: the kernel drops further SYNs, so a connect
    # hangs until the client's connect timeout (the read timeout stays at its 600 s default).
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(0)
    port = listener.getsockname()[1]
    fillers = [socket.socket() for _ in range(3)]
    try:
        for filler in fillers:
            filler.setblocking(False)
            with contextlib.suppress(BlockingIOError):
                filler.connect(("127.0.0.1", port))
        model = OpenAIChat(
            "m", base_url=f"http://127.0.0.1:{port}/v1", connect_timeout=0.3, backoff=0.01, max_retries=1
        )
        started = time.monotonic()
        with anyio.fail_after(LIMIT), pytest.raises(ModelError) as info:
            await model.complete(HI)
        elapsed = time.monotonic() - started
        await model.aclose()
    finally:
        for s in [*fillers, listener]:
            s.close()
    assert model.timeout == 600.0
    assert 0.55 <= elapsed < 10  # two attempts of 0.3 s each
    assert str(info.value).startswith(
        f"model server at http://127.0.0.1:{port}/v1/chat/completions timed out: no connection within "
        "the connect timeout of 0.3 s, after 2 attempts ("
    )


async def test_a_read_timeout_is_not_retried_and_says_so(server: ChatServer) -> None:
    # One slow generation: the client gives up once, and does not start a second generation.
    server.script = [Reply(delay=3), FINE]
    async with client(server, timeout=0.3, max_retries=3) as model:
        with anyio.fail_after(LIMIT), pytest.raises(ModelError) as info:
            await model.complete(HI)
    message = str(info.value)
    assert "timed out: no answer within the read timeout of 0.3 s, after 1 attempt (" in message
    assert "a read timeout is not retried unless retry_read_timeouts=True" in message
    await anyio.sleep(0.3)
    assert len(server.requests) == 1


async def test_a_read_timeout_is_retried_when_asked(server: ChatServer) -> None:
    server.script = [Reply(delay=3), FINE]
    async with client(server, timeout=0.3, retry_read_timeouts=True) as model:
        with anyio.fail_after(LIMIT):
            assert await model.complete(HI) == ModelReply("fine")
    assert len(server.requests) == 2
    server.script = [Reply(delay=3), Reply(delay=3)]
    async with client(server, timeout=0.3, retry_read_timeouts=True, max_retries=1) as model:
        with (
            anyio.fail_after(LIMIT),
            pytest.raises(
                ModelError, match=r"read timeout of 0\.3 s, after 2 attempts \(\d+\.\d s in all\)$"
            ),
        ):
            await model.complete(HI)
