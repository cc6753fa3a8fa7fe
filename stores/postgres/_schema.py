"""The PostgreSQL schema: versioned, additive migrations recorded in ``<schema>.schema_version``.

Never edit a shipped entry of :data:`MIGRATIONS`; add a new one. :func:`migrate` runs the missing
ones in one transaction under a per-schema advisory lock, so processes racing it are safe.
"""

from __future__ import annotations

from typing import Final

import asyncpg

from .._errors import newer_schema
from ._queue_sql import TAKE_FUNCTION

__all__ = ["MIGRATIONS", "SCHEMA_VERSION", "migrate"]

#: The newest schema version this code writes; a database at a higher version is refused.
SCHEMA_VERSION: Final = 9

# Versioned, additive migrations: (version, DDL with {s} = the quoted schema). Never edit a shipped
# entry; add a new one.
MIGRATIONS: Final[tuple[tuple[int, str], ...]] = (
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
    # pending() pages by a keyset range of this index, newest first.
    (3, "CREATE INDEX pending_interrupts_created_idx ON {s}.pending_interrupts (created_at, execution_id);"),
    (
        4,
        # Ownership: the owner id (and its advisory key) recorded with each owned run; no owner
        # means queued for the fleet. Rows exist only while a run is owned or queued, so finding
        # work never reads the resting runs. A pause may carry a deadline (pause expiry).
        """
CREATE TABLE {s}.run_owners (
    execution_id text PRIMARY KEY,
    owner text,
    owner_key bigint,
    since timestamptz NOT NULL
);
CREATE INDEX run_owners_owner_idx ON {s}.run_owners (owner_key);
CREATE INDEX run_owners_queued_idx ON {s}.run_owners (since) WHERE owner IS NULL;
ALTER TABLE {s}.pending_interrupts ADD COLUMN expires_at timestamptz;
CREATE INDEX pending_interrupts_expiry_idx ON {s}.pending_interrupts (expires_at)
    WHERE expires_at IS NOT NULL;
""",
    ),
    # Cache entries ride the outbox too; ``replica`` remembers that a replicator was attached
    # (prune then keeps what the plane has not accepted).
    (
        5,
        """
ALTER TABLE {s}.idempotency_cache ADD COLUMN synced boolean NOT NULL DEFAULT false;
CREATE INDEX idempotency_cache_unsynced_idx ON {s}.idempotency_cache (created_at) WHERE NOT synced;
CREATE TABLE {s}.replica (attached_at timestamptz NOT NULL);
""",
    ),
    # Flow control: a queued run's queue, key and priority ride on its run_owners row (a sweep
    # takes higher priorities first); run_queues keeps them for good (RunSummary); queues holds
    # each queue's limits in force, queue_starts the start times its rate counts; take_queued is a sweep's
    # take under those limits (stores.postgres._queue_sql).
    (
        6,
        """
ALTER TABLE {s}.run_owners ADD COLUMN queue text, ADD COLUMN key text,
    ADD COLUMN priority integer NOT NULL DEFAULT 0;
DROP INDEX IF EXISTS {s}.run_owners_queued_idx;
CREATE INDEX run_owners_waiting_idx ON {s}.run_owners (priority DESC, since) WHERE owner IS NULL;
CREATE INDEX run_owners_queue_idx ON {s}.run_owners (queue, key) WHERE queue IS NOT NULL;
CREATE TABLE {s}.queues (
    name text PRIMARY KEY,
    concurrency integer,
    per_key integer,
    rate_count integer,
    rate_window double precision,
    declared_by text,
    declared_key bigint,
    declared_at timestamptz
);
CREATE TABLE {s}.run_queues (
    execution_id text PRIMARY KEY,
    queue text NOT NULL,
    key text,
    priority integer NOT NULL,
    enqueued_at timestamptz NOT NULL
);
CREATE TABLE {s}.queue_starts (
    queue text NOT NULL,
    slot integer NOT NULL,
    at double precision NOT NULL,
    PRIMARY KEY (queue, slot)
);
CREATE INDEX queue_starts_at_idx ON {s}.queue_starts (queue, at);
"""
        + TAKE_FUNCTION,
    ),
    # A run's inbox: signals kept until a row consumes them (``consumed_seq``), found by a partial
    # index of the unconsumed ones; ``run_waits`` holds a row per resting run (a wait or a sleep: its
    # ``wait`` row's seq) with the time a sweep must wake it (now, once its signal came), so the
    # wake-up scan reads an index, not the runs.
    (
        7,
        """
CREATE TABLE IF NOT EXISTS {s}.signals (
    id bigserial PRIMARY KEY,
    execution_id text NOT NULL,
    name text NOT NULL,
    payload json NOT NULL,
    created_at timestamptz NOT NULL,
    consumed_seq bigint
);
CREATE INDEX IF NOT EXISTS signals_waiting_idx ON {s}.signals (execution_id, name, id) WHERE consumed_seq IS NULL;
CREATE TABLE IF NOT EXISTS {s}.run_waits (
    execution_id text PRIMARY KEY,
    seq bigint NOT NULL,
    name text,
    wake_at timestamptz
);
CREATE INDEX IF NOT EXISTS run_waits_due_idx ON {s}.run_waits (wake_at) WHERE wake_at IS NOT NULL;
""",
    ),
    # Schedules, shared by the fleet: each one's next tick, indexed (a worker reads the due ones).
    (
        8,
        """
CREATE TABLE IF NOT EXISTS {s}.schedules (
    name text PRIMARY KEY,
    runner text NOT NULL,
    input json NOT NULL,
    cron text,
    every double precision,
    next_at timestamptz NOT NULL,
    last_run text
);
CREATE INDEX IF NOT EXISTS schedules_next_idx ON {s}.schedules (next_at);
""",
    ),
    # Inbox entries ride the outbox: each is named by a ``signal_id`` in every store and on the
    # plane, and keeps its sync state (entries written before are sent once a replicator is
    # attached). Applies again over itself.
    (
        9,
        """
ALTER TABLE {s}.signals ADD COLUMN IF NOT EXISTS signal_id text,
    ADD COLUMN IF NOT EXISTS synced boolean NOT NULL DEFAULT false,
    ADD COLUMN IF NOT EXISTS sync_error text;
UPDATE {s}.signals SET signal_id = md5(random()::text || clock_timestamp()::text || id::text) WHERE signal_id IS NULL;
CREATE UNIQUE INDEX IF NOT EXISTS signals_signal_id_idx ON {s}.signals (signal_id);
CREATE INDEX IF NOT EXISTS signals_unsynced_idx ON {s}.signals (id) WHERE NOT synced;
""",
    ),
)


async def migrate(conn: asyncpg.pool.PoolConnectionProxy, schema: str, lock_key: int) -> None:
    """Run the missing migrations of ``schema`` in one transaction, under the advisory lock ``lock_key``."""
    quoted = f'"{schema}"'
    async with conn.transaction():
        # The lock comes first: CREATE SCHEMA IF NOT EXISTS itself races otherwise.
        await conn.execute(
            f"SELECT pg_advisory_xact_lock({lock_key}); "
            f"CREATE SCHEMA IF NOT EXISTS {quoted}; "
            f"CREATE TABLE IF NOT EXISTS {quoted}.schema_version ("
            "version integer PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())"
        )
        found = await conn.fetchval(f"SELECT coalesce(max(version), 0) FROM {quoted}.schema_version")
        if found > SCHEMA_VERSION:
            raise newer_schema(f"schema {schema!r}", found, SCHEMA_VERSION)
        for version, ddl in MIGRATIONS:
            if version > found:
                await conn.execute(ddl.replace("{s}", quoted))
                await conn.execute(f"INSERT INTO {quoted}.schema_version (version) VALUES ($1)", version)
