"""The plane's client at its edges. How a restore reads the plane's answer to its GET: any 2xx is
the plane's JSON, 404 is "no such run", and anything else is a ``PlaneError`` that names the URL,
the status and the plane's words or body (or, for a plane that cannot be reached, the transport's
error); every request carries the key, and a store that holds the run never asks. What an ingest
POST carries, and the warning that names an unreachable plane. Which plane URLs a replicator takes,
and when it warns that payloads travel in clear. How an ingest answer is classified where
``test_classify.py`` leaves off: an acknowledgment of no row, the exact words of a missing
acknowledgment, a payload refusal whose body names no rows.

The plane is a stand-in on loopback (a ``http.server`` in a thread of this process) that answers
each GET path with a fixed status and body and each ingest POST with its acknowledgment, since the
reference plane answers none of the odd cases.
"""

from __future__ import annotations

import logging
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import anyio
import httpx
import msgspec
import pytest

from actors import ActorSystem
from replication import PlaneError, Replicator, restore_from_plane
from replication.lowlevel import INGEST_PATH, Verdict, classify, whole_item
from stores import Checkpoint, SQLiteStore
from stores.testing import make_message, make_row

LIMIT = 20.0
RUN = "/public/v1/runs/r"
KEY = "key-a"
#: path -> (status, content type, body)
Routes = dict[str, tuple[int, str, bytes]]
#: (method, path, headers with lower-case names, body) of a request the stand-in plane answered
Request = tuple[str, str, dict[str, str], bytes]


class _Answer(BaseHTTPRequestHandler):
    server: _Stand

    def do_GET(self) -> None:
        self._answer(self.server.routes.get(self.path, (404, "text/plain", b"no such path")))

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        try:
            items = msgspec.json.decode(body)["checkpoints"]
        except (msgspec.DecodeError, KeyError, TypeError):
            self._answer(json_answer(400, {"error": "not an ingest body"}), body)
            return
        self._answer(json_answer(200, {"accepted": len(items), "rejections": []}), body)

    def _answer(self, answer: tuple[int, str, bytes], content: bytes = b"") -> None:
        self.server.seen.append(
            (self.command, self.path, {k.lower(): v for k, v in self.headers.items()}, content)
        )
        if self.headers.get("X-API-Key") != KEY:
            answer = json_answer(401, {"error": "unknown API key"})
        status, kind, body = answer
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
    seen: list[Request]


@contextmanager
def plane_answering(routes: Routes, seen: list[Request] | None = None) -> Iterator[str]:
    """A stand-in plane on 127.0.0.1:<ephemeral> answering GETs from ``routes`` and ingest POSTs
    with their acknowledgment (every request goes to ``seen``); its URL."""
    server = _Stand(("127.0.0.1", 0), _Answer)
    server.routes = routes
    server.seen = [] if seen is None else seen
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


