"""The reference plane's refusals (each with a JSON body naming the problem), its
reads, tenants kept apart, and 10,000 items from 8 concurrent senders stored once each."""

from __future__ import annotations

from typing import Any

import anyio
import httpx
import msgspec
import pytest
from _plane_support import Plane, plane_fixture  # noqa: F401 (fixture)

from replication.lowlevel import Conversations
from replication.plane import MAX_BODY_BYTES
from stores.testing import make_message, make_row

pytestmark = pytest.mark.anyio

INGEST = "/public/v1/checkpoints/ingest"


def body(rows: list[Any]) -> bytes:
    return msgspec.json.encode({"checkpoints": Conversations().items(rows), "cache": []})


async def post(plane: Plane, content: bytes, key: str | None = "key-a") -> httpx.Response:
    headers = {"content-type": "application/json"}
    if key is not None:
        headers["x-api-key"] = key
    async with httpx.AsyncClient(base_url=plane.url, timeout=30) as http:
        return await http.post(INGEST, content=content, headers=headers)


async def test_a_missing_or_unknown_key_is_401_with_a_body_naming_it(plane: Plane) -> None:
    rows = [make_row("run-k", 0)]
    missing = await post(plane, body(rows), key=None)
    assert missing.status_code == 401 and missing.json() == {"error": "missing X-API-Key header"}
    wrong = await post(plane, body(rows), key="nope")
    assert wrong.status_code == 401 and wrong.json() == {"error": "unknown API key"}
    async with httpx.AsyncClient(base_url=plane.url) as http:
        read = await http.get("/public/v1/runs/run-k", headers={"x-api-key": "nope"})
    assert read.status_code == 401


async def test_an_oversized_body_is_413(plane: Plane) -> None:
    answer = await post(plane, b'{"checkpoints": ["' + b"x" * (MAX_BODY_BYTES + 1) + b'"]}')
    assert answer.status_code == 413
    assert "over the limit of 16777216 bytes" in answer.json()["error"]


@pytest.mark.parametrize(
    ("content", "words"),
    [
        (b"{not json", "not JSON"),
        (b'{"rows": []}', "the body is not"),
        (b'["checkpoints"]', "the body is not"),
        (b'{"checkpoints": [], "cache": 3}', '"cache" must be a list'),
        (b'{"checkpoints": [], "signals": {}}', '"signals" must be a list'),
    ],
)
async def test_a_malformed_body_is_422(plane: Plane, content: bytes, words: str) -> None:
    answer = await post(plane, content)
    assert answer.status_code == 422
    assert words in answer.json()["error"]


async def test_bad_items_are_rejected_one_by_one(plane: Plane) -> None:
    good = make_row("run-i", 0, messages=[make_message(0)])
    big = make_row("run-i", 1, node_output={"blob": "x" * (1024 * 1024)})
    items = msgspec.json.decode(body([good, big]))["checkpoints"]
    broken = dict(items[0], checkpoint_id="broken", seq="one")
    bad_status = dict(items[0], checkpoint_id="bad-status", seq=5, status="done")
    answer = await post(plane, msgspec.json.encode({"checkpoints": [*items, broken, bad_status]}))
    assert answer.status_code == 200
    found = {r["checkpoint_id"]: r["reason"] for r in answer.json()["rejections"]}
    assert set(found) == {big.checkpoint_id, "broken", "bad-status"}
    assert "over the limit of 1048576" in found[big.checkpoint_id]
    assert found["broken"].startswith("malformed item:") and "seq" in found["broken"]
    assert "status 'done'" in found["bad-status"]
    assert answer.json()["accepted"] == 1
    # a known checkpoint_id sent again: the same content is accepted, a changed one rejected
    again = await post(plane, body([good]))
    assert again.json() == {"accepted": 1, "signals": 0, "rejections": []}
    changed = await post(plane, body([msgspec.structs.replace(good, node_input={"x": 1})]))
    assert changed.json()["rejections"] == [
        {
            "checkpoint_id": good.checkpoint_id,
            "reason": "a known checkpoint_id sent again with different content",
        }
    ]
    remote = plane.tenant_store("alpha")
    try:
        assert await remote.history("run-i") == [good]
    finally:
        await remote.close()


async def test_inbox_entries_are_merged_by_signal_id_and_bad_ones_rejected_one_by_one(plane: Plane) -> None:
    rows = [make_row("run-g", 0)]

    def entry(signal_id: str, consumed_seq: int | None = None, **fields: Any) -> dict[str, Any]:
        found: dict[str, Any] = {
            "signal_id": signal_id,
            "execution_id": "run-g",
            "name": "go",
            "payload": {"n": 1},
            "created_at": "2026-01-02T03:04:05.000006+00:00",
            "consumed_seq": consumed_seq,
        }
        return {**found, **fields}

    def with_signals(*entries: dict[str, Any]) -> bytes:
        return msgspec.json.encode({"checkpoints": [], "cache": [], "signals": list(entries)})

    first = await post(
        plane, msgspec.json.encode({**msgspec.json.decode(body(rows)), "signals": [entry("s-1")]})
    )
    assert first.json() == {"accepted": 1, "signals": 1, "rejections": []}
    assert (await post(plane, with_signals(entry("s-1"), entry("s-1", 0)))).json() == {
        "accepted": 0,
        "signals": 2,
        "rejections": [],
    }  # sent again, then its consumption by the row at seq 0
    answer = await post(
        plane,
        with_signals(
            entry("s-1", 3),  # consumed by another row
            entry("s-2", payload="x" * (1024 * 1024)),
            entry("s-3", created_at="2026-01-02T03:04:05"),  # no time zone
            entry("s-4", name=""),
            entry("s-5", extra=1),
            entry("s-6"),
        ),
    )
    assert answer.status_code == 200 and answer.json()["signals"] == 1
    found = {r["signal_id"]: r["reason"] for r in answer.json()["rejections"]}
    assert set(found) == {"s-1", "s-2", "s-3", "s-4", "s-5"}
    assert "seq 0" in found["s-1"] and "over the limit of 1048576" in found["s-2"]
    assert all(found[s].startswith("malformed") for s in ("s-3", "s-4", "s-5"))
    async with httpx.AsyncClient(base_url=plane.url, headers={"x-api-key": "key-a"}) as http:
        run = (await http.get("/public/v1/runs/run-g")).json()
    assert [(e["signal_id"], e["consumed_seq"], e["payload"]) for e in run["signals"]] == [
        ("s-1", 0, {"n": 1}),
        ("s-6", None, {"n": 1}),
    ]


