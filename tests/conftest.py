"""Shared fixtures: the anyio backend, a fresh PostgreSQL schema per test, a SQLite path per test.

PostgreSQL: ``postgresql://postgres@127.0.0.1:5432/test`` unless ``TETHER_PG_DSN`` says otherwise.
When it is unreachable the PostgreSQL tests skip, or FAIL when ``REQUIRE_POSTGRES=1`` (as in CI).
The suite's connections skip asyncpg's SSL probe unless ``PGSSLMODE`` says otherwise (see
:data:`SSL_MODE`).
"""

from __future__ import annotations

import asyncio
import functools
import os
import subprocess
import sys
import uuid
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple, TypeVar

import anyio
import asyncpg
import pytest

from stores import RUN_END, Checkpoint, PostgresStore, SQLiteStore, Store

if TYPE_CHECKING:
    from actors import ActorSystem, RunSummary

T = TypeVar("T")

DEFAULT_PG_DSN = "postgresql://postgres@127.0.0.1:5432/test"

#: ``PGSSLMODE`` for the suite and the processes it starts (the test server has no SSL). With
#: asyncpg's default ``sslmode=prefer`` every connect first asks the server for SSL; a connect cut
#: short just as its socket opens (by a timeout or a cancel) then leaves asyncpg's probe
#: a future with an error nobody reads ("unexpected connection_lost() call"), which the test runner
#: reports as a failure of whatever test is running. ``tests/test_suite_rules.py`` shows both.
SSL_MODE = os.environ.setdefault("PGSSLMODE", "disable")


@pytest.fixture
def anyio_backend() -> str:
    """asyncio; ``TETHER_TEST_LOOP=trio`` runs the tests that do not choose their loop under trio
    (and the child processes of the run tests, which read it too)."""
    return os.environ.get("TETHER_TEST_LOOP", "asyncio")


