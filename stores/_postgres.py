"""The PostgreSQL store on asyncpg: one round trip per write, for a fleet of processes.

Design (see DESIGN.md, "Where we go beyond the reference"):

* JSON columns are PostgreSQL ``json`` (not ``jsonb``) with a binary pass-through codec: the server
  keeps msgspec's bytes verbatim, so ``-0.0``, ``1e308`` and key order round-trip exactly, while
  ``->``/``->>`` still work in ad-hoc queries.
* Every write is ONE statement: it inserts the row (with the messages it adds, see ``stores._codec``)
  and, as a data-modifying CTE where needed, inserts the pending row (pause) or deletes it (claim,
  ``run_end``). A statement is atomic, so
  no explicit transaction and no extra round trip is needed.
* Group commit: concurrent appends of many runs go out as ONE multi-row statement and one commit
  (each caller still gets its own outcome; a refused row is retried alone for its exact error).
  Sessions use ``plan_cache_mode=force_generic_plan`` so these CTEs are not re-planned per call.
* The pool's reset-on-release is a no-op (asyncpg still rolls back a connection left in a
  transaction): our statements leave no session state, and session settings live in
  ``server_settings``, so a release costs no round trip.
* Ownership locks are session advisory locks on one dedicated connection with TCP keepalives;
  concurrent takes and releases share one round trip (``stores._pglocks``).
"""

from __future__ import annotations

import contextlib
import hashlib
import re
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from datetime import timedelta
from typing import Any, Final
from urllib.parse import urlsplit

import anyio
import anyio.lowlevel
import asyncpg

from ._codec import (
    DEFAULT_MAX_ROW_BYTES,
    LogAppend,
    MessageLogs,
    StoredRow,
    conversation_of,
    decode_row,
    encode_cache_value,
    encode_pending,
    rechunk,
    replay_log,
    split_chunk,
)
from ._errors import (
    AlreadyResumed,
    IncompatibleSchema,
    RunExists,
    RunNotFound,
    StoreError,
    StoreUnavailable,
    WriteConflict,
)
from ._flight import single_claim
from ._json import decode
from ._model import (
    BOOKKEEPING_STEPS,
    COMPLETED,
    RUN_END,
    Cached,
    Checkpoint,
    PendingInterrupt,
    ReEntry,
    utcnow,
)
from ._pglocks import AdvisoryLocks
from ._reentry import resolve_forkable, resolve_reentry

__all__ = ["SCHEMA_VERSION", "PostgresStore"]

#: The newest schema version this code writes; a database at a higher version is refused.
SCHEMA_VERSION: Final = 2
_SCHEMA_NAME: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,62}")
_CLOSE_TIMEOUT: Final = 5.0

# Versioned, additive migrations: (version, DDL with {s} = the quoted schema). Never edit a shipped
# entry; add a new one.
_MIGRATIONS: Final[tuple[tuple[int, str], ...]] = (
    (
        1,
        """
CREATE TABLE {s}.checkpoints (
    id bigserial PRIMARY KEY,
    checkpoint_id text NOT NULL CONSTRAINT checkpoints_checkpoint_id_key UNIQUE,
    execution_id text NOT NULL,
    seq bigint NOT NULL,
    runner text NOT NULL,
    node_id text NOT NULL,
    step_index bigint NOT NULL,
    step_type text NOT NULL,
    status text NOT NULL,
    state_snapshot json NOT NULL,
    log_id text,
    message_count integer NOT NULL DEFAULT 0,
    node_input json NOT NULL,
    node_output json NOT NULL,
    interrupt_reason text,
    interrupt_context json NOT NULL,
    agent_path text,
    parent_checkpoint_id text,
    created_at timestamptz NOT NULL,
    synced boolean NOT NULL DEFAULT false,
    sync_error text,
    CONSTRAINT checkpoints_run_seq_key UNIQUE (execution_id, seq)
);
CREATE INDEX checkpoints_unsynced_idx ON {s}.checkpoints (id) WHERE NOT synced;
CREATE INDEX checkpoints_created_idx ON {s}.checkpoints (created_at);
CREATE TABLE {s}.messages (
    execution_id text NOT NULL,
    log_id text NOT NULL,
    idx integer NOT NULL,
    body json NOT NULL,
    CONSTRAINT messages_pkey PRIMARY KEY (execution_id, log_id, idx)
);
CREATE TABLE {s}.pending_interrupts (
    id bigserial NOT NULL,
    execution_id text NOT NULL CONSTRAINT pending_interrupts_pkey PRIMARY KEY,
    reason text NOT NULL,
    context json NOT NULL,
    node_id text NOT NULL,
    agent_path text,
    created_at timestamptz NOT NULL
);
CREATE TABLE {s}.idempotency_cache (
    execution_id text NOT NULL,
    key text NOT NULL,
    value json NOT NULL,
    created_at timestamptz NOT NULL,
    PRIMARY KEY (execution_id, key)
);
CREATE INDEX idempotency_cache_created_idx ON {s}.idempotency_cache (created_at);
""",
    ),
    (
        2,
        # Each row carries the messages it added: bodies[prev:count] of its log, prev being the
        # largest count of the log's earlier rows (stores._codec.rechunk, done by the server here).
        """
ALTER TABLE {s}.checkpoints ADD COLUMN new_messages json;
UPDATE {s}.checkpoints c SET new_messages = x.chunk
FROM (
    SELECT r.id, (SELECT json_agg(m.body ORDER BY m.idx) FROM {s}.messages m
                  WHERE m.execution_id = r.execution_id AND m.log_id = r.log_id
                    AND m.idx >= r.prev AND m.idx < r.message_count) AS chunk
    FROM (SELECT id, execution_id, log_id, message_count,
                 coalesce(max(message_count) OVER (PARTITION BY execution_id, log_id ORDER BY seq
                          ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING), 0) AS prev
          FROM {s}.checkpoints WHERE log_id IS NOT NULL) r
    WHERE r.message_count > r.prev
) x
WHERE c.id = x.id AND x.chunk IS NOT NULL;
DROP TABLE {s}.messages;
""",
    ),
)

