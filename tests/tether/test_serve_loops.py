"""The inspector's and the reference plane's ``serve``, awaited from either of anyio's loops: each
answers over loopback, and a cancel stops it quietly, its app's lifespan ended (uvicorn speaks only
asyncio: under trio it serves from an asyncio loop of its own in a thread)."""

from __future__ import annotations

import functools
import socket
import time
from pathlib import Path

import anyio
import httpx
import pytest

from actors import ActorSystem
from stores import SQLiteStore
from tether.lowlevel import demo_agent

pytest.importorskip("starlette")
pytest.importorskip("uvicorn")

pytestmark = [pytest.mark.anyio, pytest.mark.parametrize("anyio_backend", ["asyncio", "trio"])]

#: How long a cancelled server may take to stop (its bounded shutdown is 5 s at most).
STOPS_WITHIN = 8.0


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


async def _until_answering(client: httpx.AsyncClient, path: str) -> httpx.Response:
    """GET ``path`` until the server takes the connection (the caller bounds the wait)."""
    while True:
        try:
            return await client.get(path)
        except httpx.ConnectError:
            await anyio.sleep(0.02)


async def test_the_inspector_serves_and_stops(tmp_path: Path) -> None:
    from tether.inspector import serve

    db = tmp_path / "i.db"
    agent = demo_agent()
    async with SQLiteStore(db) as store, ActorSystem(store, runners=[agent]) as system:
        ref = await system.spawn(agent, "Refund order 1042, amount 50000", execution_id="waits")
        assert (await ref.result(timeout=30)).status == "paused"
    addresses: list[str] = []
    ready = anyio.Event()

    def announced(line: str) -> None:
        addresses.append(line.rsplit(" ", 1)[-1])
        ready.set()

    with anyio.fail_after(30):
        async with anyio.create_task_group() as group:
            group.start_soon(
                functools.partial(serve, f"sqlite:///{db}", port=0, token="tok", ready=announced)
            )
            await ready.wait()
            async with httpx.AsyncClient(timeout=10) as client:
                page = await client.get(addresses[0], follow_redirects=True)
            assert page.status_code == 200 and "waits" in page.text
            cancelled = time.monotonic()
            group.cancel_scope.cancel()
    assert time.monotonic() - cancelled < STOPS_WITHIN
    assert not (tmp_path / "i.db-wal").exists()  # the app's lifespan ended: its store is closed


async def test_the_plane_serves_and_stops(tmp_path: Path) -> None:
    from replication.plane import serve

    port = _free_port()
    with anyio.fail_after(30):
        async with anyio.create_task_group() as group:
            group.start_soon(
                functools.partial(serve, f"sqlite:///{tmp_path / 'plane.db'}", {"key": "t"}, port=port)
            )
            async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=10) as client:
                assert (await _until_answering(client, "/healthz")).status_code == 200
                runs = await client.get("/public/v1/runs", headers={"x-api-key": "key"})
            assert runs.status_code == 200, runs.text  # the tenant's store opened on the server's loop
            cancelled = time.monotonic()
            group.cancel_scope.cancel()
    assert time.monotonic() - cancelled < STOPS_WITHIN
    assert not (tmp_path / "plane.t.db-wal").exists()  # the app's lifespan ended: its store is closed
    assert (tmp_path / "plane.t.db").exists()
