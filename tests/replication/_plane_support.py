"""A real plane on loopback for the replication tests, with a fault layer of the tests' own.

:func:`running_plane` serves the reference plane (uvicorn, in a thread with its own event loop) on an
ephemeral loopback port, its tenants stored in SQLite files or PostgreSQL schemas of the test.
:class:`Faults` sits in front of it in the same server: it counts ingest POSTs and can refuse a batch
that holds a poison row (naming nothing, or naming it), answer a chosen status (to every POST, every
n-th one, or those carrying cache or inbox entries), stall (by the POST, or by its items), or swallow a POST with an empty 200 as a middlebox.
A poison id may name a row (``checkpoint_id``) or an inbox entry (``signal_id``).
"""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import Awaitable, Callable, Iterator, MutableMapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec
import pytest
import uvicorn

from replication.plane import create_app, tenant_store_url
from stores import Store, open_store

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]

KEYS = {"key-a": "alpha", "key-b": "beta"}


@dataclass
class Faults:
    """What the fault layer does to ingest POSTs (change it while the plane runs)."""

    poison: set[str] = field(
        default_factory=set
    )  # refuse any batch holding one of these ids (rows' or signals')
    name_poison: bool = False  # ... naming them in ``rejections`` (else naming nothing)
    poison_status: int = 422  # ... with this status (a refusal on payload grounds)
    status: int | None = None  # answer every POST with this status ...
    times: int = -1  # ... this many times (-1: until changed)
    retry_after: str | None = None
    stall: float = 0.0  # seconds to wait before forwarding a POST
    stall_per_item: float = 0.0  # ... and this many more for each item it carries
    swallow: bool = False  # answer 200 with an empty body and forward nothing (a middlebox)
    refuse_cache: int | None = None  # answer this status to a POST that carries cache entries
    refuse_signals: int | None = None  # ... or inbox entries
    fail_every: int = 0  # answer 503 to every n-th POST (0: never)
    posts: int = 0
    gets: list[str] = field(default_factory=list)
    ids_seen: list[list[str]] = field(default_factory=list)
    signals_seen: list[list[str]] = field(default_factory=list)
    statuses: list[int] = field(default_factory=list)


class FaultLayer:
    """An ASGI app in front of the plane that applies :class:`Faults` to ingest POSTs."""

    def __init__(self, inner: Any, faults: Faults) -> None:
        self.inner = inner
        self.faults = faults

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "POST":
            if scope["type"] == "http":
                self.faults.gets.append(scope["path"])
            await self.inner(scope, receive, send)
            return
        chunks = []
        while True:
            message = await receive()
            chunks.append(message.get("body", b""))
            if not message.get("more_body"):
                break
        body = b"".join(chunks)
        f = self.faults
        f.posts += 1
        try:
            decoded = msgspec.json.decode(body)
            ids = [i.get("checkpoint_id") for i in decoded.get("checkpoints", [])]
            sids = [i.get("signal_id") for i in decoded.get("signals", [])]
            cached = bool(decoded.get("cache"))
        except (msgspec.DecodeError, AttributeError):
            ids, sids, cached = [], [], False
        f.ids_seen.append(ids)
        f.signals_seen.append(sids)
        if f.stall or f.stall_per_item:
            await asyncio.sleep(f.stall + f.stall_per_item * len(ids))
        if f.fail_every and f.posts % f.fail_every == 0:
            await _answer(send, 503, {"error": "injected 503"}, [(b"content-type", b"application/json")])
            f.statuses.append(503)
            return
        if f.swallow:
            await send({"type": "http.response.start", "status": 200, "headers": []})
            await send({"type": "http.response.body", "body": b""})
            f.statuses.append(200)
            return
        if f.refuse_cache is not None and cached:
            await _answer(
                send, f.refuse_cache, {"error": "injected"}, [(b"content-type", b"application/json")]
            )
            f.statuses.append(f.refuse_cache)
            return
        if f.refuse_signals is not None and sids:
            await _answer(
                send, f.refuse_signals, {"error": "injected"}, [(b"content-type", b"application/json")]
            )
            f.statuses.append(f.refuse_signals)
            return
        if f.status is not None and f.times != 0:
            f.times -= 1
            headers = [(b"content-type", b"application/json")]
            if f.retry_after is not None:
                headers.append((b"retry-after", f.retry_after.encode()))
            await _answer(send, f.status, {"error": f"injected {f.status}"}, headers)
            f.statuses.append(f.status)
            return
        bad = [i for i in ids if i in f.poison]
        bad_signals = [i for i in sids if i in f.poison]
        if bad or bad_signals:
            answer: dict[str, Any] = {"error": "batch refused: a value is longer than its column"}
            if f.name_poison:
                answer["rejections"] = [{"checkpoint_id": i, "reason": "too long"} for i in bad] + [
                    {"signal_id": i, "reason": "too long"} for i in bad_signals
                ]
            await _answer(send, f.poison_status, answer, [(b"content-type", b"application/json")])
            f.statuses.append(f.poison_status)
            return
        sent = False

        async def replay() -> MutableMapping[str, Any]:
            nonlocal sent
            if sent:
                return {"type": "http.disconnect"}
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}

        async def watch(message: MutableMapping[str, Any]) -> None:
            if message["type"] == "http.response.start":
                f.statuses.append(message["status"])
            await send(message)

        await self.inner(scope, replay, watch)


async def _answer(send: Send, status: int, body: Any, headers: list[tuple[bytes, bytes]]) -> None:
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": msgspec.json.encode(body)})


@dataclass
class Plane:
    url: str
    faults: Faults
    base: str

    def tenant_store(self, tenant: str) -> Store:
        """A store on the tenant's data (open it in the test's own event loop)."""
        return open_store(tenant_store_url(self.base, tenant))


@contextmanager
def running_plane(base_store_url: str, keys: dict[str, str] | None = None) -> Iterator[Plane]:
    """Serve the plane on 127.0.0.1:<ephemeral> until the block ends."""
    faults = Faults()
    app = FaultLayer(
        create_app(keys or KEYS, lambda t: open_store(tenant_store_url(base_store_url, t))), faults
    )
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    config = uvicorn.Config(app, log_level="warning", lifespan="on", timeout_graceful_shutdown=2)
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("the plane did not start")
        time.sleep(0.01)
    try:
        yield Plane(f"http://127.0.0.1:{port}", faults, base_store_url)
    finally:
        server.should_exit = True
        thread.join(10)
        sock.close()


def backend_url(backend: Any) -> str:
    """The store URL of a ``store_backend`` fixture value."""
    if backend.name == "sqlite":
        return f"sqlite:///{backend.target}"
    return f"{backend.target}?schema={backend.schema}"


@pytest.fixture(name="plane")
def plane_fixture(tmp_path: Path) -> Iterator[Plane]:
    """The reference plane on loopback, its tenants in SQLite files of the test."""
    with running_plane(f"sqlite:///{tmp_path / 'plane.db'}") as running:
        yield running


async def eventually(predicate: Callable[[], Awaitable[bool]], timeout: float = 10.0) -> None:
    """Poll ``predicate`` until it holds (``AssertionError`` after ``timeout`` seconds)."""
    import anyio

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if await predicate():
            return
        await anyio.sleep(0.02)
    raise AssertionError(f"not true within {timeout}s: {predicate.__doc__ or predicate}")


async def synced(store: Any, rows: Any) -> list[tuple[bool, str | None] | None]:
    """The outbox state of each row."""
    return [await store.sync_state(r.checkpoint_id) for r in rows]
