"""A plane that does not count the inbox entries it was sent has not stored them.

The replicator's POST carries a run's rows and its inbox entries; a plane that predates inbox
entries acknowledges the rows (``{"accepted": N, "rejections": []}``) and says nothing of the
entries. Over real HTTP on loopback, such an answer is not taken as the plane's acknowledgment: the
rows and the entries stay buffered, the warning says why, and once the plane counts the entries
(``"signals": M``) they are marked sent. Both backends for the store.
"""

from __future__ import annotations

import logging
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import msgspec
import pytest
import uvicorn
from _plane_support import Receive, Scope, Send
from conftest import Backend

from actors import ActorSystem
from replication import Replicator
from stores import Checkpoint, Store
from stores.testing import make_message, make_row

pytestmark = pytest.mark.anyio

EID = "run-s"


@dataclass
class OldPlane:
    """An ingest endpoint that stores nothing and acknowledges every row of a POST; it counts the
    inbox entries it was sent only when ``counts_signals`` is set."""

    counts_signals: bool = False
    posted: list[dict[str, Any]] = field(default_factory=list)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        chunks = []
        while True:
            message = await receive()
            chunks.append(message.get("body", b""))
            if not message.get("more_body"):
                break
        if scope["method"] != "POST":
            await _answer(send, 404, {"error": "not here"})
            return
        body = msgspec.json.decode(b"".join(chunks))
        self.posted.append(body)
        answer: dict[str, Any] = {"accepted": len(body.get("checkpoints", [])), "rejections": []}
        if self.counts_signals:
            answer["signals"] = len(body.get("signals", []))
        await _answer(send, 200, answer)


async def _answer(send: Send, status: int, body: Any) -> None:
    await send(
        {"type": "http.response.start", "status": status, "headers": [(b"content-type", b"application/json")]}
    )
    await send({"type": "http.response.body", "body": msgspec.json.encode(body)})


@contextmanager
def serving(app: OldPlane) -> Iterator[str]:
    """Serve ``app`` on 127.0.0.1:<ephemeral> (uvicorn, in a thread) until the block ends; its URL."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(
        uvicorn.Config(app, log_level="warning", lifespan="off", timeout_graceful_shutdown=2)
    )
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:  # a thread's start: no event of this loop to wait on
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("the plane did not start")
        time.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join(10)
        sock.close()


async def _run_with_a_signal(store: Store) -> tuple[list[Checkpoint], str]:
    """Two rows of a run and a signal in its inbox; the rows and the entry's ``signal_id``."""
    msgs = [make_message(i) for i in range(3)]
    rows = [make_row(EID, i, messages=msgs[: i + 2]) for i in range(2)]
    for row in rows:
        await store.append(row)
    await store.signal(EID, "go", {"n": 1})
    [entry] = await store.signals(EID)
    return rows, entry.signal_id


async def test_an_ingest_that_does_not_count_the_inbox_entries_leaves_them_buffered(
    store_backend: Backend, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="tether")
    plane = OldPlane()
    async with store_backend.open() as store:
        here: Any = store
        rows, signal_id = await _run_with_a_signal(store)
        with serving(plane) as url:
            replicator = Replicator(url, "key-a")
            async with ActorSystem(store, replicator=replicator):
                done = await replicator.drain()
                sent = [[s["signal_id"] for s in p.get("signals", [])] for p in plane.posted]
                assert sent and all(ids == [signal_id] for ids in sent), sent  # each POST carried it
                assert (done.buffered, done.signals, done.sent) == (True, 0, 0)
                assert await here.signal_sync_state(signal_id) == (False, None)
                assert [e.signal_id for e in await here.fetch_unsynced_signals(10)] == [signal_id]
                assert [await here.sync_state(r.checkpoint_id) for r in rows] == [(False, None)] * 2
                said = [r.getMessage() for r in caplog.records if "stay buffered" in r.getMessage()]
                assert said and all(
                    'no "signals" count for the inbox entries it was sent' in words
                    and "2 rows, 0 cache entries and 1 inbox entries stay buffered" in words
                    for words in said
                ), said

                plane.counts_signals = True  # the plane now takes inbox entries
                done = await replicator.drain()
                assert (done.buffered, done.signals, done.sent) == (False, 1, 2)
                assert await here.signal_sync_state(signal_id) == (True, None)
                assert await here.fetch_unsynced_signals(10) == []
                assert [await here.sync_state(r.checkpoint_id) for r in rows] == [(True, None)] * 2