_COLS: Final = (
    "checkpoint_id, execution_id, seq, runner, node_id, step_index, step_type, status, state_snapshot, "
    "log_id, message_count, node_input, node_output, interrupt_reason, interrupt_context, agent_path, "
    "parent_checkpoint_id, created_at"
)
_C_COLS: Final = ", ".join(f"c.{c.strip()}" for c in _COLS.split(","))
_VALUES: Final = ", ".join(f"${i}" for i in range(1, 20))
# $19 the messages the row adds (a json array, or NULL). $20..$21: how many messages its log must
# hold (the count of the log's newest row that added some): exactly the row's start when it adds
# messages, at least its count when it adds none; $21 = 0 checks nothing (no log, or a new one).
_GUARD: Final = (
    "($21::integer = 0 OR coalesce((SELECT g.message_count FROM {s}.checkpoints g "
    "WHERE g.execution_id = $2 AND g.log_id = $10 AND g.new_messages IS NOT NULL "
    "ORDER BY g.seq DESC LIMIT 1), 0) BETWEEN $20::integer AND $21::integer)"
)
# A log's chunks as one JSON value, [[message_count, [messages...]], ...] in seq order.
_FULL_LOG: Final = (
    "(SELECT json_agg(json_build_array(l.message_count, l.new_messages) ORDER BY l.seq) "
    "FROM {s}.checkpoints l WHERE l.execution_id = c.execution_id AND l.log_id = c.log_id "
    "AND l.new_messages IS NOT NULL)"
)
# The full log rides on only the newest row using it (one copy per log, one round trip).
_LOG_ONCE: Final = (
    "CASE WHEN c.log_id IS NOT NULL AND row_number() OVER "
    "(PARTITION BY c.execution_id, c.log_id ORDER BY c.seq DESC) = 1 THEN " + _FULL_LOG + " END"
)
_PENDING_COLS: Final = "execution_id, reason, context, node_id, agent_path, created_at"