def nothing_listens() -> str:
    """The URL of a loopback port nothing listens on (bound, then closed)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{probe.getsockname()[1]}"


def json_answer(status: int, body: object) -> tuple[int, str, bytes]:
    return status, "application/json", msgspec.json.encode(body)


async def restore(
    url: str, tmp_path: Path, execution_id: str = "r", *, key: str = KEY
) -> tuple[Checkpoint | None, list[Checkpoint]]:
    """Restore ``execution_id`` from the plane at ``url`` into a fresh store: the newest row, the rows."""
    with anyio.fail_after(LIMIT):
        async with SQLiteStore(tmp_path / f"{execution_id}.db") as store:
            newest = await restore_from_plane(store, execution_id, url=url, api_key=key)
            return newest, await store.history(execution_id)


@pytest.mark.anyio
async def test_a_2xx_other_than_200_is_the_plane_s_json(tmp_path: Path) -> None:
    row = make_row("r", 0, messages=[make_message(0)])
    run = {"checkpoints": [whole_item(row)], "cache": []}
    with plane_answering({RUN: json_answer(203, run)}) as url:
        newest, history = await restore(url, tmp_path)
    assert newest == row and history == [row]


@pytest.mark.anyio
async def test_a_refusal_names_the_url_the_status_and_the_plane_s_words(tmp_path: Path) -> None:
    routes = {RUN: json_answer(503, {"error": "the tenant's store is down", "detail": "ignored"})}
    with plane_answering(routes) as url, pytest.raises(PlaneError) as refused:
        await restore(url, tmp_path)
    assert str(refused.value) == f"GET {url}{RUN} answered 503: the tenant's store is down"
    assert refused.value.status == 503


@pytest.mark.anyio
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


@pytest.mark.anyio
async def test_the_read_carries_the_api_key(tmp_path: Path) -> None:
    with plane_answering({RUN: json_answer(200, {"checkpoints": []})}) as url:
        assert await restore(url, tmp_path) == (None, [])
        with pytest.raises(PlaneError) as refused:
            await restore(url, tmp_path, key="key-b")
    assert str(refused.value) == f"GET {url}{RUN} answered 401: unknown API key"


@pytest.mark.anyio
async def test_a_store_that_holds_the_run_is_left_alone_and_the_plane_is_not_asked(tmp_path: Path) -> None:
    row = make_row("r", 0)
    seen: list[Request] = []
    with plane_answering({RUN: json_answer(200, {"checkpoints": []})}, seen) as url:
        with anyio.fail_after(LIMIT):
            async with SQLiteStore(tmp_path / "here.db") as store:
                await store.append(row)
                assert await restore_from_plane(store, "r", url=url, api_key=KEY) is None
                assert await store.history("r") == [row]
    assert seen == []


@pytest.mark.anyio
async def test_an_ingest_post_carries_the_key_and_json_and_its_acknowledgment_syncs_the_rows(
    tmp_path: Path,
) -> None:
    rows = [make_row("r", seq, messages=[make_message(i) for i in range(seq + 1)]) for seq in range(3)]
    seen: list[Request] = []
    with plane_answering({}, seen) as url:
        store = SQLiteStore(tmp_path / "here.db")
        replicator = Replicator(url, KEY)
        with anyio.fail_after(LIMIT):
            async with store, ActorSystem(store, replicator=replicator):
                for row in rows:
                    await store.append(row)
                await replicator.drain()
                synced = [await store.sync_state(row.checkpoint_id) for row in rows]
    assert synced == [(True, None)] * 3
    posts = [request for request in seen if request[0] == "POST"]
    assert {(path, h["x-api-key"], h["content-type"].lower()) for _, path, h, _ in posts} == {
        (INGEST_PATH, KEY, "application/json")
    }
    sent = [item["checkpoint_id"] for *_, body in posts for item in msgspec.json.decode(body)["checkpoints"]]
    assert sorted(sent) == sorted(row.checkpoint_id for row in rows)


@pytest.mark.anyio
async def test_a_2xx_body_that_is_not_json_is_refused(tmp_path: Path) -> None:
    with plane_answering({RUN: (200, "text/html", b"<html>welcome</html>")}) as url:
        with pytest.raises(PlaneError) as refused:
            await restore(url, tmp_path)
    assert str(refused.value).startswith(f"GET {url}{RUN} answered with a body that is not JSON: ")
    assert refused.value.status is None


@pytest.mark.anyio
async def test_a_plane_that_cannot_be_reached_is_named_with_the_transport_error(tmp_path: Path) -> None:
    url = nothing_listens()
    with pytest.raises(PlaneError) as refused:
        await restore(url, tmp_path)
    assert str(refused.value).startswith(f"cannot reach the plane at {url}: ConnectError: ")
    assert refused.value.status is None


@pytest.mark.anyio
async def test_a_body_that_is_not_utf8_is_read_with_replacement_characters(tmp_path: Path) -> None:
    with plane_answering({RUN: (502, "text/plain", b"\xffbad gateway\xfe")}) as url:
        with pytest.raises(PlaneError) as refused:
            await restore(url, tmp_path)
    assert str(refused.value) == f"GET {url}{RUN} answered 502: \ufffdbad gateway\ufffd"


@pytest.mark.anyio
async def test_a_plane_url_with_a_path_and_a_trailing_slash(tmp_path: Path) -> None:
    with plane_answering({f"/tenantX{RUN}": json_answer(503, {"error": "down"})}) as url:
        with pytest.raises(PlaneError) as refused:
            await restore(f"{url}/tenantX/", tmp_path)
    assert str(refused.value) == f"GET {url}/tenantX{RUN} answered 503: down"


@pytest.mark.anyio
async def test_an_unreachable_plane_is_named_in_the_warning_that_rows_stay_buffered(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="tether")
    url = nothing_listens()
    store = SQLiteStore(tmp_path / "here.db")
    replicator = Replicator(url, KEY, flush_timeout=0.5)
    with anyio.fail_after(LIMIT):
        async with store, ActorSystem(store, replicator=replicator):
            await store.append(make_row("r", 0))
            report = await replicator.drain()
    assert report.buffered
    warned = [
        r.getMessage() for r in caplog.records if r.name == "tether" and "stay buffered" in r.getMessage()
    ]
    assert warned, caplog.records
    assert warned[0].startswith(f"replicator: {url} answered no response (ConnectError: ")
    assert "); 1 rows" in warned[0]


def test_a_plane_url_is_http_or_https_with_a_host() -> None:
    for bad in ("ftp://plane.example", "plane.example", "http://", "https:///v1", "file:///tmp/plane"):
        with pytest.raises(ValueError) as refused:
            Replicator(bad, "key-a")
        assert str(refused.value) == f"a plane URL is http(s)://host[:port][/path], not {bad!r}"
    for good in ("https://plane.example", "https://plane.example:8443/tenant/", "http://127.0.0.1:9"):
        Replicator(good, "key-a")


def test_plain_http_to_a_host_other_than_loopback_is_warned_of(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="tether")
    for quiet in ("https://plane.example", "http://127.0.0.1:8080", "http://localhost/x", "http://[::1]:9"):
        Replicator(quiet, "key-a")
    Replicator("http://plane.example:8080/t", "key-a")
    assert [r.getMessage() for r in caplog.records if r.name == "tether"] == [
        "replicator: http://plane.example:8080/t is plain http to a host other than loopback: "
        "payloads travel in clear"
    ]


ACKNOWLEDGMENT = 'not the plane\'s acknowledgment {"accepted": N, "rejections": [...]}'


def test_an_acknowledgment_of_no_row_is_accepted_with_its_rejections() -> None:
    body = msgspec.json.encode({"accepted": 0, "rejections": [{"checkpoint_id": "a", "reason": "bad"}]})
    answer = classify(200, body, httpx.Headers())
    assert (answer.outcome, answer.rejections) == (Verdict.ACCEPTED, {"a": "bad"})


def test_a_missing_acknowledgment_is_explained_in_these_words() -> None:
    assert classify(200, b"", httpx.Headers()).explanation == f"an empty body, {ACKNOWLEDGMENT}"
    assert classify(200, b"<b>ok</b>", httpx.Headers()).explanation == (
        f"a body that is not JSON, {ACKNOWLEDGMENT}: '<b>ok</b>'"
    )
    assert (
        classify(201, b'{"accepted": 0}', httpx.Headers()).explanation
        == f'no "rejections" list, {ACKNOWLEDGMENT}'
    )


@pytest.mark.parametrize(
    "content",
    [
        b"<html>413 Request Entity Too Large</html>",
        b"[1, 2]",
        b'{"error": "too big"}',
        b'{"rejections": {"a": "too big"}}',
        b'{"rejections": "a"}',
    ],
)
def test_a_payload_refusal_whose_body_names_no_rows(content: bytes) -> None:
    answer = classify(413, content, httpx.Headers())
    assert (answer.outcome, answer.status, answer.rejections) == (Verdict.REFUSED, 413, {})
