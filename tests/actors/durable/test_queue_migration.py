"""A database written at the schema before queues (SQLite 6, PostgreSQL 5) opens in place: its paused,
in-flight and enqueued runs go on, and new runs are enqueued into queues beside them.

The old database is written by this code with the migration chain cut at the previous version (the
schema the shipped code wrote): a run paused at an approval, a run mid-step whose owner is gone (its
store closed, so its liveness lock went), and a run handed to the fleet at its first row.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import anyio
import pytest
from _queue_child import agent, ledger
from conftest import Backend

from actors import ActorSystem, Resume
from stores import Checkpoint
from stores.lowlevel import postgres_schema_module, sqlite_schema_module

pytestmark = pytest.mark.anyio


def _before_queues(monkeypatch: pytest.MonkeyPatch, backend: Backend) -> None:
    """The migration chain cut before queues. The tables and columns of the migrations after queues
    (the inbox, the index of waits, schedules, the inbox entries' outbox: each made only if absent,
    so they apply again) are made too, with the last kept version: this code writes through them."""
    if backend.name == "sqlite":
        later = [sqlite_schema_module.MIGRATIONS[v] for v in sorted(sqlite_schema_module.MIGRATIONS) if v > 7]
        outbox = sqlite_schema_module.MIGRATIONS[6]

        def last(conn: sqlite3.Connection) -> None:
            outbox(conn)  # type: ignore[operator]
            for migration in later:
                if callable(migration):
                    migration(conn)
                    continue
                for statement in migration:
                    conn.execute(statement)

        kept = {v: m for v, m in sqlite_schema_module.MIGRATIONS.items() if v < 6}
        monkeypatch.setattr(sqlite_schema_module, "SCHEMA_VERSION", 6)
        monkeypatch.setattr(sqlite_schema_module, "MIGRATIONS", {**kept, 6: last})
    else:
        later = "".join(ddl for version, ddl in postgres_schema_module.MIGRATIONS if version > 6)
        kept = tuple(
            (v, ddl + later if v == 5 else ddl) for v, ddl in postgres_schema_module.MIGRATIONS if v <= 5
        )
        monkeypatch.setattr(postgres_schema_module, "SCHEMA_VERSION", 5)
        monkeypatch.setattr(postgres_schema_module, "MIGRATIONS", kept)


async def test_runs_written_before_queues_go_on_after_the_upgrade(
    store_backend: Backend, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    runner = agent(tmp_path)
    with monkeypatch.context() as old:
        _before_queues(old, store_backend)
        async with store_backend.open() as store, ActorSystem(store, runners=[runner]) as system:
            paused = await (await system.spawn(runner, "ask-old")).result()
            assert paused.status == "paused"
            for eid in ("in-flight", "handed"):
                assert await store.try_lock(eid)
                await store.append(
                    Checkpoint(
                        execution_id=eid,
                        seq=0,
                        runner=runner.name,
                        node_id="turn:0",
                        state_snapshot={"messages": [{"role": "user", "content": eid}], "turn": 0},
                        agent_path=runner.label,
                    )
                )
            await store.unlock("handed")  # handed to the fleet; in-flight's owner goes with the store
    async with store_backend.open() as store, ActorSystem(store, runners=[runner]) as system:
        assert (await system.status("in-flight")).status == "orphaned"
        assert (await system.status("handed")).status == "queued"
        fresh = await system.enqueue(runner, "fresh", queue="new", key="k")
        resumed = await system.resume(paused.execution_id, Resume(approved=True))
        assert resumed.status == "completed"
        with anyio.fail_after(60):
            assert await system.sweep() == 3
        for eid in ("in-flight", "handed", fresh):
            summary = await system.status(eid)
            assert summary.status == "completed", eid
        assert ((await system.status(fresh)).queue, (await system.status(fresh)).key) == ("new", "k")
        assert (await system.status("handed")).queue is None
    assert sorted(e["order"] for e in ledger(tmp_path) if e["event"] == "end") == sorted(
        ["ask-old", "in-flight", "handed", "fresh"]
    )