_SQL: Final[dict[str, str]] = {
    "append": f"""
WITH r AS (
    INSERT INTO {{s}}.checkpoints ({_COLS}, new_messages) SELECT {_VALUES}
    WHERE ($3::bigint <> 0 OR NOT EXISTS (SELECT 1 FROM {{s}}.checkpoints e WHERE e.execution_id = $2))
      AND {_GUARD}
    RETURNING execution_id, step_type
),
p AS (DELETE FROM {{s}}.pending_interrupts WHERE execution_id IN
      (SELECT execution_id FROM r WHERE step_type = '{RUN_END}'))
SELECT count(*) FROM r""",
    # "append" for the common row (seq > 0, not run_end): a plain insert, without the seq-0 guard
    # (always true there) and the pending-row DELETE (deletes nothing there); same outcomes.
    "append_step": f"""
INSERT INTO {{s}}.checkpoints ({_COLS}, new_messages) SELECT {_VALUES}
WHERE {_GUARD}
RETURNING true""",
    "pause": f"""
WITH r AS (
    INSERT INTO {{s}}.checkpoints ({_COLS}, new_messages) SELECT {_VALUES}
    WHERE ($3::bigint <> 0 OR NOT EXISTS (SELECT 1 FROM {{s}}.checkpoints e WHERE e.execution_id = $2))
      AND {_GUARD}
    RETURNING execution_id
),
q AS (INSERT INTO {{s}}.pending_interrupts ({_PENDING_COLS})
      SELECT r.execution_id, $22, $23, $24, $25, $26 FROM r)
SELECT count(*) FROM r""",
    "claim": f"""
WITH d AS (
    DELETE FROM {{s}}.pending_interrupts WHERE execution_id = $2 AND {_GUARD}
    RETURNING {_PENDING_COLS}
), r AS (
    INSERT INTO {{s}}.checkpoints ({_COLS}, new_messages) SELECT {_VALUES} FROM d
    RETURNING execution_id
)
SELECT d.execution_id, d.reason, d.context, d.node_id, d.agent_path, d.created_at,
       EXISTS (SELECT 1 FROM {{s}}.pending_interrupts x WHERE x.execution_id = $2) AS was_pending,
       EXISTS (SELECT 1 FROM {{s}}.checkpoints x WHERE x.execution_id = $2) AS known
FROM (SELECT 1) AS one LEFT JOIN d ON true""",
    "import": f"""
WITH r AS (
    INSERT INTO {{s}}.checkpoints ({_COLS}, new_messages, synced) SELECT {_VALUES}, true
    WHERE $20::integer >= 0 AND $21::integer >= 0  -- the log guard's arguments, unused here
    ON CONFLICT (checkpoint_id) DO NOTHING
    RETURNING 1
)
SELECT count(*) FROM r""",
    "batch": f"""
WITH v AS (
    SELECT * FROM unnest($1::text[], $2::text[], $3::bigint[], $4::text[], $5::text[], $6::bigint[],
        $7::text[], $8::text[], $9::json[], $10::text[], $11::integer[], $12::json[], $13::json[],
        $14::text[], $15::json[], $16::text[], $17::text[], $18::timestamptz[], $19::json[],
        $20::integer[], $21::integer[])
        WITH ORDINALITY AS v({_COLS}, new_messages, lo, hi, ord)
), r AS (
    INSERT INTO {{s}}.checkpoints ({_COLS}, new_messages)
    SELECT {", ".join(f"v.{c.strip()}" for c in _COLS.split(","))}, v.new_messages
    FROM v
    -- LATERAL ... LIMIT 1: index probes per row, never a hashed scan of a whole table.
    LEFT JOIN LATERAL (SELECT true AS found FROM {{s}}.checkpoints e
                       WHERE e.execution_id = v.execution_id LIMIT 1) AS run ON true
    LEFT JOIN LATERAL (SELECT g.message_count AS length FROM {{s}}.checkpoints g
                       WHERE g.execution_id = v.execution_id AND g.log_id = v.log_id
                         AND g.new_messages IS NOT NULL ORDER BY g.seq DESC LIMIT 1) AS log ON true
    WHERE (v.seq <> 0 OR run.found IS NULL)
      AND (v.hi = 0 OR coalesce(log.length, 0) BETWEEN v.lo AND v.hi)
    ORDER BY v.ord
    ON CONFLICT DO NOTHING
    RETURNING checkpoint_id, execution_id, step_type
), p AS (DELETE FROM {{s}}.pending_interrupts WHERE execution_id IN
      (SELECT execution_id FROM r WHERE step_type = '{RUN_END}'))
SELECT checkpoint_id FROM r""",
    "newest": f"SELECT {_C_COLS}, {_FULL_LOG} FROM {{s}}.checkpoints c "
    "WHERE c.execution_id = $1 ORDER BY c.seq DESC LIMIT 1",
    "row_at": f"SELECT {_C_COLS}, {_FULL_LOG} FROM {{s}}.checkpoints c "
    "WHERE c.execution_id = $1 AND c.seq = $2",
    "row_before": f"SELECT {_C_COLS}, {_FULL_LOG} FROM {{s}}.checkpoints c "
    "WHERE c.execution_id = $1 AND c.seq < $2 ORDER BY c.seq DESC LIMIT 1",
    "get": f"SELECT {_C_COLS}, {_FULL_LOG} FROM {{s}}.checkpoints c "
    "WHERE c.execution_id = $1 AND c.checkpoint_id = $2",
    "history": f"SELECT {_C_COLS}, {_LOG_ONCE} FROM {{s}}.checkpoints c "
    "WHERE c.execution_id = $1 ORDER BY c.seq",
    "unsynced": f"SELECT {_C_COLS}, {_LOG_ONCE} FROM "
    "(SELECT * FROM {s}.checkpoints WHERE NOT synced ORDER BY id LIMIT $1) c ORDER BY c.id",
    "pending_all": f"SELECT {_PENDING_COLS} FROM {{s}}.pending_interrupts ORDER BY created_at DESC, id DESC",
    "pending_one": f"SELECT {_PENDING_COLS} FROM {{s}}.pending_interrupts WHERE execution_id = $1",
    "delete_run": """
WITH c AS (DELETE FROM {s}.checkpoints WHERE execution_id = $1 RETURNING 1),
p AS (DELETE FROM {s}.pending_interrupts WHERE execution_id = $1),
k AS (DELETE FROM {s}.idempotency_cache WHERE execution_id = $1)
SELECT count(*) FROM c""",
    "cache_get": "SELECT value FROM {s}.idempotency_cache WHERE execution_id = $1 AND key = $2",
    "cache_put": """
WITH ins AS (
    INSERT INTO {s}.idempotency_cache (execution_id, key, value, created_at) VALUES ($1, $2, $3, $4)
    ON CONFLICT DO NOTHING RETURNING value
)
SELECT value FROM ins
UNION ALL SELECT value FROM {s}.idempotency_cache WHERE execution_id = $1 AND key = $2
LIMIT 1""",
    "mark_synced": "UPDATE {s}.checkpoints SET synced = true "
    "WHERE checkpoint_id = ANY($1::text[]) AND NOT synced",
    "mark_quarantined": "UPDATE {s}.checkpoints c SET synced = true, sync_error = u.reason "
    "FROM unnest($1::text[], $2::text[]) AS u(id, reason) WHERE c.checkpoint_id = u.id",
    "sync_state": "SELECT synced, sync_error FROM {s}.checkpoints WHERE checkpoint_id = $1",
    "existing_ids": "SELECT checkpoint_id FROM {s}.checkpoints WHERE checkpoint_id = ANY($1::text[])",
    # prune: the newest row of every run that has something older than the cutoff.
    "prune_heads": """
SELECT DISTINCT ON (c.execution_id) c.execution_id, c.step_type, c.status
FROM {s}.checkpoints c
WHERE c.execution_id IN (SELECT execution_id FROM {s}.checkpoints WHERE created_at < $1
                         UNION SELECT execution_id FROM {s}.idempotency_cache WHERE created_at < $1)
ORDER BY c.execution_id, c.seq DESC""",
    "prune_done_rows": "SELECT execution_id, seq FROM {s}.checkpoints "
    "WHERE execution_id = ANY($1::text[]) AND created_at < $2",
    "prune_done_cache": "DELETE FROM {s}.idempotency_cache WHERE execution_id = ANY($1::text[]) "
    "AND created_at < $2",
    "prune_skeleton": f"""
SELECT execution_id, seq, step_type, status, created_at < $2 AS old,
       CASE WHEN step_type IN ({", ".join(f"'{s}'" for s in sorted(BOOKKEEPING_STEPS))})
            THEN node_input END AS node_input
FROM {{s}}.checkpoints WHERE execution_id = ANY($1::text[]) ORDER BY execution_id, seq""",
    # The logs that lose a row carrying messages, with every chunk they hold now.
    "prune_logs": """
SELECT l.execution_id, l.log_id, l.message_count, l.new_messages FROM {s}.checkpoints l
WHERE (l.execution_id, l.log_id) IN (
    SELECT c.execution_id, c.log_id FROM {s}.checkpoints c
    JOIN unnest($1::text[], $2::bigint[]) AS v(e, q) ON c.execution_id = v.e AND c.seq = v.q
    WHERE c.new_messages IS NOT NULL)
  AND l.new_messages IS NOT NULL
ORDER BY l.execution_id, l.log_id, l.seq""",
    "prune_rows": """
WITH c AS (DELETE FROM {s}.checkpoints c USING unnest($1::text[], $2::bigint[]) AS v(e, q)
           WHERE c.execution_id = v.e AND c.seq = v.q RETURNING 1)
SELECT count(*) FROM c""",
    "log_rows": "SELECT id, message_count, new_messages FROM {s}.checkpoints "
    "WHERE execution_id = $1 AND log_id = $2 ORDER BY seq",
    "set_chunks": "UPDATE {s}.checkpoints c SET new_messages = u.chunk "
    "FROM unnest($1::bigint[], $2::json[]) AS u(id, chunk) WHERE c.id = u.id",
}

_CONNECT_ERRORS: Final = (OSError, asyncpg.PostgresError, asyncpg.InterfaceError)
_LOST_ERRORS: Final = (
    OSError,
    asyncpg.PostgresConnectionError,
    asyncpg.exceptions.OperatorInterventionError,
    asyncpg.exceptions.ConnectionDoesNotExistError,
    asyncpg.InternalClientError,  # a connection whose server went away mid-protocol
)

# A write's arguments: the planned row and its message append, kept to re-plan after a stale log.
_Plan = tuple[StoredRow, LogAppend | None]


