"""The public conformance suite (stores.testing) against SQLiteStore, PostgresStore and the memory model.

SQLite and PostgreSQL run it under both of anyio's event loops (asyncio and trio).
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import asyncpg
import pytest
from _memory_store import MemoryDatabase, MemoryStore
from conftest import on_asyncpg

from stores import PostgresStore, SQLiteStore, Store
from stores.testing import StoreConformance

#: anyio's event loops the stores are checked under.
LOOPS = ["asyncio", "trio"]


class TestSQLiteStore(StoreConformance):
    """SQLiteStore on a fresh file per test."""

    require_outbox = True
    require_ownership = True

    @pytest.fixture(params=LOOPS)
    def anyio_backend(self, request: pytest.FixtureRequest) -> str:
        return str(request.param)

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
    require_ownership = True

    @pytest.fixture(params=LOOPS)
    def anyio_backend(self, request: pytest.FixtureRequest) -> str:
        return str(request.param)

    @pytest.fixture(autouse=True)
    def _database(self, pg_schema: Any) -> None:
        self.dsn = pg_schema.dsn
        self.schema = pg_schema.schema

    async def make_store(self, **options: Any) -> Store:
        store: Store = PostgresStore(self.dsn, schema=self.schema, **options)
        return store

    async def bump_schema_version(self, store: Store) -> None:
        table = f'"{self.schema}".schema_version'

        async def bump(conn: asyncpg.Connection) -> None:
            version = await conn.fetchval(f"SELECT max(version) FROM {table}")
            await conn.execute(f"INSERT INTO {table}(version) VALUES ($1)", version + 1)

        await on_asyncpg(self.dsn, bump)

    async def raw_checkpoint_ids(self, execution_id: str) -> list[str]:
        sql = f'SELECT checkpoint_id FROM "{self.schema}".checkpoints WHERE execution_id = $1'

        async def ids(conn: asyncpg.Connection) -> list[str]:
            return [r[0] for r in await conn.fetch(sql, execution_id)]

        return await on_asyncpg(self.dsn, ids)


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
