"""The public conformance suite (stores.testing) against SQLiteStore, PostgresStore and the memory model."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import asyncpg
import pytest
from _memory_store import MemoryDatabase, MemoryStore

from stores import PostgresStore, SQLiteStore, Store
from stores.testing import StoreConformance


class TestSQLiteStore(StoreConformance):
    """SQLiteStore on a fresh file per test."""

    require_outbox = True

    @pytest.fixture(autouse=True)
    def _database(self, sqlite_path: Path) -> None:
        self.path = sqlite_path

    async def make_store(self, **options: Any) -> Store:
        store: Store = SQLiteStore(self.path, **options)
        return store

    async def bump_schema_version(self, store: Store) -> None:
        with sqlite3.connect(self.path) as conn:
            (version,) = conn.execute("PRAGMA user_version").fetchone()
            conn.execute(f"PRAGMA user_version = {int(version) + 1}")

    async def raw_checkpoint_ids(self, execution_id: str) -> list[str]:
        with sqlite3.connect(self.path) as conn:
            rows = conn.execute(
                "SELECT checkpoint_id FROM checkpoints WHERE execution_id = ?", (execution_id,)
            ).fetchall()
        return [r[0] for r in rows]


@pytest.mark.postgres
class TestPostgresStore(StoreConformance):
    """PostgresStore on a fresh schema per test."""

    require_outbox = True

    @pytest.fixture(autouse=True)
    def _database(self, pg_schema: Any) -> None:
        self.dsn = pg_schema.dsn
        self.schema = pg_schema.schema

    async def make_store(self, **options: Any) -> Store:
        store: Store = PostgresStore(self.dsn, schema=self.schema, **options)
        return store

    async def bump_schema_version(self, store: Store) -> None:
        conn = await asyncpg.connect(self.dsn)
        try:
            version = await conn.fetchval(f'SELECT max(version) FROM "{self.schema}".schema_version')
            await conn.execute(
                f'INSERT INTO "{self.schema}".schema_version(version) VALUES ($1)', version + 1
            )
        finally:
            await conn.close()

    async def raw_checkpoint_ids(self, execution_id: str) -> list[str]:
        conn = await asyncpg.connect(self.dsn)
        try:
            rows = await conn.fetch(
                f'SELECT checkpoint_id FROM "{self.schema}".checkpoints WHERE execution_id = $1', execution_id
            )
        finally:
            await conn.close()
        return [r[0] for r in rows]


class TestMemoryModel(StoreConformance):
    """The in-memory model of the stateful test; passing here checks the suite and the model."""

    require_outbox = True

    @pytest.fixture(autouse=True)
    def _database(self) -> None:
        self.db = MemoryDatabase()

    async def make_store(self, **options: Any) -> Store:
        store: Store = MemoryStore(self.db, **options)
        return store

    async def bump_schema_version(self, store: Store) -> None:
        self.db.schema_version += 1

    async def raw_checkpoint_ids(self, execution_id: str) -> list[str]:
        return [cid for cid, (eid, _) in self.db.ids.items() if eid == execution_id]