class PostgresStore:
    """A :class:`~stores.Store` and :class:`~stores.ReplicatedStore` on PostgreSQL (asyncpg).

    ``dsn`` is a ``postgresql://`` URI; all tables live in ``schema`` (created on first use).
    ``max_row_bytes`` bounds one row's new content (:class:`RowTooLarge` above it).
    """

    def __init__(
        self,
        dsn: str,
        *,
        schema: str = "tether",
        min_size: int = 1,
        max_size: int = 20,
        max_row_bytes: int = DEFAULT_MAX_ROW_BYTES,
        connect_timeout: float = 10.0,
        lock_keepalive_idle: int = 5,
        max_flushers: int = 2,
    ) -> None:
        if not isinstance(schema, str) or _SCHEMA_NAME.fullmatch(schema) is None:
            raise StoreError(
                f"invalid schema name {schema!r}: use letters, digits and underscores, "
                "not starting with a digit, at most 63 characters"
            )
        self.dsn = dsn
        self.schema = schema
        self._min_size = min_size
        self._max_size = max_size
        self._connect_timeout = connect_timeout
        self._keepalive_idle = lock_keepalive_idle
        quoted = f'"{schema}"'
        self._sql = {name: sql.replace("{s}", quoted) for name, sql in _SQL.items()}
        self._logs = MessageLogs(max_row_bytes=max_row_bytes)
        self._pool: asyncpg.Pool | None = None
        self._setup_lock = anyio.Lock()
        self._lock_conn: asyncpg.Connection | None = None
        self._locks = AdvisoryLocks(self._lock_connection, self._lost, connect_timeout)
        self._closed = False
        self._queue: list[_Queued] = []
        self._flushers = 0
        self._max_flushers = max_flushers
        # Connections taken from the pool once and kept for the flushers (at most one each): an
        # append then costs no pool acquire/release (asyncpg's release alone schedules a task).
        self._writers: list[asyncpg.pool.PoolConnectionProxy] = []

    def __repr__(self) -> str:
        return f"PostgresStore({_describe(self.dsn)}, schema={self.schema!r})"

    # -- setup and teardown -------------------------------------------------------------------

    async def setup(self) -> None:
        """Create the pool and migrate the schema (idempotent; safe when processes race)."""
        await self._ready()

    async def _ready(self) -> asyncpg.Pool:
        pool = self._pool
        if pool is not None:
            return pool
        async with self._setup_lock:
            if self._pool is not None:
                return self._pool
            if self._closed:
                raise StoreUnavailable(f"{self!r} is closed")
            pool = await self._connect_pool()
            try:
                async with pool.acquire() as conn:
                    await self._migrate(conn)
            except BaseException:
                pool.terminate()
                raise
            self._pool = pool
            return pool

    async def _connect_pool(self) -> asyncpg.Pool:
        try:
            with anyio.fail_after(self._connect_timeout + 1):
                pool = await asyncpg.create_pool(
                    self.dsn,
                    min_size=self._min_size,
                    max_size=self._max_size,
                    init=_init_connection,
                    reset=_no_reset,
                    timeout=self._connect_timeout,
                    server_settings={
                        "synchronous_commit": "on",
                        "application_name": "tether",
                        "plan_cache_mode": "force_generic_plan",
                    },
                )
        except _CONNECT_ERRORS as exc:
            raise _unavailable(self.dsn, exc) from None
        return pool

    async def _migrate(self, conn: asyncpg.pool.PoolConnectionProxy) -> None:
        """Run the missing migrations in one transaction under a per-schema advisory lock."""
        quoted = f'"{self.schema}"'
        key = _key(self.schema, "\x00migrate")
        with self._lost():
            async with conn.transaction():
                # The lock comes first: CREATE SCHEMA IF NOT EXISTS itself races otherwise.
                await conn.execute(
                    f"SELECT pg_advisory_xact_lock({key}); "
                    f"CREATE SCHEMA IF NOT EXISTS {quoted}; "
                    f"CREATE TABLE IF NOT EXISTS {quoted}.schema_version ("
                    "version integer PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())"
                )
                found = await conn.fetchval(f"SELECT coalesce(max(version), 0) FROM {quoted}.schema_version")
                if found > SCHEMA_VERSION:
                    raise IncompatibleSchema(
                        f"schema {self.schema!r} was written by tether schema version {found}; "
                        f"this tether understands up to version {SCHEMA_VERSION}: upgrade tether"
                    )
                for version, ddl in _MIGRATIONS:
                    if version > found:
                        await conn.execute(ddl.replace("{s}", quoted))
                        await conn.execute(
                            f"INSERT INTO {quoted}.schema_version (version) VALUES ($1)", version
                        )

    async def close(self) -> None:
        """Close the pool and the lock connection (releasing every ownership lock); idempotent."""
        self._closed = True
        pool, self._pool = self._pool, None
        conn, self._lock_conn = self._lock_conn, None
        writers, self._writers = self._writers, []
        self._locks.forget()
        with anyio.CancelScope(shield=True):
            with anyio.move_on_after(_CLOSE_TIMEOUT):
                if conn is not None:
                    await conn.close()
                if pool is not None:
                    for writer in writers:
                        await pool.release(writer)
                    await pool.close()
                return
            if conn is not None:
                conn.terminate()
            if pool is not None:
                pool.terminate()

    async def __aenter__(self) -> PostgresStore:
        await self.setup()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # -- writes -------------------------------------------------------------------------------

    async def append(self, row: Checkpoint) -> None:
        """Append ``row``; a ``run_end`` also deletes the pending row.

        Group commit: concurrent appends (of any runs) are written by one statement and one commit
        on one connection, each caller awaiting its own outcome. A caller that finds fewer than
        ``max_flushers`` batches in flight writes the queue itself; the others wait and are handed
        the lead when a flusher finishes. A lone appender writes its row at once.
        """
        item = _Queued(row, self._plan(row))
        try:
            pool = await self._ready()
        except BaseException:
            self._logs.forget(row.execution_id)
            raise
        self._queue.append(item)
        if self._flushers < self._max_flushers:
            self._flushers += 1
            item.lead = True
        else:
            try:
                await item.wake.wait()
            except BaseException:
                self._abandon(item)
                raise
        if item.lead:
            try:
                await self._flush_until(pool, item)
            finally:
                self._flushers -= 1
                self._hand_off()
        if item.error is not None:
            raise item.error

    async def _flush_until(self, pool: asyncpg.Pool, item: _Queued) -> None:
        """Write queued batches until ``item`` is done (it may be in another flusher's batch)."""
        # Under load (another flusher busy, or rows already queued), let appenders that are ready to
        # run queue their rows first, so they share this commit. A lone appender writes at once.
        if self._flushers > 1 or len(self._queue) > 1:
            await anyio.lowlevel.cancel_shielded_checkpoint()
        writer: asyncpg.pool.PoolConnectionProxy | None = None
        broken = False
        try:
            while not item.done.is_set():
                if not self._queue:
                    await item.done.wait()
                    return
                batch, self._queue = self._queue[:_MAX_BATCH], self._queue[_MAX_BATCH:]
                with anyio.CancelScope(shield=True):  # the batch is other callers' writes too
                    if writer is None:
                        writer = self._idle_writer() or await self._take_writer(pool)
                    broken = await self._flush(writer, batch) or broken
        finally:
            if writer is not None:
                await self._give_back(pool, writer, broken)

    def _idle_writer(self) -> asyncpg.pool.PoolConnectionProxy | None:
        """A kept writer connection that is still usable, if any."""
        while self._writers:
            writer = self._writers.pop()
            if _usable(writer):
                return writer
        return None

    async def _take_writer(self, pool: asyncpg.Pool) -> asyncpg.pool.PoolConnectionProxy:
        with self._lost():
            conn: asyncpg.pool.PoolConnectionProxy = await pool.acquire(timeout=self._connect_timeout)
        return conn

    async def _give_back(
        self, pool: asyncpg.Pool, writer: asyncpg.pool.PoolConnectionProxy, broken: bool
    ) -> None:
        """Keep a healthy writer for the next flush; a broken one (or after close) goes to the pool."""
        if not broken and self._pool is pool and _usable(writer):
            self._writers.append(writer)
            return
        if broken:
            with contextlib.suppress(asyncpg.InterfaceError):  # already taken back by the pool
                writer.terminate()  # its protocol state is unknown: never reuse it
        with anyio.CancelScope(shield=True), anyio.move_on_after(_CLOSE_TIMEOUT):
            await pool.release(writer)  # a no-op for a connection the pool already took back

    async def _flush(self, writer: asyncpg.pool.PoolConnectionProxy, batch: list[_Queued]) -> bool:
        """Write ``batch`` on ``writer``, finishing each item; ``True`` if the connection was lost."""
        written: set[str] = set()
        broken = False
        if len(batch) > 1:
            try:
                with self._lost():
                    recs = await writer.fetch(self._sql["batch"], *_batch_args(batch))
                written = {rec[0] for rec in recs}
            except (asyncpg.PostgresError, StoreUnavailable):
                written = set()  # e.g. two stale writers of one log in the batch: go one by one
        for item in batch:
            if item.row.checkpoint_id in written:
                item.finish(None)
                continue
            try:  # refused (or a batch of one): the single statement gives the exact outcome
                await self._write_planned("append", item.row, item.plan, (), via=writer)
                item.finish(None)
            except Exception as exc:
                broken = broken or isinstance(exc, StoreUnavailable)
                item.finish(exc)
        return broken

    def _hand_off(self) -> None:
        """Give a free flusher slot to the oldest waiting appender."""
        for waiting in self._queue:
            if self._flushers >= self._max_flushers:
                return
            if not waiting.lead:
                waiting.lead = True
                self._flushers += 1
                waiting.wake.set()
                return

    def _abandon(self, item: _Queued) -> None:
        """A waiting appender was cancelled: drop its row if not yet taken, pass on its lead."""
        if item in self._queue:
            self._queue.remove(item)
        self._logs.forget(item.row.execution_id)
        if item.lead:  # the slot reserved for it was never used
            self._flushers -= 1
            self._hand_off()

    async def append_pause(self, row: Checkpoint, pending: PendingInterrupt) -> None:
        """Append the interrupted row and the pending row in one statement."""
        extra = (
            pending.reason,
            encode_pending(pending),
            pending.node_id,
            pending.agent_path,
            pending.created_at,
        )
        await self._write("pause", row, extra)

    async def _write(self, kind: str, row: Checkpoint, extra: tuple[Any, ...]) -> None:
        plan = self._plan(row)
        await self._write_planned(kind, row, plan, extra)

    async def _write_planned(
        self,
        kind: str,
        row: Checkpoint,
        plan: _Plan,
        extra: tuple[Any, ...],
        via: asyncpg.pool.PoolConnectionProxy | None = None,
    ) -> None:
        """Write a planned row with one statement, on ``via`` or a pooled connection."""
        try:
            runner = via if via is not None else await self._ready()
            if await self._run(runner, kind, row, plan, extra):
                return
            # Nothing inserted: the run exists (seq 0), or our memory of its log is stale. Re-plan
            # against a fresh log once; a second refusal can only mean the run exists.
            self._logs.forget(row.execution_id)
            if await self._run(runner, kind, row, self._plan(row), extra):
                return
        except BaseException:
            self._logs.forget(row.execution_id)
            raise
        self._logs.forget(row.execution_id)
        if row.seq == 0:
            raise RunExists(f"run {row.execution_id!r} already has checkpoints; seq 0 starts a new run only")
        raise WriteConflict(
            f"the message log of run {row.execution_id!r} kept changing under {row.node_id!r}"
        )

    async def _run(
        self,
        runner: asyncpg.Pool | asyncpg.pool.PoolConnectionProxy,
        kind: str,
        row: Checkpoint,
        plan: _Plan,
        extra: tuple[Any, ...],
    ) -> bool:
        try:
            with self._lost():
                if kind == "append" and row.seq != 0 and row.step_type != RUN_END:
                    kind = "append_step"
                return bool(await runner.fetchval(self._sql[kind], *_args(plan), *extra))
        except asyncpg.UniqueViolationError as exc:
            raise _conflict(row, exc) from None

    async def claim(self, row: Checkpoint) -> PendingInterrupt:
        """Delete the pending row and append the ``resume`` row in one statement.

        A claim of a run that another claimer of this process (any store on the same DSN and schema)
        is already claiming waits for that one: if it won, this one lost without a round trip.
        """
        return await single_claim(
            ("postgres", self.dsn, self.schema, row.execution_id),
            lambda: self._claim_row(row),
            lambda: AlreadyResumed(
                f"run {row.execution_id!r} has no pending interrupt: it was already resumed or never paused"
            ),
        )

    async def _claim_row(self, row: Checkpoint) -> PendingInterrupt:
        pool = await self._ready()
        plan = self._plan(row)
        try:
            rec = await self._claim(pool, row, plan)
            if rec["execution_id"] is None and rec["was_pending"]:
                self._logs.forget(row.execution_id)  # a rival won, or our log memory was stale
                rec = await self._claim(pool, row, self._plan(row))
        except BaseException:
            self._logs.forget(row.execution_id)
            raise
        if rec["execution_id"] is None:
            self._logs.forget(row.execution_id)
            if not rec["known"]:
                raise RunNotFound(f"run {row.execution_id!r} has no checkpoints")
            raise AlreadyResumed(
                f"run {row.execution_id!r} has no pending interrupt: it was already resumed or never paused"
            )
        return _pending(rec)

    async def _claim(self, pool: asyncpg.Pool, row: Checkpoint, plan: _Plan) -> asyncpg.Record:
        try:
            with self._lost():
                rec = await pool.fetchrow(self._sql["claim"], *_args(plan))
        except asyncpg.UniqueViolationError as exc:
            raise _conflict(row, exc) from None
        assert rec is not None
        return rec

    def _plan(self, row: Checkpoint) -> _Plan:
        return self._logs.plan(row)

    # -- reads --------------------------------------------------------------------------------

    async def latest(self, execution_id: str) -> Checkpoint | None:
        """The newest row (one round trip); seeds the message memory with its conversation's log."""
        pool = await self._ready()
        with self._lost():
            rec = await pool.fetchrow(self._sql["newest"], execution_id)
        if rec is None:
            return None
        row = self._decode_one(rec)
        self._seed([(row, rec)])
        return row

    async def reentry(self, execution_id: str) -> ReEntry:
        """Where a resume re-enters (usually one round trip: the newest row is the step)."""
        pool = await self._ready()
        seen: list[tuple[Checkpoint, asyncpg.Record]] = []

        async def fetch(name: str, *args: Any) -> Checkpoint | None:
            with self._lost():
                rec = await pool.fetchrow(self._sql[name], execution_id, *args)
            if rec is None:
                return None
            row = self._decode_one(rec)
            seen.append((row, rec))
            return row

        async def row_at(seq: int) -> Checkpoint | None:
            return await fetch("row_at", seq)

        async def row_before(seq: int) -> Checkpoint | None:
            return await fetch("row_before", seq)

        newest = await fetch("newest")
        entry = await resolve_reentry(execution_id, newest, row_at, row_before)
        self._seed(seen)
        return entry

    async def forkable(self, execution_id: str, checkpoint_id: str | None = None) -> Checkpoint:
        """The row a fork starts from (see :func:`stores._reentry.resolve_forkable`)."""
        pool = await self._ready()

        async def fetch(name: str, *args: Any) -> Checkpoint | None:
            with self._lost():
                rec = await pool.fetchrow(self._sql[name], execution_id, *args)
            return None if rec is None else self._decode_one(rec)

        async def row_at(seq: int) -> Checkpoint | None:
            return await fetch("row_at", seq)

        async def row_before(seq: int) -> Checkpoint | None:
            return await fetch("row_before", seq)

        if checkpoint_id is None:
            newest, named = await fetch("newest"), None
        else:
            newest, named = None, await fetch("get", checkpoint_id)
        return await resolve_forkable(execution_id, newest, named, checkpoint_id, row_at, row_before)

    async def get(self, execution_id: str, checkpoint_id: str) -> Checkpoint | None:
        """One row by id (both keys must match)."""
        pool = await self._ready()
        with self._lost():
            rec = await pool.fetchrow(self._sql["get"], execution_id, checkpoint_id)
        return None if rec is None else self._decode_one(rec)

    async def history(self, execution_id: str) -> list[Checkpoint]:
        """Every row in ``seq`` order (one round trip; each message log crosses the wire once)."""
        pool = await self._ready()
        with self._lost():
            recs = await pool.fetch(self._sql["history"], execution_id)
        return _decode_many(recs)

    async def pending(self, execution_id: str | None = None) -> list[PendingInterrupt]:
        """Pending interrupts, newest first."""
        pool = await self._ready()
        with self._lost():
            if execution_id is None:
                recs = await pool.fetch(self._sql["pending_all"])
            else:
                recs = await pool.fetch(self._sql["pending_one"], execution_id)
        return [_pending(r) for r in recs]

    def _decode_one(self, rec: asyncpg.Record) -> Checkpoint:
        return decode_row(StoredRow(*rec[:18]), _log(rec[18])[: rec["message_count"]])

    def _seed(self, rows: Iterable[tuple[Checkpoint, asyncpg.Record]]) -> None:
        """Remember the full log of each conversation read (newest row first wins)."""
        done: set[str] = set()
        for row, rec in sorted(rows, key=lambda pair: -pair[0].seq):
            conversation = conversation_of(row.agent_path)
            if rec["log_id"] is None or conversation in done:
                continue
            done.add(conversation)
            self._logs.remember(row.execution_id, conversation, rec["log_id"], _log(rec[18]))

    # -- deletes ------------------------------------------------------------------------------

    async def delete_run(self, execution_id: str) -> int:
        """Delete everything of a run in one statement; returns the rows deleted."""
        pool = await self._ready()
        self._logs.forget(execution_id)
        with self._lost():
            count: int = await pool.fetchval(self._sql["delete_run"], execution_id)
        return count

    async def prune(self, older_than: timedelta) -> int:
        """Rule 10 of DESIGN.md, in one transaction; returns checkpoint rows deleted.

        Completed runs lose every row and cache entry older than the cutoff. Other runs lose only
        completed rows older than the cutoff that re-entry does not read (the re-entry row and the
        rows its ``resume``/``recover`` rows name stay), so they resume exactly as before. Message
        logs no remaining row references go with them.
        """
        cutoff = utcnow() - older_than
        pool = await self._ready()
        deleted = 0
        with self._lost():
            async with pool.acquire() as conn, conn.transaction():
                heads = await conn.fetch(self._sql["prune_heads"], cutoff)
                done = [h["execution_id"] for h in heads if _completed(h["step_type"], h["status"])]
                others = [h["execution_id"] for h in heads if not _completed(h["step_type"], h["status"])]
                runs: list[str] = []
                seqs: list[int] = []
                if done:
                    for rec in await conn.fetch(self._sql["prune_done_rows"], done, cutoff):
                        runs.append(rec[0])
                        seqs.append(rec[1])
                    await conn.execute(self._sql["prune_done_cache"], done, cutoff)
                if others:
                    skeleton = await conn.fetch(self._sql["prune_skeleton"], others, cutoff)
                    more_runs, more_seqs = await _prunable(skeleton)
                    runs += more_runs
                    seqs += more_seqs
                if runs:
                    deleted = await self._delete_rows(conn, runs, seqs)
        for execution_id in done + others:
            self._logs.forget(execution_id)
        return deleted

    async def _delete_rows(
        self, conn: asyncpg.pool.PoolConnectionProxy, runs: list[str], seqs: list[int]
    ) -> int:
        """Delete rows (inside the caller's transaction); the messages they added move onto the
        remaining rows of their logs that need them (see :func:`stores._codec.rechunk`)."""
        logs: dict[tuple[str, str], list[tuple[int, bytes]]] = {}
        for rec in await conn.fetch(self._sql["prune_logs"], runs, seqs):
            logs.setdefault((rec[0], rec[1]), []).append((rec[2], rec[3]))
        deleted: int = await conn.fetchval(self._sql["prune_rows"], runs, seqs)
        ids: list[int] = []
        chunks: list[bytes | None] = []
        for (execution_id, log_id), held in logs.items():
            bodies = replay_log(held, split_chunk)
            rows = await conn.fetch(self._sql["log_rows"], execution_id, log_id)
            for rec, chunk in zip(rows, rechunk([r[1] for r in rows], bodies), strict=True):
                if chunk != rec[2]:
                    ids.append(rec[0])
                    chunks.append(chunk)
        if ids:
            await conn.execute(self._sql["set_chunks"], ids, chunks)
        return deleted

    # -- idempotency cache --------------------------------------------------------------------

    async def cache_get(self, execution_id: str, key: str) -> Cached | None:
        """The cached value for ``(execution_id, key)``, if any."""
        pool = await self._ready()
        with self._lost():
            value = await pool.fetchval(self._sql["cache_get"], execution_id, key)
        return None if value is None else Cached(decode(value))

    async def cache_put(self, execution_id: str, key: str, value: Any) -> Any:
        """Insert if absent and return the stored value: the first writer wins (one round trip)."""
        data = encode_cache_value(execution_id, key, value)
        pool = await self._ready()
        with self._lost():
            stored = await pool.fetchval(self._sql["cache_put"], execution_id, key, data, utcnow())
            if stored is None:  # a rival committed after our snapshot: read it with a fresh one
                stored = await pool.fetchval(self._sql["cache_get"], execution_id, key)
        return decode(stored if stored is not None else data)

    # -- ownership lock -----------------------------------------------------------------------

    async def try_lock(self, execution_id: str) -> bool:
        """Take the run's session advisory lock on the dedicated lock connection (batched)."""
        if self._closed:
            raise StoreUnavailable(f"{self!r} is closed")
        return await self._locks.try_lock(execution_id, _key(self.schema, execution_id))

    async def unlock(self, execution_id: str) -> None:
        """Release the run's lock if this store holds it."""
        conn = self._lock_conn
        if conn is None or conn.is_closed():
            self._locks.forget(execution_id)  # a lost connection took its locks with it
            return
        await self._locks.unlock(execution_id)

    async def _lock_connection(self) -> asyncpg.Connection:
        conn = self._lock_conn
        if conn is not None and not conn.is_closed():
            return conn
        if self._closed:
            raise StoreUnavailable(f"{self!r} is closed")
        self._locks.forget()  # a lost connection took its locks with it
        idle = str(self._keepalive_idle)
        try:
            with anyio.fail_after(self._connect_timeout + 1):
                conn = await asyncpg.connect(
                    self.dsn,
                    timeout=self._connect_timeout,
                    server_settings={
                        "application_name": "tether-locks",
                        "tcp_keepalives_idle": idle,
                        "tcp_keepalives_interval": "1",
                        "tcp_keepalives_count": idle,
                    },
                )
        except _CONNECT_ERRORS as exc:
            raise _unavailable(self.dsn, exc) from None
        self._lock_conn = conn
        return conn

    # -- outbox -------------------------------------------------------------------------------

    async def fetch_unsynced(self, limit: int) -> list[Checkpoint]:
        """Rows not yet shipped, oldest write first (one round trip)."""
        pool = await self._ready()
        with self._lost():
            recs = await pool.fetch(self._sql["unsynced"], limit)
        return _decode_many(recs)

    async def mark_synced(self, checkpoint_ids: Sequence[str]) -> None:
        """Mark rows shipped (idempotent; empty is a no-op)."""
        if not checkpoint_ids:
            return
        pool = await self._ready()
        with self._lost():
            await pool.execute(self._sql["mark_synced"], list(checkpoint_ids))

    async def mark_quarantined(self, reasons: dict[str, str]) -> None:
        """Mark poison rows synced with their reason, in one statement (last reason wins)."""
        if not reasons:
            return
        pool = await self._ready()
        with self._lost():
            await pool.execute(self._sql["mark_quarantined"], list(reasons), list(reasons.values()))

    async def sync_state(self, checkpoint_id: str) -> tuple[bool, str | None] | None:
        """``(synced, sync_error)`` of a row, or ``None``."""
        pool = await self._ready()
        with self._lost():
            rec = await pool.fetchrow(self._sql["sync_state"], checkpoint_id)
        return None if rec is None else (rec["synced"], rec["sync_error"])

    async def import_rows(self, rows: Sequence[Checkpoint]) -> int:
        """Insert restored rows as synced, skipping existing ids, in one transaction."""
        if not rows:
            return 0
        pool = await self._ready()
        runs = {row.execution_id for row in rows}
        inserted = 0
        try:
            with self._lost():
                async with pool.acquire() as conn, conn.transaction():
                    ids = [row.checkpoint_id for row in rows]
                    existing = {r[0] for r in await conn.fetch(self._sql["existing_ids"], ids)}
                    fresh: dict[str, Checkpoint] = {}
                    for row in sorted(rows, key=lambda r: (r.execution_id, r.seq)):
                        if row.checkpoint_id not in existing:
                            fresh.setdefault(row.checkpoint_id, row)
                    for run in runs:
                        self._logs.forget(run)
                    plans = [(row, self._plan(row)) for row in fresh.values()]
                    for row, plan in plans:
                        try:
                            inserted += await conn.fetchval(self._sql["import"], *_args(plan))
                        except asyncpg.UniqueViolationError as exc:
                            raise _conflict(row, exc) from None
        except BaseException:
            for run in runs:
                self._logs.forget(run)
            raise
        return inserted

    # -- errors -------------------------------------------------------------------------------

    @contextmanager
    def _lost(self) -> Iterator[None]:
        """Turn a lost connection into :class:`StoreUnavailable` naming the host."""
        try:
            yield
        except _LOST_ERRORS as exc:
            raise _unavailable(self.dsn, exc) from None