async def test_reads_and_tenants(plane: Plane) -> None:
    msgs = [make_message(i) for i in range(3)]
    rows = [make_row("run-t", i, messages=msgs[: i + 1]) for i in range(3)]
    assert (await post(plane, body(rows))).json() == {"accepted": 3, "signals": 0, "rejections": []}
    async with httpx.AsyncClient(base_url=plane.url, headers={"x-api-key": "key-a"}) as http:
        run = (await http.get("/public/v1/runs/run-t")).json()
        assert [c["checkpoint_id"] for c in run["checkpoints"]] == [r.checkpoint_id for r in rows]
        assert [c["messages"]["new"] for c in run["checkpoints"]] == [[m] for m in msgs]  # sent once
        latest = (await http.get("/public/v1/checkpoints/run-t/latest")).json()
        assert latest["checkpoint_id"] == rows[-1].checkpoint_id and latest["messages"]["new"] == msgs
        listing = (await http.get("/public/v1/runs")).json()["runs"]
        assert [(r["execution_id"], r["status"], r["checkpoints"]) for r in listing] == [
            ("run-t", "unfinished", 3)
        ]
        assert (await http.get("/public/v1/runs/nope")).status_code == 404
        assert (await http.get("/public/v1/checkpoints/nope/latest")).status_code == 404
        assert (await http.get("/healthz")).json() == {"ok": True}
    async with httpx.AsyncClient(base_url=plane.url, headers={"x-api-key": "key-b"}) as http:
        assert (await http.get("/public/v1/runs/run-t")).status_code == 404  # another tenant's run
        assert (await http.get("/public/v1/runs")).json() == {"runs": []}


async def test_ten_thousand_items_from_eight_concurrent_senders(plane: Plane) -> None:
    """8 senders x 25 requests x 50 items, each run's rows split across requests: none lost, none
    duplicated (each item sent twice, the second time by another sender)."""
    senders, requests, per = 8, 25, 50
    runs: list[list[Any]] = [
        [make_row(f"run-{s}-{r}", i) for i in range(per)] for s in range(senders) for r in range(requests)
    ]
    answers: list[int] = []

    async def sender(s: int) -> None:
        async with httpx.AsyncClient(base_url=plane.url, headers={"x-api-key": "key-a"}, timeout=120) as http:
            for r in range(requests):
                rows = runs[s * requests + r]
                found = await http.post(
                    INGEST, content=body(rows), headers={"content-type": "application/json"}
                )
                answers.append(found.json()["accepted"])
                again = runs[((s + 1) % senders) * requests + r][: per // 5]
                await http.post(INGEST, content=body(again), headers={"content-type": "application/json"})

    with anyio.fail_after(240):
        async with anyio.create_task_group() as tg:
            for s in range(senders):
                tg.start_soon(sender, s)
    assert sum(len(rows) for rows in runs) == 10_000
    remote = plane.tenant_store("alpha")
    try:
        for rows in runs:
            assert await remote.history(rows[0].execution_id) == rows
    finally:
        await remote.close()


async def test_tether_plane_serve(tmp_path: Any) -> None:
    """The command serves the plane (a real child process); a bad key flag is a usage error."""
    import socket
    import sys

    from replication import Replicator
    from stores import SQLiteStore

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    base = f"sqlite:///{tmp_path / 'served.db'}"
    command = [sys.executable, "-m", "tether", "plane", "serve", "--store", base, "--port", str(port)]
    bad = await anyio.run_process([*command, "--api-key", "k=not a tenant"], check=False)
    assert bad.returncode == 2 and b"KEY=TENANT" in bad.stderr
    none = await anyio.run_process(command, check=False)
    assert none.returncode == 2 and b"at least one --api-key" in none.stderr
    async with await anyio.open_process([*command, "--api-key", "k1=acme"]) as child:
        try:
            url = f"http://127.0.0.1:{port}"
            async with httpx.AsyncClient(base_url=url) as http:
                with anyio.fail_after(30):
                    while True:
                        try:
                            if (await http.get("/healthz")).status_code == 200:
                                break
                        except httpx.HTTPError:
                            await anyio.sleep(0.05)
            local = SQLiteStore(tmp_path / "local.db")
            rows = [make_row("run-c", i) for i in range(3)]
            for row in rows:
                await local.append(row)
            from actors import ActorSystem

            replicator = Replicator(url, "k1")
            async with ActorSystem(local, replicator=replicator):
                await replicator.drain()
                assert [await local.sync_state(r.checkpoint_id) for r in rows] == [(True, None)] * 3
            await local.close()
        finally:
            child.terminate()
    remote = SQLiteStore(tmp_path / "served.acme.db")
    try:
        assert await remote.history("run-c") == rows
    finally:
        await remote.close()
