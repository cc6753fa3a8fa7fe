"""Racing claims of one pause in one process: the database sees one claim statement, not one each.

Rule 4 (one winner) rests on the database; the in-process single flight (``stores._flight``) only
spares the losers their round trip. Counting the claim statements that reach the server is what
tells it works: with it broken every claimer still loses correctly, one statement each.
"""

from __future__ import annotations

from typing import Any

import anyio
import asyncpg
import pytest
from _pg_support import pause, resume_row, row, schema_fixture, store_fixture  # noqa: F401 (fixtures)

from stores import AlreadyResumed, PendingInterrupt, PostgresStore

pytestmark = [pytest.mark.anyio, pytest.mark.postgres]


async def test_racing_claimers_of_one_process_send_one_claim(
    store: PostgresStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    await store.append(row("r", 0))
    paused, pending = pause("r", 1)
    await store.append_pause(paused, pending)
    sent: list[str] = []
    original = asyncpg.Connection.fetchrow

    async def counted(conn: asyncpg.Connection, query: str, *args: Any, **kw: Any) -> Any:
        if query == store._sql["claim"]:
            sent.append(query)
        return await original(conn, query, *args, **kw)

    monkeypatch.setattr(asyncpg.Connection, "fetchrow", counted)
    outcomes: list[object] = []

    async def claim(n: int) -> None:
        try:
            outcomes.append(await store.claim(resume_row("r", 2, 1)))
        except AlreadyResumed:
            outcomes.append(AlreadyResumed)

    with anyio.fail_after(30):
        async with anyio.create_task_group() as group:
            for n in range(5):
                group.start_soon(claim, n)
    assert outcomes.count(AlreadyResumed) == 4
    assert [o for o in outcomes if isinstance(o, PendingInterrupt)] == [pending]
    assert len(sent) == 1, f"{len(sent)} claim statements reached the server"