# -- helpers ----------------------------------------------------------------------------------


async def _init_connection(conn: asyncpg.Connection) -> None:
    """JSON columns travel as the exact bytes msgspec wrote (binary ``json`` is plain text)."""
    await conn.set_type_codec(
        "json", encoder=_identity, decoder=_identity, schema="pg_catalog", format="binary"
    )


def _identity(data: bytes) -> bytes:
    return data


async def _no_reset(conn: asyncpg.Connection) -> None:
    """Skip the pool's ``RESET ALL`` round trip: we keep no session state (asyncpg still rolls back)."""


def _args(plan: _Plan) -> tuple[Any, ...]:
    """The statement arguments of a planned row: its columns, its chunk and the log guard ($19-$21)."""
    stored, append = plan
    if append is not None:
        return (*stored, append.chunk, append.start, append.start)
    if stored.log_id is not None and stored.message_count:
        return (*stored, None, stored.message_count, _NO_LIMIT)
    return (*stored, None, 0, 0)


_NO_LIMIT: Final = 2**31 - 1


_MAX_BATCH: Final = 256


class _Queued:
    """One caller's append waiting in the group-commit queue."""

    __slots__ = ("done", "error", "lead", "plan", "row", "wake")

    def __init__(self, row: Checkpoint, plan: _Plan) -> None:
        self.row = row
        self.plan = plan
        self.lead = False
        self.error: Exception | None = None
        self.wake = anyio.Event()  # set when done, or when handed the lead
        self.done = anyio.Event()

    def finish(self, error: Exception | None) -> None:
        self.error = error
        self.done.set()
        self.wake.set()


