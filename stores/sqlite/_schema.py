"""The SQLite schema: versioned migrations in ``PRAGMA user_version``, applied under ``BEGIN IMMEDIATE``.

Never edit a shipped entry of :data:`MIGRATIONS`; add a new one.
"""

from __future__ import annotations

import itertools
import sqlite3
from collections.abc import Callable
from typing import Final

from .._errors import newer_schema, unusable
from ._rows import rechunk_rows

__all__ = ["MIGRATIONS", "SCHEMA_VERSION", "migrate"]

#: The newest schema version this code writes; a database at a higher version is refused.
SCHEMA_VERSION: Final = 10


def _chunks_onto_rows(conn: sqlite3.Connection) -> None:
    """Schema 2: each row carries the messages it added (``new_messages``); the messages table goes."""
    conn.execute("ALTER TABLE checkpoints ADD COLUMN new_messages BLOB")
    rows = conn.execute(
        "SELECT execution_id, log_id, id, message_count, new_messages FROM checkpoints "
        "WHERE log_id IS NOT NULL ORDER BY execution_id, log_id, seq"
    ).fetchall()
    for (eid, log_id), group in itertools.groupby(rows, key=lambda found: (found[0], found[1])):
        bodies = [
            bytes(body)
            for (body,) in conn.execute(
                "SELECT body FROM messages WHERE execution_id = ? AND log_id = ? ORDER BY idx", (eid, log_id)
            )
        ]
        rechunk_rows(conn, [found[2:] for found in group], bodies)
    conn.execute("DROP TABLE messages")


def _cache_outbox(conn: sqlite3.Connection) -> None:
    """Schema 6: cache entries get an outbox flag; ``replica`` remembers an attached replicator."""
    if "synced" not in {found[1] for found in conn.execute("PRAGMA table_info(idempotency_cache)")}:
        conn.execute("ALTER TABLE idempotency_cache ADD COLUMN synced INTEGER NOT NULL DEFAULT 0")
    conn.execute(
        "CREATE INDEX IF NOT EXISTS idempotency_cache_unsynced ON idempotency_cache (created_at) WHERE synced = 0"
    )
    conn.execute("CREATE TABLE IF NOT EXISTS replica (attached_at TEXT NOT NULL)")


def _inbox_outbox(conn: sqlite3.Connection) -> None:
    """Schema 10: inbox entries ride the outbox: each is named by a ``signal_id`` in every store
    and on the plane, and keeps its sync state (entries written before are sent once a replicator
    is attached). Applies again over itself (its columns are added only when missing)."""
    held = {found[1] for found in conn.execute("PRAGMA table_info(signals)")}
    for column, kind in (
        ("signal_id", "TEXT"),
        ("synced", "INTEGER NOT NULL DEFAULT 0"),
        ("sync_error", "TEXT"),
    ):
        if column not in held:
            conn.execute(f"ALTER TABLE signals ADD COLUMN {column} {kind}")
    conn.execute("UPDATE signals SET signal_id = lower(hex(randomblob(16))) WHERE signal_id IS NULL")
    conn.execute("CREATE UNIQUE INDEX IF NOT EXISTS signals_signal_id ON signals (signal_id)")
    conn.execute("CREATE INDEX IF NOT EXISTS signals_unsynced ON signals (id) WHERE synced = 0")