#: The fixtures that reach the server through ``pg_schema`` (``store_backend`` asks for it when its
#: parameter is ``postgres``). A test may also ask for ``pg_schema`` itself with
#: ``request.getfixturevalue`` (the proofs' ``_pg`` helper does).
_PG_FIXTURES = frozenset({"pg_schema", "store_backend"})


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Every test marked ``postgres`` reaches the server through ``pg_schema`` (directly or through a
    fixture built on it), so without the server it skips (or fails with ``REQUIRE_POSTGRES=1``)
    instead of failing; a test that takes ``pg_schema`` unmarked is marked here, so that
    ``-m "not postgres"`` leaves it out."""
    wrong: list[str] = []
    for item in items:
        marked = item.get_closest_marker("postgres") is not None
        names = getattr(item, "fixturenames", ())
        code = getattr(getattr(item, "function", None), "__code__", None)
        asks = code is not None and not {"getfixturevalue", "_pg"}.isdisjoint(code.co_names)
        if marked and _PG_FIXTURES.isdisjoint(names) and not asks:
            wrong.append(f"{item.nodeid}: marked postgres but does not take pg_schema")
        elif not marked and "pg_schema" in names:
            item.add_marker(pytest.mark.postgres)  # so that -m "not postgres" leaves it out
    if wrong:
        raise pytest.UsageError("PostgreSQL tests must skip the way conftest says:\n  " + "\n  ".join(wrong))


def pg_base_dsn() -> str:
    """The DSN of the test database (``TETHER_PG_DSN`` overrides the default)."""
    return os.environ.get("TETHER_PG_DSN", DEFAULT_PG_DSN)


def postgres_missing(reason: str) -> None:
    """Skip, or fail when ``REQUIRE_POSTGRES=1``: PostgreSQL is needed and not there."""
    message = f"PostgreSQL is unreachable at {pg_base_dsn()}: {reason}"
    if os.environ.get("REQUIRE_POSTGRES") == "1":
        pytest.fail(f"{message} (REQUIRE_POSTGRES=1, so this is a failure, not a skip)", pytrace=False)
    pytest.skip(message)


async def _pg_connect() -> asyncpg.Connection:
    return await asyncpg.connect(pg_base_dsn(), timeout=5)


def _pg_run(sql: str) -> None:
    async def run() -> None:
        conn = await _pg_connect()
        try:
            await conn.execute(sql)
        finally:
            await conn.close()

    asyncio.run(run())


async def on_asyncpg(dsn: str, fn: Callable[[asyncpg.Connection], Awaitable[T]], *, timeout: float = 10) -> T:
    """``fn`` on a raw asyncpg connection of its own (connected within ``timeout`` seconds), from a
    test on either event loop: asyncpg runs only on asyncio, so the call runs on an asyncio loop of
    its own in a worker thread."""

    async def run() -> T:
        conn = await asyncpg.connect(dsn, timeout=timeout)
        try:
            return await fn(conn)
        finally:
            await conn.close()

    return await anyio.to_thread.run_sync(asyncio.run, run())


def drop_pg_schema(schema: str) -> None:
    """Drop a schema of the test database (and everything in it)."""
    _pg_run(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


class PgSchema(NamedTuple):
    """A fresh schema in the test database."""

    dsn: str
    schema: str


@pytest.fixture
def pg_schema() -> Iterator[PgSchema]:
    """A fresh schema name ``t_<uuid hex>`` (the store's setup creates it), dropped afterwards.

    A plain (sync) fixture so that sync tests (hypothesis state machines) can use it too.
    """
    try:
        _pg_run("SELECT 1")
    except (OSError, asyncpg.PostgresError, TimeoutError) as exc:
        postgres_missing(f"{type(exc).__name__}: {exc}")
    schema = f"t_{uuid.uuid4().hex}"
    try:
        yield PgSchema(pg_base_dsn(), schema)
    finally:
        drop_pg_schema(schema)


@pytest.fixture
def pg_dsn(pg_schema: PgSchema) -> str:
    """The DSN of the test database (its schema for this test is ``pg_schema.schema``)."""
    return pg_schema.dsn


@pytest.fixture
def sqlite_path(tmp_path: Path) -> Iterator[Path]:
    """A path for a fresh SQLite database in the test's temporary directory."""
    yield tmp_path / "tether.db"


class Backend(NamedTuple):
    """Where a test's stores live: ``sqlite`` (a file) or ``postgres`` (a DSN and a schema)."""

    name: str
    target: str
    schema: str = ""

    def open(self, **options: Any) -> Store:
        """A new store instance (not set up) on this backend's database."""
        if self.name == "sqlite":
            return SQLiteStore(self.target, **options)
        return PostgresStore(self.target, schema=self.schema, **options)

    def child_args(self) -> list[str]:
        """How a child process names this database: backend, target, schema."""
        return [self.name, self.target, self.schema or "-"]


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def store_backend(request: pytest.FixtureRequest, tmp_path: Path) -> Backend:
    """Each test that takes it runs once on SQLite and once on PostgreSQL."""
    if request.param == "sqlite":
        return Backend("sqlite", str(tmp_path / "tether.db"))
    pg: PgSchema = request.getfixturevalue("pg_schema")
    return Backend("postgres", pg.dsn, pg.schema)


class Counter:
    """Counts the statements sent by every asyncpg connection (the pool's and the held writers'),
    directly or through a statement it prepared (preparing one runs nothing, as the driver's own
    prepare of a query it has not seen before is not counted either)."""

    def __init__(self, store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
        self.calls: list[str] = []
        for name in ("fetch", "fetchrow", "fetchval", "execute", "executemany"):
            monkeypatch.setattr(
                asyncpg.Connection, name, self._counted(name, getattr(asyncpg.Connection, name))
            )
        for name in ("fetch", "fetchrow", "fetchval", "executemany"):
            statement = asyncpg.prepared_stmt.PreparedStatement
            monkeypatch.setattr(statement, name, self._counted(name, getattr(statement, name)))

    def _counted(self, name: str, method: Any) -> Any:
        def call(conn: asyncpg.Connection, *args: Any, **kw: Any) -> Any:
            self.calls.append(name)
            return method(conn, *args, **kw)

        return call


# -- a schema-1 database (messages in their own table), for the migration tests ------------------

#: Rows of a schema-1 database: (execution_id, seq, agent_path, log_id, message_count). Log "a" is
#: extended, re-read at a shorter prefix and extended again; "b" is a second conversation of run "r".
V1_ROWS: list[tuple[str, int, str | None, str | None, int]] = [
    ("r", 0, "agent:a", "a", 2),
    ("r", 1, "agent:a/tool:t", "a", 2),
    ("r", 2, "agent:a", "a", 5),
    ("r", 3, "agent:a", "a", 3),
    ("r", 4, "agent:b", "b", 1),
    ("r", 5, "agent:a", "a", 6),
    ("s", 0, None, None, 0),
]
#: The messages each schema-1 log holds, by log_id.
V1_LOGS: dict[str, list[dict[str, Any]]] = {
    "a": [{"role": "user", "content": f"a{i}", "n": -0.0 if i == 1 else i} for i in range(6)],
    "b": [{"role": "user", "content": "b0"}],
}


def v1_expected(execution_id: str, seq: int) -> list[dict[str, Any]] | None:
    """The messages a schema-1 row holds (``None``: the row has no message log)."""
    for eid, s, _, log_id, count in V1_ROWS:
        if (eid, s) == (execution_id, seq):
            return None if log_id is None else V1_LOGS[log_id][:count]
    raise KeyError((execution_id, seq))


async def check_v1_history(store: Store) -> None:
    """Every row of the converted schema-1 database reads the messages it saw before."""
    for eid in ("r", "s"):
        for found in await store.history(eid):
            want = v1_expected(eid, found.seq)
            assert found.state_snapshot == ({"turn": 1} if want is None else {"messages": want, "turn": 1})
    assert (await store.latest("r")) == (await store.history("r"))[-1]


# -- the benchmarks, run as their commands -------------------------------------------------------

ROOT = Path(__file__).resolve().parents[1]


def run_benchmark(name: str, *args: str, timeout: float = 60) -> str:
    """Run ``python -m benchmarks.<name> *args`` from the project root; its output, after exit 0."""
    result = subprocess.run(
        [sys.executable, "-m", f"benchmarks.{name}", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


async def stop_processes(processes: list[Any]) -> None:
    """End each process still running: SIGTERM, up to 30 s to exit, then SIGKILL (shielded, so a
    test cut short still leaves no process behind)."""
    import signal

    with anyio.CancelScope(shield=True):
        for process in processes:
            if process.returncode is None:
                process.send_signal(signal.SIGTERM)
        for process in processes:
            with anyio.move_on_after(30):
                await process.wait()
            if process.returncode is None:
                process.kill()
                await process.wait()


# -- waiting for a run's state -------------------------------------------------------------------


async def until_run(
    store: Store,
    execution_id: str,
    read: Callable[[], Awaitable[T]],
    check: Callable[[T], bool],
    *,
    timeout: float = 30,
) -> T:
    """Read the run's state with ``read`` until ``check`` holds of it, and return that state.

    Between reads it waits on the store's watch of the run, which wakes it when any process wrote a
    row of the run (PostgreSQL: ``NOTIFY``) or after the watch's poll interval (SQLite), rather than
    on a wall-clock sleep: the test sees the state as soon as the store has it, without a read every
    few milliseconds. ``TimeoutError`` after ``timeout`` seconds.
    """
    watch = store.watch(execution_id)
    try:
        with anyio.fail_after(timeout):
            await watch.wait(0)  # the store listens from now on (PostgreSQL): no row goes unheard
            while not check(found := await read()):
                await watch.wait(timeout)
            return found
    finally:
        watch.close()


async def until_status(
    system: ActorSystem, execution_id: str, status: str, *, timeout: float = 30
) -> RunSummary:
    """Wait (see :func:`until_run`) until ``system.status(execution_id)`` reads ``status``; that summary."""
    assert system.store is not None, "the system was given its store"
    return await until_run(
        system.store,
        execution_id,
        lambda: system.status(execution_id),
        lambda summary: summary.status == status,
        timeout=timeout,
    )


async def until_ended(store: Store, execution_ids: list[str], *, timeout: float = 30) -> None:
    """Wait (see :func:`until_run`) until the newest row of each run is its ``run_end``, one run
    after the other, all within ``timeout`` seconds (a run that has ended stays ended)."""
    with anyio.fail_after(timeout):
        for execution_id in execution_ids:
            await until_run(
                store, execution_id, functools.partial(store.latest, execution_id), _ended, timeout=timeout
            )


def _ended(row: Checkpoint | None) -> bool:
    return row is not None and row.step_type == RUN_END