def _batch_args(batch: Sequence[_Queued]) -> list[list[Any]]:
    """Column arrays for the ``batch`` statement: the arguments of each row's single statement."""
    columns: list[list[Any]] = [[] for _ in range(21)]
    for item in batch:
        for column, value in zip(columns, _args(item.plan), strict=True):
            column.append(value)
    return columns


def _key(schema: str, name: str) -> int:
    """A signed 64-bit advisory-lock key: blake2b of the name, keyed by the schema."""
    digest = hashlib.blake2b(
        name.encode("utf-8", "surrogatepass"), digest_size=8, key=schema.encode()
    ).digest()
    return int.from_bytes(digest, "big", signed=True)


def _conflict(row: Checkpoint, exc: asyncpg.UniqueViolationError) -> Exception:
    where = exc.constraint_name
    if where == "checkpoints_run_seq_key" and row.seq == 0:
        return RunExists(f"run {row.execution_id!r} already has checkpoints; seq 0 starts a new run only")
    if where == "pending_interrupts_pkey":
        return WriteConflict(f"run {row.execution_id!r} already has a pending interrupt")
    if where == "checkpoints_checkpoint_id_key":
        return WriteConflict(f"checkpoint id {row.checkpoint_id!r} is already taken")
    return WriteConflict(f"seq {row.seq} of run {row.execution_id!r} is already taken (a stale writer)")


