"""A damaged SQLite file and a full one: typed errors, nothing committed lost, writing resumes.

The full disk is a real one for SQLite: a child process whose file-size limit (``RLIMIT_FSIZE``,
with ``SIGXFSZ`` ignored so that the kernel fails the write with ``EFBIG`` instead of killing the
process) is a little above the database's size. SQLite then sees its write fail exactly as it does
on a full disk. No mount and no root are needed. The parent, without the limit, is the operator
who freed space.
"""

from __future__ import annotations

import json
import sqlite3
import sys
import textwrap
from pathlib import Path

import anyio
import pytest

from stores import SQLiteStore, StoreCorrupt
from stores.testing import make_message, make_row

pytestmark = pytest.mark.anyio

ROOT = Path(__file__).resolve().parents[3]


async def _filled(path: Path, runs: int) -> list[str]:
    async with SQLiteStore(path) as store:
        for i in range(runs):
            eid = f"run-{i:03d}"
            for seq in range(3):
                await store.append(
                    make_row(eid, seq, messages=[make_message(j, size=400) for j in range(seq + 1)])
                )
    with sqlite3.connect(path) as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    return [f"run-{i:03d}" for i in range(runs)]


def _damage(path: Path) -> None:
    """Overwrite every page but the schema's (the first, with the header, and any more the schema
    takes) with garbage."""
    with sqlite3.connect(path) as conn:
        schema = {n for (n,) in conn.execute("SELECT pageno FROM dbstat WHERE name = 'sqlite_schema'")}
    data = bytearray(path.read_bytes())
    page = int.from_bytes(data[16:18], "big")
    for start in range(page, len(data), page):
        if start // page + 1 not in schema:
            data[start : start + 64] = b"\xa5" * 64
    path.write_bytes(bytes(data))


async def test_a_damaged_file_is_store_corrupt_and_takes_no_more_writes(tmp_path: Path) -> None:
    path = tmp_path / "tether.db"
    ids = await _filled(path, 20)
    _damage(path)
    damaged = path.read_bytes()
    store = SQLiteStore(path)
    try:
        with anyio.fail_after(30):
            await store.setup()  # the header and the schema page are intact
            with pytest.raises(StoreCorrupt) as info:
                for eid in ids:
                    await store.history(eid)
            message = str(info.value)
            assert (
                "is damaged" in message and "refuses further writes" in message and "tether check" in message
            )
            for _ in range(2):  # refused before anything reaches the file
                with pytest.raises(StoreCorrupt):
                    await store.append(make_row("new-run", 0))
    finally:
        await store.close()
    assert path.read_bytes() == damaged


CHILD = textwrap.dedent(
    """
    import asyncio, json, os, resource, signal, sys
    from stores import SQLiteStore, StoreFull
    from stores.testing import make_message, make_row

    async def main(path):
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        store = SQLiteStore(path)
        await store.setup()
        limit = os.path.getsize(path) + 256 * 1024
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
        committed, failed = [], None
        for i in range(10_000):
            eid = f"run-{i:04d}"
            try:
                for seq in range(3):
                    await store.append(make_row(eid, seq, messages=[make_message(j, size=900) for j in range(seq + 1)]))
                    committed.append([eid, seq])
            except StoreFull as exc:
                failed = {"eid": eid, "error": str(exc)}
                break
        try:  # the store is still usable for reads while full
            await store.history(committed[0][0])
            readable = True
        except Exception:
            readable = False
        print(json.dumps({"committed": committed, "failed": failed, "readable": readable}))
        os._exit(0)  # no clean close: the file is as the full disk left it

    asyncio.run(main(sys.argv[1]))
    """
)


async def test_a_full_disk_is_store_full_and_loses_nothing_committed(tmp_path: Path) -> None:
    path = tmp_path / "tether.db"
    async with SQLiteStore(path) as store:
        await store.append(make_row("before", 0))
    with anyio.fail_after(120):
        done = await anyio.run_process([sys.executable, "-c", CHILD, str(path)], cwd=ROOT, check=False)
    assert done.returncode == 0, done.stderr.decode()
    report = json.loads(done.stdout.decode().strip().splitlines()[-1])
    failed = report["failed"]
    assert failed is not None, "the file-size limit was never reached"
    assert "cannot write to the SQLite database" in failed["error"] and "not committed" in failed["error"]
    assert report["readable"]
    committed: dict[str, int] = {}
    for eid, seq in report["committed"]:
        committed[eid] = max(seq, committed.get(eid, -1))
    assert len(committed) >= 3
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    async with SQLiteStore(path) as store:  # space is free again (no limit here)
        for eid, last in committed.items():
            assert [r.seq for r in await store.history(eid)] == list(range(last + 1)), eid
        assert [r.seq for r in await store.history("before")] == [0]
        # The run that hit the limit goes on from its last committed row.
        eid = failed["eid"]
        rows = await store.history(eid)
        nxt = make_row(eid, len(rows), messages=[make_message(j, size=900) for j in range(len(rows) + 1)])
        await store.append(nxt)
        assert (await store.history(eid))[-1] == nxt
