"""The SQLite lock file under the store: its watcher thread loses the owner id when the file is
replaced or removed with no store call in between, and an unusable lock file is a clear error.
"""

from __future__ import annotations

import logging
import os
import sys
import textwrap
import threading
from pathlib import Path

import anyio
import pytest

from stores import OwnershipLost, SQLiteStore, StoreUnavailable
from stores.lowlevel import WATCH_INTERVAL

pytestmark = pytest.mark.anyio

LIMIT = 30.0


async def _lost_within(lost: list[list[str]], count: int) -> None:
    """Wait (bounded) with no store call until the listener has heard ``count`` losses."""
    with anyio.fail_after(50 * WATCH_INTERVAL):
        while len(lost) < count:  # noqa: ASYNC110 (a plain list listener, read as the test's probe)
            await anyio.sleep(0.02)


def _replace(path: str) -> None:
    fresh = path + ".new"
    Path(fresh).write_bytes(b"")
    os.replace(fresh, path)


@pytest.mark.parametrize("anyio_backend", ["asyncio", "trio"])
async def test_the_watcher_loses_a_replaced_lock_file_with_no_store_call(
    anyio_backend: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store = SQLiteStore(tmp_path / "t.db")
    try:
        await store.setup()
        before = set(threading.enumerate())
        assert await store.try_lock("r")
        started = [t for t in set(threading.enumerate()) - before if t.name == "tether-sqlite-locks"]
        assert len(started) == 1 and started[0].daemon  # never keeps a process alive
        lost: list[list[str]] = []
        store.on_ownership_lost(lost.append)
        with caplog.at_level(logging.ERROR):
            _replace(store.lock_path)
            await _lost_within(lost, 1)
        assert lost == [["r"]]
        assert f"its lock file {store.lock_path!r} was removed or replaced" in caplog.text
        # The watcher looks a few times while no owner id is held; then a fresh owner id takes the
        # next run, and the same watcher keeps looking.
        await anyio.sleep(5 * WATCH_INTERVAL)
        assert await store.try_lock("s")
        _replace(store.lock_path)
        await _lost_within(lost, 2)
        assert lost == [["r"], ["s"]]
        with pytest.raises(OwnershipLost):
            store.check_owner("s")
    finally:
        await store.close()


async def test_a_removed_lock_file_is_lost_at_the_next_check_and_by_the_watcher(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "t.db")
    try:
        assert await store.try_lock("r")
        lost: list[list[str]] = []
        store.on_ownership_lost(lost.append)
        os.unlink(store.lock_path)
        with pytest.raises(OwnershipLost, match="'r' was abandoned"):
            store.check_owner("r")  # no await since the unlink: the check itself looked
        assert lost == [["r"]]
        assert await store.try_lock("s")  # a new lock file, a fresh owner id
        os.unlink(store.lock_path)
        await _lost_within(lost, 2)  # no store call: the watcher saw it
        assert lost == [["r"], ["s"]]
    finally:
        await store.close()


async def test_a_lock_file_that_cannot_be_opened_is_a_clear_error(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "t.db")
    try:
        await store.setup()
        os.mkdir(store.lock_path)  # a directory where the lock file belongs
        with pytest.raises(StoreUnavailable) as caught:
            await store.try_lock("r")
        assert str(caught.value).startswith(f"cannot open the lock file {store.lock_path!r}: ")
        assert "directory" in str(caught.value)
    finally:
        await store.close()


#: Another process holds a POSIX lock on the whole lock file until its stdin closes.
HOLD = textwrap.dedent(
    """
    import fcntl, os, sys
    fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    print("held", flush=True)
    sys.stdin.read()
    """
)


async def test_a_lock_file_locked_by_another_process_is_a_clear_error(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "t.db")
    try:
        await store.setup()
        with anyio.fail_after(LIMIT):
            async with await anyio.open_process([sys.executable, "-c", HOLD, store.lock_path]) as holder:
                assert holder.stdout is not None and holder.stdin is not None
                assert (await holder.stdout.receive()).strip() == b"held"
                with pytest.raises(StoreUnavailable) as caught:
                    await store.try_lock("r")
                await holder.stdin.aclose()
                await holder.wait()
        assert str(caught.value).startswith(f"cannot lock {store.lock_path!r}: ")
        assert await store.try_lock("r")  # the holder is gone: the lock is taken
    finally:
        await store.close()


async def test_a_forked_child_does_not_keep_the_parents_lock(tmp_path: Path) -> None:
    """The child closes its copy of the lock descriptor at fork: once the parent's store closes,
    another store takes the run although the child still lives."""
    path = tmp_path / "t.db"
    store = SQLiteStore(path)
    other = SQLiteStore(path)
    release_read, release_write = os.pipe()
    try:
        assert await store.try_lock("r")
        pid = os.fork()
        if pid == 0:  # the child: waits for the parent's word, touches nothing else
            os.read(release_read, 1)
            os._exit(0)
        try:
            await store.close()
            assert await other.try_lock("r")  # the child lives; its copy of the lock is gone
        finally:
            os.write(release_write, b"x")
            with anyio.fail_after(LIMIT):
                while os.waitpid(pid, os.WNOHANG) == (0, 0):  # noqa: ASYNC110, ASYNC222 (WNOHANG: no wait)
                    await anyio.sleep(0.01)
    finally:
        os.close(release_read)
        os.close(release_write)
        await other.close()
        await store.close()


async def test_the_watcher_keeps_looking_through_a_path_it_cannot_stat(tmp_path: Path) -> None:
    """A stat error other than a missing file (here a symlink loop) does not stop the watcher: once
    the path is a plain replaced file again, the loss is seen with no store call."""
    store = SQLiteStore(tmp_path / "t.db")
    try:
        assert await store.try_lock("r")
        lost: list[list[str]] = []
        store.on_ownership_lost(lost.append)
        loop = store.lock_path + ".loop"
        os.symlink(store.lock_path, loop)  # once at the path, stat() of it raises ELOOP
        os.replace(loop, store.lock_path)
        await anyio.sleep(5 * WATCH_INTERVAL)  # the watcher looks a few times
        _replace(store.lock_path)
        await _lost_within(lost, 1)
        assert lost == [["r"]]
    finally:
        await store.close()