#: Versioned migrations: SQL statements or a function run in the migration transaction.
MIGRATIONS: Final[dict[int, tuple[str, ...] | Callable[[sqlite3.Connection], None]]] = {
    1: (
        """CREATE TABLE IF NOT EXISTS checkpoints (
            id INTEGER PRIMARY KEY,
            checkpoint_id TEXT NOT NULL UNIQUE,
            execution_id TEXT NOT NULL,
            seq INTEGER NOT NULL,
            runner TEXT NOT NULL,
            node_id TEXT NOT NULL,
            step_index INTEGER NOT NULL,
            step_type TEXT NOT NULL,
            status TEXT NOT NULL,
            state_snapshot BLOB NOT NULL,
            log_id TEXT,
            message_count INTEGER NOT NULL DEFAULT 0,
            node_input BLOB NOT NULL,
            node_output BLOB NOT NULL,
            interrupt_reason TEXT,
            interrupt_context BLOB NOT NULL,
            agent_path TEXT,
            parent_checkpoint_id TEXT,
            created_at TEXT NOT NULL,
            synced INTEGER NOT NULL DEFAULT 0,
            sync_error TEXT,
            UNIQUE (execution_id, seq)
        )""",
        "CREATE INDEX IF NOT EXISTS checkpoints_unsynced ON checkpoints (id) WHERE synced = 0",
        """CREATE TABLE IF NOT EXISTS messages (
            execution_id TEXT NOT NULL,
            log_id TEXT NOT NULL,
            idx INTEGER NOT NULL,
            body BLOB NOT NULL,
            PRIMARY KEY (execution_id, log_id, idx)
        )""",
        """CREATE TABLE IF NOT EXISTS pending_interrupts (
            execution_id TEXT PRIMARY KEY,
            reason TEXT NOT NULL,
            context BLOB NOT NULL,
            node_id TEXT NOT NULL,
            agent_path TEXT,
            created_at TEXT NOT NULL
        )""",
        """CREATE TABLE IF NOT EXISTS idempotency_cache (
            execution_id TEXT NOT NULL,
            key TEXT NOT NULL,
            value BLOB NOT NULL,
            created_at TEXT NOT NULL,
            PRIMARY KEY (execution_id, key)
        )""",
    ),
    2: _chunks_onto_rows,
    # The outbox becomes a low-water mark instead of a partial index: an append then writes one
    # B-tree fewer, and a store that never replicates pays nothing for its outbox.
    3: (
        "CREATE TABLE outbox (low INTEGER NOT NULL)",
        "INSERT INTO outbox (low) SELECT coalesce((SELECT min(id) FROM checkpoints WHERE synced = 0), "
        "(SELECT coalesce(max(id), 0) + 1 FROM checkpoints))",
        "DROP INDEX IF EXISTS checkpoints_unsynced",
    ),
    # pending() pages by a keyset range of this index, newest first.
    4: ("CREATE INDEX IF NOT EXISTS pending_created ON pending_interrupts (created_at, execution_id)",),
    # Ownership: the owner id recorded with each owned run (no owner: queued for the fleet); rows
    # exist only while a run is owned or queued. A pause may carry a deadline (pause expiry).
    5: (
        """CREATE TABLE run_owners (
            execution_id TEXT PRIMARY KEY,
            owner TEXT,
            since TEXT NOT NULL
        )""",
        "CREATE INDEX run_owners_owner ON run_owners (owner)",
        "CREATE INDEX run_owners_queued ON run_owners (since) WHERE owner IS NULL",
        "ALTER TABLE pending_interrupts ADD COLUMN expires_at TEXT",
        "CREATE INDEX pending_interrupts_expiry ON pending_interrupts (expires_at) WHERE expires_at IS NOT NULL",
    ),
    # Cache entries ride the outbox too; ``replica`` remembers that a replicator was attached
    # (prune then keeps what the plane has not accepted).
    6: _cache_outbox,
    # Flow control: a queued run's queue, key and priority ride on its run_owners row (a sweep
    # takes higher priorities first); run_queues keeps them for good (RunSummary); queues holds
    # each queue's limits in force, queue_starts the start times its rate counts (stores._queues).
    7: (
        "ALTER TABLE run_owners ADD COLUMN queue TEXT",
        "ALTER TABLE run_owners ADD COLUMN key TEXT",
        "ALTER TABLE run_owners ADD COLUMN priority INTEGER NOT NULL DEFAULT 0",
        "DROP INDEX IF EXISTS run_owners_queued",
        "CREATE INDEX run_owners_waiting ON run_owners (priority DESC, since) WHERE owner IS NULL",
        "CREATE INDEX run_owners_queue ON run_owners (queue, key) WHERE queue IS NOT NULL",
        "CREATE TABLE queues (name TEXT PRIMARY KEY, concurrency INTEGER, per_key INTEGER, "
        "rate_count INTEGER, rate_window REAL, declared_by TEXT, declared_at TEXT)",
        "CREATE TABLE queue_starts (queue TEXT NOT NULL, slot INTEGER NOT NULL, at REAL NOT NULL, "
        "PRIMARY KEY (queue, slot)) WITHOUT ROWID",
        "CREATE INDEX queue_starts_at ON queue_starts (queue, at)",
        "CREATE TABLE run_queues (execution_id TEXT PRIMARY KEY, queue TEXT NOT NULL, key TEXT, "
        "priority INTEGER NOT NULL, enqueued_at TEXT NOT NULL)",
    ),
    # A run's inbox: signals kept until a row consumes them (``consumed_seq``), found by a partial
    # index of the unconsumed ones; ``run_waits`` holds a row per resting run (a wait or a sleep: its
    # ``wait`` row's seq) with the time a sweep must wake it (now, once its signal came), so the
    # wake-up scan reads an index, not the runs.
    8: (
        "CREATE TABLE IF NOT EXISTS signals (id INTEGER PRIMARY KEY, execution_id TEXT NOT NULL, "
        "name TEXT NOT NULL, payload BLOB NOT NULL, created_at TEXT NOT NULL, consumed_seq INTEGER)",
        "CREATE INDEX IF NOT EXISTS signals_open ON signals (execution_id, name, id) WHERE consumed_seq IS NULL",
        "CREATE TABLE IF NOT EXISTS run_waits (execution_id TEXT PRIMARY KEY, seq INTEGER NOT NULL, "
        "name TEXT, wake_at TEXT)",
        "CREATE INDEX IF NOT EXISTS run_waits_due ON run_waits (wake_at) WHERE wake_at IS NOT NULL",
    ),
    # Schedules, shared by the fleet: few rows, read whole (the schema's first page stays small).
    9: (
        "CREATE TABLE IF NOT EXISTS schedules (name TEXT PRIMARY KEY, runner TEXT NOT NULL, "
        "input BLOB NOT NULL, cron TEXT, every REAL, next_at TEXT NOT NULL, last_run TEXT)",
    ),
    # Inbox entries ride the outbox (see _inbox_outbox).
    10: _inbox_outbox,
}


def migrate(
    conn: sqlite3.Connection,
    path: str,
    begin: Callable[[sqlite3.Connection], None],
    commit: Callable[[sqlite3.Connection], None],
) -> None:
    """Apply missing migrations in one write transaction, re-reading the version inside it
    (runs on the writer thread; safe when processes race)."""
    try:
        if conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION:
            return
        begin(conn)
        try:
            version = int(conn.execute("PRAGMA user_version").fetchone()[0])
            if version > SCHEMA_VERSION:
                raise newer_schema(repr(path), version, SCHEMA_VERSION)
            for target in sorted(v for v in MIGRATIONS if v > version):
                migration = MIGRATIONS[target]
                if callable(migration):
                    migration(conn)
                    continue
                for statement in migration:
                    conn.execute(statement)
            if version < SCHEMA_VERSION:
                conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
            commit(conn)
        except BaseException:
            conn.rollback()
            raise
    except sqlite3.DatabaseError as exc:
        raise unusable(f"the SQLite database {path!r}", exc) from exc