def _describe(dsn: str) -> str:
    """Host, port and database of a DSN, never its password."""
    try:
        parts = urlsplit(dsn)
        host = parts.hostname or "localhost"
        port = parts.port or 5432
    except ValueError:
        return "PostgreSQL (unparsable DSN)"
    database = parts.path.lstrip("/") or "(default database)"
    return f"PostgreSQL at {host}:{port}/{database}"


def _unavailable(dsn: str, exc: BaseException) -> StoreUnavailable:
    if isinstance(exc, ValueError):  # a DSN error may quote the DSN: say only what kind it was
        detail = f"invalid DSN ({type(exc).__name__})"
    elif isinstance(exc, TimeoutError):
        detail = "connection timed out"
    else:
        detail = f"{type(exc).__name__}: {exc}"
    return StoreUnavailable(f"cannot reach {_describe(dsn)}: {detail}")


def _completed(step_type: str, status: str) -> bool:
    return step_type == RUN_END and status == COMPLETED


def _pending(rec: asyncpg.Record) -> PendingInterrupt:
    return PendingInterrupt(
        execution_id=rec["execution_id"],
        reason=rec["reason"],
        context=decode(rec["context"]),
        node_id=rec["node_id"],
        agent_path=rec["agent_path"],
        created_at=rec["created_at"],
    )


