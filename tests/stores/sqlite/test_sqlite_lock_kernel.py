"""The SQLite ownership lock at the kernel, seen from another process.

The conformance suite's lock tests run two store instances in one process; this one asks from a
child process, after a second store instance in the owner's process opened and closed its own
descriptor of the lock file. Classic POSIX record locks (``F_SETLK``) belong to the process and
all go when it closes any descriptor of the file, so the child would be granted a run whose owner
is alive (two live owners); open-file-description locks stay with their descriptor.
"""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import anyio
import pytest

from stores import SQLiteStore

pytestmark = pytest.mark.anyio

ROOT = Path(__file__).resolve().parents[3]
ASK = textwrap.dedent(
    """
    import asyncio, sys
    from stores import SQLiteStore

    async def main(path, run):
        async with SQLiteStore(path) as store:
            print("granted" if await store.try_lock(run) else "refused")

    asyncio.run(main(sys.argv[1], sys.argv[2]))
    """
)


async def _ask(path: Path, run: str) -> str:
    with anyio.fail_after(60):
        done = await anyio.run_process([sys.executable, "-c", ASK, str(path), run], cwd=ROOT, check=False)
    assert done.returncode == 0, done.stderr.decode()
    return done.stdout.decode().strip()


async def test_another_process_is_refused_a_held_run_after_a_second_store_closed(tmp_path: Path) -> None:
    path = tmp_path / "tether.db"
    owner = SQLiteStore(path)
    try:
        await owner.setup()
        assert await owner.try_lock("held")
        assert await _ask(path, "held") == "refused"
        # A second store of this process opens the lock file, takes and drops a lock, and closes.
        other = SQLiteStore(path)
        await other.setup()
        assert await other.try_lock("another")
        await other.unlock("another")
        await other.close()
        assert await _ask(path, "held") == "refused"  # the owner is alive: its lock still holds
        assert await _ask(path, "free") == "granted"
        await owner.unlock("held")
        assert await _ask(path, "held") == "granted"
    finally:
        await owner.close()
