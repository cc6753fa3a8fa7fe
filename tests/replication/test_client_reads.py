"""How a restore reads the plane's answer to its GET: any 2xx is the plane's JSON, 404 is "no such
run", and anything else is a ``PlaneError`` that names the URL, the status and the plane's words
(or, for a plane that cannot be reached, the transport's error).

The plane here is a stand-in on loopback that answers each path with a fixed status and body (a
``http.server`` in a thread of this process), since the reference plane answers none of these.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import anyio
import msgspec
import pytest

from replication import PlaneError, restore_from_plane
from replication._wire import whole_item
from stores import Checkpoint, SQLiteStore
from stores.testing import make_message, make_row

pytestmark = pytest.mark.anyio

LIMIT = 20.0
RUN = "/public/v1/runs/r"
#: path -> (status, content type, body)
Routes = dict[str, tuple[int, str, bytes]]


class _Answer(BaseHTTPRequestHandler):
    server: _Stand

    def do_GET(self) -> None:
        status, kind, body = self.server.routes[self.path]
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


class _Stand(ThreadingHTTPServer):
    daemon_threads = True
    routes: Routes


@contextmanager
def plane_answering(routes: Routes) -> Iterator[str]:
    """A stand-in plane on 127.0.0.1:<ephemeral> answering ``routes``; its URL."""
    server = _Stand(("127.0.0.1", 0), _Answer)
    server.routes = routes
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


def json_answer(status: int, body: object) -> tuple[int, str, bytes]:
    return status, "application/json", msgspec.json.encode(body)


async def restore(
    url: str, tmp_path: Path, execution_id: str = "r"
) -> tuple[Checkpoint | None, list[Checkpoint]]:
    """Restore ``execution_id`` from the plane at ``url`` into a fresh store: the newest row, the rows."""
    with anyio.fail_after(LIMIT):
        async with SQLiteStore(tmp_path / f"{execution_id}.db") as store:
            newest = await restore_from_plane(store, execution_id, url=url, api_key="key-a")
            return newest, await store.history(execution_id)


async def test_a_2xx_other_than_200_is_the_plane_s_json(tmp_path: Path) -> None:
    row = make_row("r", 0, messages=[make_message(0)])
    run = {"checkpoints": [whole_item(row)], "cache": []}
    with plane_answering({RUN: json_answer(203, run)}) as url:
        newest, history = await restore(url, tmp_path)
    assert newest == row and history == [row]


async def test_a_refusal_names_the_url_the_status_and_the_plane_s_words(tmp_path: Path) -> None:
    routes = {RUN: json_answer(503, {"error": "the tenant's store is down", "detail": "ignored"})}
    with plane_answering(routes) as url, pytest.raises(PlaneError) as refused:
        await restore(url, tmp_path)
    assert str(refused.value) == f"GET {url}{RUN} answered 503: the tenant's store is down"
    assert refused.value.status == 503


async def test_a_refusal_without_the_plane_s_words_carries_its_body(tmp_path: Path) -> None:
    routes: Routes = {
        RUN: (502, "text/html", b"  <html>Bad gateway</html>\n"),
        "/public/v1/runs/s": json_answer(401, {"reason": "who are you"}),
    }
    with plane_answering(routes) as url:
        with pytest.raises(PlaneError) as refused:
            await restore(url, tmp_path)
        with pytest.raises(PlaneError) as unknown:
            await restore(url, tmp_path, "s")
    assert str(refused.value) == f"GET {url}{RUN} answered 502: <html>Bad gateway</html>"
    assert refused.value.status == 502
    assert str(unknown.value) == f'GET {url}/public/v1/runs/s answered 401: {{"reason":"who are you"}}'
    assert unknown.value.status == 401


async def test_a_2xx_body_that_is_not_json_is_refused(tmp_path: Path) -> None:
    with plane_answering({RUN: (200, "text/html", b"<html>welcome</html>")}) as url:
        with pytest.raises(PlaneError) as refused:
            await restore(url, tmp_path)
    assert str(refused.value).startswith(f"GET {url}{RUN} answered with a body that is not JSON: ")
    assert refused.value.status is None


async def test_a_plane_that_cannot_be_reached_is_named_with_the_transport_error(tmp_path: Path) -> None:
    with socket.socket() as probe:  # a port nothing listens on once it is closed
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    url = f"http://127.0.0.1:{port}"
    with pytest.raises(PlaneError) as refused:
        await restore(url, tmp_path)
    assert str(refused.value).startswith(f"cannot reach the plane at {url}: ConnectError: ")
    assert refused.value.status is None