def _usable(writer: asyncpg.pool.PoolConnectionProxy) -> bool:
    """Whether a kept writer connection can run a statement (open, idle, still lent by the pool)."""
    try:
        return not writer.is_closed() and not writer.is_in_transaction()
    except asyncpg.InterfaceError:
        return False  # lost: the pool has already taken it back


def _log(chunks: bytes | None) -> list[Any]:
    """The messages of a log from its ``_FULL_LOG`` value (``None``: no chunks)."""
    return [] if chunks is None else replay_log(decode(chunks), list)


def _decode_many(recs: Sequence[asyncpg.Record]) -> list[Checkpoint]:
    """Rows whose newest user of each log carries the full log (see ``_LOG_ONCE``)."""
    logs: dict[tuple[str, str], list[Any]] = {}
    for rec in recs:
        if rec[18] is not None:
            logs[(rec["execution_id"], rec["log_id"])] = _log(rec[18])
    out = []
    for rec in recs:
        log_id = rec["log_id"]
        messages = logs.get((rec["execution_id"], log_id), []) if log_id is not None else []
        out.append(decode_row(StoredRow(*rec[:18]), messages[: rec["message_count"]]))
    return out


async def _prunable(skeleton: Sequence[asyncpg.Record]) -> tuple[list[str], list[int]]:
    """The (run, seq) pairs prune may delete from unfinished runs: old completed rows that the
    re-entry walk (the same one :meth:`reentry` does) does not visit."""
    by_run: dict[str, list[asyncpg.Record]] = {}
    for rec in skeleton:
        by_run.setdefault(rec["execution_id"], []).append(rec)
    runs: list[str] = []
    seqs: list[int] = []
    for execution_id, recs in by_run.items():
        rows = {
            r["seq"]: Checkpoint(
                execution_id=execution_id,
                seq=r["seq"],
                runner="",
                node_id="",
                step_type=r["step_type"],
                status=r["status"],
                node_input=decode(r["node_input"]) if r["node_input"] is not None else {},
            )
            for r in recs
        }
        keep = await _walked(execution_id, rows)
        for r in recs:
            if r["old"] and r["status"] == COMPLETED and r["seq"] not in keep:
                runs.append(execution_id)
                seqs.append(r["seq"])
    return runs, seqs


async def _walked(execution_id: str, rows: dict[int, Checkpoint]) -> set[int]:
    """The seqs the re-entry walk reads, starting from the newest row."""
    order = sorted(rows)
    visited = {order[-1]}

    async def row_at(seq: int) -> Checkpoint | None:
        row = rows.get(seq)
        if row is not None:
            visited.add(seq)
        return row

    async def row_before(seq: int) -> Checkpoint | None:
        below = [s for s in order if s < seq]
        if not below:
            return None
        visited.add(below[-1])
        return rows[below[-1]]

    try:
        await resolve_forkable(execution_id, rows[order[-1]], None, None, row_at, row_before)
    except RunNotFound:
        pass  # only markers and bookkeeping: keep what the walk touched
    return visited
