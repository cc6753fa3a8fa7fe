"""What a PostgresStore that cannot work says, each cause by name (against the real server where one is needed).

An unreachable server, a refused login, a missing database and a missing permission are each a
``StoreUnavailable`` whose message names the cause; a libpq keyword DSN is read, or refused by the
keyword's name; reserved schemas are refused before any connection.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

import anyio
import pytest
from _pg_support import DSN, closed_port, schema_fixture
from conftest import PgSchema, on_asyncpg

from stores import InvalidStoreURL, PostgresStore, StoreError, StoreUnavailable
from stores.testing import make_row

pytestmark = pytest.mark.anyio
schema = schema_fixture
#: The tests that talk to the server (the others need none, so they run without it).
server = pytest.mark.postgres


async def _refusal(dsn: str, schema: str = "tether") -> str:
    store = PostgresStore(dsn, schema=schema, connect_timeout=5)
    try:
        with anyio.fail_after(30):
            with pytest.raises(StoreUnavailable) as info:
                await store.setup()
    finally:
        await store.close()
    return str(info.value)


def _with(user: str | None = None, database: str | None = None, port: int | None = None) -> str:
    from urllib.parse import urlsplit, urlunsplit

    parts = urlsplit(DSN)
    netloc = f"{user or parts.username}@{parts.hostname}:{port or parts.port or 5432}"
    return urlunsplit((parts.scheme, netloc, f"/{database or parts.path.lstrip('/')}", "", ""))


async def test_an_unreachable_server_is_named_as_such() -> None:
    message = await _refusal(_with(port=closed_port()))
    assert message.startswith("cannot reach PostgreSQL at 127.0.0.1:")
    assert "connection refused" in message and "is the server running" in message


@server
async def test_a_refused_login_names_the_role(pg_schema: PgSchema) -> None:
    role = f"ghost_{uuid.uuid4().hex[:8]}"
    message = await _refusal(_with(user=role))
    assert f"refused the login of role {role!r}" in message
    assert f'role "{role}" does not exist' in message


@server
async def test_a_missing_database_is_named(pg_schema: PgSchema) -> None:
    database = f"nodb_{uuid.uuid4().hex[:8]}"
    message = await _refusal(_with(database=database))
    assert message.startswith(f"database {database!r} does not exist on PostgreSQL at")
    assert "CREATE DATABASE" in message


@pytest.fixture
async def weak_role(pg_schema: PgSchema) -> AsyncIterator[str]:
    """A login role that may connect (PUBLIC may) but not create a schema (nobody may by default),
    dropped afterwards."""
    role = f"weak_{uuid.uuid4().hex[:8]}"
    await on_asyncpg(DSN, lambda conn: conn.execute(f'CREATE ROLE "{role}" LOGIN'))
    try:
        yield role
    finally:
        await on_asyncpg(DSN, lambda conn: conn.execute(f'DROP OWNED BY "{role}"; DROP ROLE "{role}"'))


@server
async def test_a_missing_permission_names_the_role_and_the_need(weak_role: str, schema: str) -> None:
    message = await _refusal(_with(user=weak_role), schema=schema)
    assert f"role {weak_role!r} lacks a permission on PostgreSQL at" in message
    assert "permission denied for database" in message and "needs CREATE on the database" in message


@server
async def test_a_keyword_dsn_is_read_and_a_bad_keyword_refused_by_name(schema: str) -> None:
    from urllib.parse import urlsplit

    parts = urlsplit(DSN)
    words = f"host={parts.hostname} port={parts.port or 5432} dbname={parts.path.lstrip('/')} user={parts.username}"
    async with PostgresStore(words, schema=schema) as store:
        row = make_row("run-k", 0)
        await store.append(row)
        assert await store.history("run-k") == [row]
    with pytest.raises(InvalidStoreURL, match="'fallback_application_name'") as unknown:
        PostgresStore(f"{words} fallback_application_name=x", schema=schema)
    assert "supported are database, dbname" in str(unknown.value)  # schema= is not one here
    with pytest.raises(InvalidStoreURL, match="schema= is not a connection parameter"):
        PostgresStore(f"{words} schema={schema}", schema=schema)
    with pytest.raises(InvalidStoreURL, match="neither"):
        PostgresStore("localhost", schema=schema)
    with pytest.raises(TypeError, match="not bytes"):
        PostgresStore(b"postgresql://x@y/z", schema=schema)  # type: ignore[arg-type]


@pytest.mark.parametrize("bad", ["", "1abc", "a-b", 'x"; DROP TABLE y; --', "a b", "é", "a" * 64])
def test_schema_name_is_validated(bad: str) -> None:
    with pytest.raises(StoreError, match="schema"):
        PostgresStore(DSN, schema=bad)


async def test_unreachable_dsn_is_store_unavailable_quickly_without_password() -> None:
    store = PostgresStore(f"postgresql://postgres:s3cret@127.0.0.1:{closed_port()}/test", connect_timeout=2)
    start = time.monotonic()
    with pytest.raises(StoreUnavailable) as info:
        await store.latest("x")
    assert time.monotonic() - start < 3
    assert "127.0.0.1" in str(info.value) and "s3cret" not in str(info.value)
    with pytest.raises(StoreUnavailable):
        await store.try_lock("x")
    await store.close()


@pytest.mark.parametrize("name", ["pg_catalog", "pg_toast", "pg_mine", "PG_x", "information_schema"])
def test_reserved_schemas_are_refused_before_connecting(name: str) -> None:
    with pytest.raises(StoreError, match=f"schema {name!r} is reserved by PostgreSQL"):
        PostgresStore("postgresql://nobody@127.0.0.1:1/none", schema=name)


def test_other_bad_schema_names_keep_their_refusal() -> None:
    bad: list[Any] = ["1abc", "a-b", "x" * 64, 7]
    for name in bad:
        with pytest.raises(StoreError, match="invalid schema name"):
            PostgresStore("postgresql://nobody@127.0.0.1:1/none", schema=name)
