"""The SQLite store owns its two connection threads: no private attribute of aiosqlite is used."""

from __future__ import annotations

import subprocess
import sys
import threading
from pathlib import Path

import anyio
import pytest

from stores import SQLiteStore, StoreUnavailable
from stores.testing import make_row

pytestmark = pytest.mark.anyio


def _threads(prefix: str) -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith(prefix) and t.is_alive()]


async def test_two_daemon_threads_that_end_with_close(tmp_path: Path) -> None:
    before = set(_threads("tether-sqlite-"))
    store = SQLiteStore(tmp_path / "t.db")
    await store.setup()
    mine = [t for t in _threads("tether-sqlite-") if t not in before]
    assert sorted(t.name for t in mine) == ["tether-sqlite-reader", "tether-sqlite-writer"]
    assert all(t.daemon for t in mine)
    await store.append(make_row("r", 0))
    await store.close()
    for thread in mine:
        await anyio.to_thread.run_sync(thread.join, 10.0)
        assert not thread.is_alive()
    with pytest.raises(StoreUnavailable, match=r"SQLiteStore\(.*t\.db'\) is closed"):
        await store.append(make_row("r", 1))
    with pytest.raises(StoreUnavailable, match="is closed"):
        await store.history("r")


async def test_a_cancelled_read_leaves_the_thread_serving(tmp_path: Path) -> None:
    async with SQLiteStore(tmp_path / "t.db") as store:
        await store.append(make_row("r", 0))
        with anyio.move_on_after(0):
            await store.history("r")
        assert [row.seq for row in await store.history("r")] == [0]
        await store.append(make_row("r", 1))
        assert [row.seq for row in await store.history("r")] == [0, 1]


def test_the_store_does_not_import_aiosqlite(tmp_path: Path) -> None:
    code = (
        "import sys, anyio\n"
        "from stores import SQLiteStore\n"
        "from stores.testing import make_row\n"
        "async def main():\n"
        f"    async with SQLiteStore({str(tmp_path / 'x.db')!r}) as store:\n"
        "        await store.append(make_row('r', 0))\n"
        "        assert len(await store.history('r')) == 1\n"
        "anyio.run(main)\n"
        "print('aiosqlite' in sys.modules)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert done.stdout.strip() == "False"
