"""Storage grows with content, not O(n^2): a 1,000-turn run costs each step its new messages plus a constant."""

from __future__ import annotations

import sqlite3
from typing import Any

import anyio
import asyncpg
import pytest
from conftest import Backend, on_asyncpg

from stores import Store
from stores import encode_json as encode
from stores.testing import make_row

pytestmark = pytest.mark.anyio

TURNS = 1000


def _message(i: int, role: str) -> dict[str, Any]:
    return {"role": role, "content": f"turn {i} {role}: " + "lorem ipsum " * 15}


async def _bytes_on_disk(backend: Backend) -> int:
    if backend.name == "sqlite":

        def measure() -> int:
            with sqlite3.connect(backend.target) as conn:
                conn.execute("PRAGMA wal_checkpoint(PASSIVE)")
                (pages,) = conn.execute("PRAGMA page_count").fetchone()
                (size,) = conn.execute("PRAGMA page_size").fetchone()
                (free,) = conn.execute("PRAGMA freelist_count").fetchone()
            return int((pages - free) * size)

        return await anyio.to_thread.run_sync(measure)

    async def read_size(conn: asyncpg.Connection) -> Any:
        total = await conn.fetchval(
            "SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0) FROM pg_class c "
            "JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = $1 AND c.relkind = 'r'",
            backend.schema,
        )
        return total

    total = await on_asyncpg(backend.target, read_size)
    return int(total)


async def test_a_thousand_turns_grow_linearly(store_backend: Backend) -> None:
    store: Store = store_backend.open()
    await store.setup()
    try:
        with anyio.fail_after(150):
            messages: list[Any] = []
            sizes = [await _bytes_on_disk(store_backend)]
            new_content = 0
            for turn in range(TURNS):
                new = [_message(turn, "user"), _message(turn, "assistant")]
                messages = [*messages, *new]
                new_content += sum(len(encode(m)) for m in new)
                await store.append(make_row("long-run", turn, messages=messages, step_index=turn))
                if turn + 1 in (TURNS // 2, TURNS):
                    sizes.append(await _bytes_on_disk(store_backend))
            first, second = sizes[1] - sizes[0], sizes[2] - sizes[1]
            per_step_content = new_content / TURNS
            per_step = second / (TURNS // 2)
            whole = sum(len(encode(m)) for m in messages)
            # O(n^2) storage would make the second half ~3x the first and a late step cost ~the whole conversation.
            assert second <= 1.5 * first + 64 * 1024, (first, second)
            assert per_step < 4 * per_step_content + 1024, (per_step, per_step_content)
            assert sizes[2] - sizes[0] < 10 * whole, (sizes, whole)
            last = await store.latest("long-run")
            assert last is not None and last.seq == TURNS - 1
            assert last.state_snapshot["messages"] == messages
            middle = (await store.history("long-run"))[TURNS // 2]
            assert middle.state_snapshot["messages"] == messages[: 2 * (TURNS // 2 + 1)]
            fresh = store_backend.open()
            await fresh.setup()
            try:
                again = await fresh.latest("long-run")
                assert again is not None and again.state_snapshot["messages"] == messages
            finally:
                await fresh.close()
    finally:
        await store.close()
