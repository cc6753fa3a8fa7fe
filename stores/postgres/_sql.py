"""The statements of the PostgreSQL store, with ``{s}`` for the quoted schema (:func:`statements`).

Every write is ONE statement: it inserts the row (with the messages it adds, see ``stores._codec``)
and, as a data-modifying CTE where needed, inserts the pending row (pause) or deletes it (claim,
``run_end``). The log guard (``_GUARD``) is the database half of the re-plan loop of
:class:`stores._base.BaseStore`: a row whose planned message log is not the stored one inserts
nothing, and the store plans it again.
"""

from __future__ import annotations

import hashlib
from typing import Final

from .._model import BOOKKEEPING_STEPS, LLM_CALL, RUN_END
from .._signals import MESSAGE
from .._watch import WAITS

__all__ = ["BATCH_COLUMNS", "COLUMN_COUNT", "HELD_KEYS", "SIGNAL_COLUMNS", "notice_channel", "statements"]

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
# A model turn's row is refused while steering messages wait in the run's inbox (one probe of its
# partial index); the writer then consumes them with "append_consume" (see ``stores._signals``).
_STEER: Final = (
    f"($7::text <> '{LLM_CALL}' OR NOT EXISTS (SELECT 1 FROM {{s}}.signals w "
    f"WHERE w.execution_id = $2 AND w.name = '{MESSAGE}' AND w.consumed_seq IS NULL))"
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
_PENDING_COLS: Final = "execution_id, reason, context, node_id, agent_path, created_at, expires_at"
#: The columns of an inbox entry, in the order ``stores.postgres._inbox.entry_of`` reads them.
SIGNAL_COLUMNS: Final = "id, execution_id, name, payload, created_at, consumed_seq, signal_id"
# A row or cache entry prune may delete: sent, or the store was never attached to a replicator.
_SENT: Final = "(synced OR NOT EXISTS (SELECT 1 FROM {s}.replica))"
# Every write tells listeners of the schema's channel ``{n}`` which run got a row (delivered at
# commit; the payload is the id, cut to fit NOTIFY's limit). See ``stores.postgres._notices``.
_NOTICE: Final = "pg_notify('{n}', left(r.execution_id, 1000))"
# A write that makes a resting run due (a signal it waits for; a wait whose signal is there already)
# tells the store's watches on waits, under the payload no run id has (``stores._watch.WAITS``).
_WAKE: Final = f"pg_notify('{{n}}', '{WAITS}')"
#: The advisory keys held now, as ``pg_locks`` shows a 64-bit key (classid the high half, objid the low).
HELD_KEYS: Final = (
    "SELECT (l.classid::bigint << 32) | l.objid::bigint FROM pg_locks l "
    "WHERE l.locktype = 'advisory' AND l.objsubid = 1 AND l.granted "
    "AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())"
)
#: A take's conflict clause: the run's ``run_owners`` row (``o``) names the new owner unless a live
#: owner other than it is recorded (the same check as ``stores.postgres._locks``' ``take``).
_TAKE_SET: Final = f"""ON CONFLICT (execution_id) DO UPDATE
        SET owner = excluded.owner, owner_key = excluded.owner_key, since = excluded.since
        WHERE o.owner IS NULL OR o.owner = excluded.owner OR o.owner_key NOT IN ({HELD_KEYS})"""

_SQL: Final[dict[str, str]] = {
    "append": f"""
WITH r AS (
    INSERT INTO {{s}}.checkpoints ({_COLS}, new_messages) SELECT {_VALUES}
    WHERE ($3::bigint <> 0 OR NOT EXISTS (SELECT 1 FROM {{s}}.checkpoints e WHERE e.execution_id = $2))
      AND {_GUARD} AND {_STEER}
    RETURNING execution_id, step_type
),
p AS (DELETE FROM {{s}}.pending_interrupts WHERE execution_id IN
      (SELECT execution_id FROM r WHERE step_type = '{RUN_END}'))
SELECT count(*) FROM (SELECT {_NOTICE} FROM r) n""",
    # "append" for a row written in another store (the plane's side): no steering guard; nothing
    # of what the row did to its own store's inbox is done again (see ``append_copy``).
    "append_copy": f"""
WITH r AS (
    INSERT INTO {{s}}.checkpoints ({_COLS}, new_messages) SELECT {_VALUES}
    WHERE ($3::bigint <> 0 OR NOT EXISTS (SELECT 1 FROM {{s}}.checkpoints e WHERE e.execution_id = $2))
      AND {_GUARD}
    RETURNING execution_id, step_type
),
p AS (DELETE FROM {{s}}.pending_interrupts WHERE execution_id IN
      (SELECT execution_id FROM r WHERE step_type = '{RUN_END}'))
SELECT count(*) FROM (SELECT {_NOTICE} FROM r) n""",
    # "append" for the common row (seq > 0, not run_end): a plain insert, without the seq-0 guard
    # (always true there) and the pending-row DELETE (deletes nothing there); same outcomes.
    "append_step": f"""
WITH r AS (
    INSERT INTO {{s}}.checkpoints ({_COLS}, new_messages) SELECT {_VALUES}
    WHERE {_GUARD} AND {_STEER}
    RETURNING execution_id
)
SELECT true FROM (SELECT {_NOTICE} FROM r) n""",
    # "append" carrying the run's ownership ($22: the owner taking it with this row, $23 its key;
    # $24: the owner whose run_owners row goes with this resting row; NULL: neither, never both).
    # The take is written only with the row (both under the row's own conditions) and gates it;
    # ``took`` is false when a live other owner holds the run (the refusal that comes first).
    "append_own": f"""
WITH f AS (
    SELECT ($3::bigint <> 0 OR NOT EXISTS (SELECT 1 FROM {{s}}.checkpoints e WHERE e.execution_id = $2))
           AND {_GUARD} AND {_STEER} AS fits
), t AS (
    INSERT INTO {{s}}.run_owners AS o (execution_id, owner, owner_key, since)
    SELECT $2, $22::text, $23::bigint, now() FROM f WHERE $22::text IS NOT NULL AND f.fits
    {_TAKE_SET}
    RETURNING true
), r AS (
    INSERT INTO {{s}}.checkpoints ({_COLS}, new_messages) SELECT {_VALUES}
    FROM f WHERE f.fits AND ($22::text IS NULL OR EXISTS (SELECT 1 FROM t))
    RETURNING execution_id, step_type
), p AS (DELETE FROM {{s}}.pending_interrupts WHERE execution_id IN
      (SELECT execution_id FROM r WHERE step_type = '{RUN_END}')
), x AS (DELETE FROM {{s}}.run_owners WHERE $24::text IS NOT NULL AND execution_id = $2
      AND owner = $24::text AND EXISTS (SELECT 1 FROM r))
SELECT (SELECT count(*) FROM (SELECT {_NOTICE} FROM r) n) AS written,
       ($22::text IS NULL OR EXISTS (SELECT 1 FROM t)
        OR NOT (SELECT fits FROM f) AND NOT EXISTS (
            SELECT 1 FROM {{s}}.run_owners o WHERE o.execution_id = $2 AND o.owner IS NOT NULL
            AND o.owner <> $22::text AND o.owner_key IN ({HELD_KEYS}))) AS took""",
    "pause": f"""
WITH r AS (
    INSERT INTO {{s}}.checkpoints ({_COLS}, new_messages) SELECT {_VALUES}
    WHERE ($3::bigint <> 0 OR NOT EXISTS (SELECT 1 FROM {{s}}.checkpoints e WHERE e.execution_id = $2))
      AND {_GUARD}
    RETURNING execution_id
),
q AS (INSERT INTO {{s}}.pending_interrupts ({_PENDING_COLS})
      SELECT r.execution_id, $22, $23, $24, $25, $26, $27 FROM r),
-- The pause rests the run: $28 (NULL: none) is the owner whose run_owners row goes with it.
x AS (DELETE FROM {{s}}.run_owners WHERE $28::text IS NOT NULL AND execution_id = $2
      AND owner = $28::text AND EXISTS (SELECT 1 FROM r))
SELECT count(*) FROM (SELECT {_NOTICE} FROM r) n""",
    "claim": f"""
WITH d AS (
    DELETE FROM {{s}}.pending_interrupts WHERE execution_id = $2 AND {_GUARD}
    RETURNING {_PENDING_COLS}
), r AS (
    INSERT INTO {{s}}.checkpoints ({_COLS}, new_messages) SELECT {_VALUES} FROM d
    RETURNING execution_id
)
SELECT d.execution_id, d.reason, d.context, d.node_id, d.agent_path, d.created_at, d.expires_at,
       EXISTS (SELECT 1 FROM {{s}}.pending_interrupts x WHERE x.execution_id = $2) AS was_pending,
       EXISTS (SELECT 1 FROM {{s}}.checkpoints x WHERE x.execution_id = $2) AS known,
       (SELECT count(*) FROM (SELECT {_NOTICE} FROM r) n) AS noticed
FROM (SELECT 1) AS one LEFT JOIN d ON true""",
    # A row that consumes signals ($22: their inbox ids, all unconsumed, or nothing is written), or
    # a wait's signal/wake row, which also ends the run's recorded wait.
    "append_consume": f"""
WITH f AS (
    SELECT {_GUARD} AND (SELECT count(*) FROM {{s}}.signals w WHERE w.execution_id = $2
        AND w.id = ANY($22::bigint[]) AND w.consumed_seq IS NULL) = cardinality($22::bigint[]) AS fits
), u AS (
    UPDATE {{s}}.signals SET consumed_seq = $3, synced = false WHERE execution_id = $2
        AND id = ANY($22::bigint[]) AND consumed_seq IS NULL AND (SELECT fits FROM f)
), k AS (
    DELETE FROM {{s}}.run_waits WHERE execution_id = $2 AND seq < $3 AND $7::text <> '{LLM_CALL}'
        AND (SELECT fits FROM f)
), r AS (
    INSERT INTO {{s}}.checkpoints ({_COLS}, new_messages) SELECT {_VALUES} FROM f WHERE f.fits
    RETURNING execution_id
)
SELECT count(*) FROM (SELECT {_NOTICE} FROM r) n""",
    "signal": f"""
WITH h AS (
    SELECT step_type, status FROM {{s}}.checkpoints WHERE execution_id = $1 ORDER BY seq DESC LIMIT 1
), i AS (
    INSERT INTO {{s}}.signals (execution_id, name, payload, created_at, signal_id)
    SELECT $1, $2, $3, $4, $5 FROM h WHERE NOT (h.step_type = '{RUN_END}' AND h.status = 'completed')
    RETURNING id
), k AS (
    UPDATE {{s}}.run_waits SET wake_at = $4 WHERE execution_id = $1 AND name = $2
        AND (wake_at IS NULL OR wake_at > $4) AND EXISTS (SELECT 1 FROM i)
    RETURNING 1
)
SELECT h.step_type, h.status, (SELECT id FROM i) AS id,
       (SELECT count(*) FROM (SELECT pg_notify('{{n}}', left($1, 1000)) FROM i) n) AS noticed,
       (SELECT count(*) FROM (SELECT {_WAKE} FROM k) w) AS woken
FROM (SELECT 1) AS one LEFT JOIN h ON true""",
    # A run's unconsumed signals, oldest first ($2: of that name only; NULL: all).
    "signals_open": f"SELECT {SIGNAL_COLUMNS} FROM {{s}}.signals "
    "WHERE execution_id = $1 AND consumed_seq IS NULL AND ($2::text IS NULL OR name = $2) ORDER BY id",
    # The signals the row at seq $3 consumed ($2 as above).
    "signals_by": f"SELECT {SIGNAL_COLUMNS} FROM {{s}}.signals "
    "WHERE execution_id = $1 AND consumed_seq = $3 AND ($2::text IS NULL OR name = $2) ORDER BY id",
    # The inbox entries' outbox: unsynced entries by a partial index; a mark is a compare-and-set
    # on the state sent ($2: its consumed_seq), so a consumption committed meanwhile stays to send.
    "unsynced_signals": f"SELECT {SIGNAL_COLUMNS} FROM {{s}}.signals WHERE NOT synced ORDER BY id LIMIT $1",
    "mark_signals": "UPDATE {s}.signals g SET synced = true, sync_error = u.reason "
    "FROM unnest($1::text[], $2::bigint[], $3::text[]) AS u(i, c, reason) "
    "WHERE g.signal_id = u.i AND g.consumed_seq IS NOT DISTINCT FROM u.c",
    "signal_sync_state": "SELECT synced, sync_error FROM {s}.signals WHERE signal_id = $1",
    "signal_entries": f"SELECT {SIGNAL_COLUMNS} FROM {{s}}.signals WHERE execution_id = $1 ORDER BY id",
    # Copies of entries held elsewhere (the plane's side): the held ones, locked for the merge.
    "held_signals": f"SELECT {SIGNAL_COLUMNS} FROM {{s}}.signals WHERE signal_id = ANY($1::text[]) FOR UPDATE",
    "copy_signals": "INSERT INTO {s}.signals (execution_id, name, payload, created_at, consumed_seq, signal_id) "
    "SELECT e, n, p, t, c, i FROM unnest($1::text[], $2::text[], $3::json[], $4::timestamptz[], "
    "$5::bigint[], $6::text[]) WITH ORDINALITY AS u(e, n, p, t, c, i, o) ORDER BY o "
    "ON CONFLICT (signal_id) DO NOTHING",
    "consume_copies": "UPDATE {s}.signals g SET consumed_seq = u.c, synced = false "
    "FROM unnest($1::text[], $2::bigint[]) AS u(i, c) WHERE g.signal_id = u.i AND g.consumed_seq IS NULL",
    # A restored run's unconsumed signals (as synced, in order) and the wait it rests at.
    "import_signals": "INSERT INTO {s}.signals (execution_id, name, payload, created_at, signal_id, synced) "
    "SELECT $1, n, p, t, i, true FROM unnest($2::text[], $3::json[], $4::timestamptz[], $5::text[]) "
    "WITH ORDINALITY AS u(n, p, t, i, o) ORDER BY o ON CONFLICT (signal_id) DO NOTHING",
    "import_wait": "INSERT INTO {s}.run_waits (execution_id, seq, name, wake_at) VALUES ($1, $2, $3, $4) "
    "ON CONFLICT (execution_id) DO UPDATE SET seq = excluded.seq, name = excluded.name, wake_at = excluded.wake_at",
    # A tool rests: its wait row, the run's run_waits row ($22 the signal's name, NULL for a sleep;
    # $23 its deadline, or now, $25, when its signal is there already) and, with $24, the owner
    # whose run_owners row goes with it (the run rests).
    "wait": f"""
WITH r AS (
    INSERT INTO {{s}}.checkpoints ({_COLS}, new_messages) SELECT {_VALUES}
    WHERE {_GUARD}
    RETURNING execution_id
), q AS (
    INSERT INTO {{s}}.run_waits (execution_id, seq, name, wake_at)
    SELECT r.execution_id, $3, $22::text,
           CASE WHEN $22::text IS NOT NULL AND EXISTS (SELECT 1 FROM {{s}}.signals w
                WHERE w.execution_id = $2 AND w.name = $22::text AND w.consumed_seq IS NULL)
                THEN $25::timestamptz ELSE $23::timestamptz END
    FROM r
    ON CONFLICT (execution_id) DO UPDATE
        SET seq = excluded.seq, name = excluded.name, wake_at = excluded.wake_at
    RETURNING wake_at = $25::timestamptz AS due
), x AS (DELETE FROM {{s}}.run_owners WHERE $24::text IS NOT NULL AND execution_id = $2
      AND owner = $24::text AND EXISTS (SELECT 1 FROM r))
SELECT (SELECT count(*) FROM (SELECT {_NOTICE} FROM r) n) AS written,
       (SELECT count(*) FROM (SELECT {_WAKE} FROM q WHERE q.due) w) AS woken""",
    "due_waits": "SELECT execution_id, seq FROM {s}.run_waits WHERE wake_at <= $1 ORDER BY wake_at LIMIT $2",
    "next_wake": "SELECT min(wake_at) FROM {s}.run_waits WHERE wake_at IS NOT NULL",
    "next_wake_after": "SELECT min(wake_at) FROM {s}.run_waits WHERE wake_at > $1",
    "settle_wait": "DELETE FROM {s}.run_waits WHERE execution_id = $1 AND seq = $2",
    "signals_waiting": f"SELECT EXISTS (SELECT 1 FROM {{s}}.signals WHERE execution_id = $1 "
    f"AND name = '{MESSAGE}' AND consumed_seq IS NULL)",
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
        $20::integer[], $21::integer[], $22::text[], $23::bigint[], $24::text[])
        WITH ORDINALITY AS v({_COLS}, new_messages, lo, hi, taker, taker_key, releaser, ord)
), c AS (
    -- The rows that fit (the checks of "append"); LATERAL ... LIMIT 1: index probes per row,
    -- never a hashed scan of a whole table.
    SELECT v.* FROM v
    LEFT JOIN LATERAL (SELECT true AS found FROM {{s}}.checkpoints e
                       WHERE e.execution_id = v.execution_id LIMIT 1) AS run ON true
    LEFT JOIN LATERAL (SELECT g.message_count AS length FROM {{s}}.checkpoints g
                       WHERE g.execution_id = v.execution_id AND g.log_id = v.log_id
                         AND g.new_messages IS NOT NULL ORDER BY g.seq DESC LIMIT 1) AS log ON true
    WHERE (v.seq <> 0 OR run.found IS NULL)
      AND (v.hi = 0 OR coalesce(log.length, 0) BETWEEN v.lo AND v.hi)
      AND (v.step_type <> '{LLM_CALL}' OR NOT EXISTS (SELECT 1 FROM {{s}}.signals w
           WHERE w.execution_id = v.execution_id AND w.name = '{MESSAGE}' AND w.consumed_seq IS NULL))
), t AS (
    INSERT INTO {{s}}.run_owners AS o (execution_id, owner, owner_key, since)
    SELECT c.execution_id, c.taker, c.taker_key, now() FROM c WHERE c.taker IS NOT NULL
    {_TAKE_SET}
    RETURNING execution_id
), r AS (
    INSERT INTO {{s}}.checkpoints ({_COLS}, new_messages)
    SELECT {", ".join(f"c.{c.strip()}" for c in _COLS.split(","))}, c.new_messages
    FROM c WHERE c.taker IS NULL OR c.execution_id IN (SELECT execution_id FROM t)
    ORDER BY c.ord
    ON CONFLICT DO NOTHING
    RETURNING checkpoint_id, execution_id, step_type
), p AS (DELETE FROM {{s}}.pending_interrupts WHERE execution_id IN
      (SELECT execution_id FROM r WHERE step_type = '{RUN_END}')
), x AS (DELETE FROM {{s}}.run_owners o USING v, r
      WHERE v.releaser IS NOT NULL AND r.checkpoint_id = v.checkpoint_id
        AND o.execution_id = v.execution_id AND o.owner = v.releaser)
SELECT checkpoint_id FROM (SELECT r.checkpoint_id, {_NOTICE} FROM r) n""",
    "newest": f"SELECT {_C_COLS}, {_FULL_LOG} FROM {{s}}.checkpoints c "
    "WHERE c.execution_id = $1 ORDER BY c.seq DESC LIMIT 1",
    "row_at": f"SELECT {_C_COLS}, {_FULL_LOG} FROM {{s}}.checkpoints c "
    "WHERE c.execution_id = $1 AND c.seq = $2",
    "row_before": f"SELECT {_C_COLS}, {_FULL_LOG} FROM {{s}}.checkpoints c "
    "WHERE c.execution_id = $1 AND c.seq < $2 ORDER BY c.seq DESC LIMIT 1",
    "get": f"SELECT {_C_COLS}, {_FULL_LOG} FROM {{s}}.checkpoints c "
    "WHERE c.execution_id = $1 AND c.checkpoint_id = $2",
    # A page of the run's rows from seq $2 on ($3 at most; NULL: all); each log rides once.
    "history": f"SELECT {_C_COLS}, {_LOG_ONCE} FROM (SELECT * FROM {{s}}.checkpoints "
    "WHERE execution_id = $1 AND seq >= $2 ORDER BY seq LIMIT $3) c ORDER BY c.seq",
    "unsynced": f"SELECT {_C_COLS}, {_LOG_ONCE} FROM "
    "(SELECT * FROM {s}.checkpoints WHERE NOT synced ORDER BY id LIMIT $1) c ORDER BY c.id",
    # pending(): a keyset range of pending_interrupts_created_idx, newest first; LIMIT NULL is no limit.
    "pending_page": f"SELECT {_PENDING_COLS} FROM {{s}}.pending_interrupts "
    "ORDER BY created_at DESC, execution_id DESC LIMIT $1",
    "pending_after": f"SELECT {_PENDING_COLS} FROM {{s}}.pending_interrupts "
    "WHERE (created_at, execution_id) < ($2, $3) ORDER BY created_at DESC, execution_id DESC LIMIT $1",
    "pending_one": f"SELECT {_PENDING_COLS} FROM {{s}}.pending_interrupts WHERE execution_id = $1 "
    "AND ($2::timestamptz IS NULL OR (created_at, execution_id) < ($2, $3::text))",
    "delete_run": """
WITH c AS (DELETE FROM {s}.checkpoints WHERE execution_id = $1 RETURNING 1),
p AS (DELETE FROM {s}.pending_interrupts WHERE execution_id = $1),
k AS (DELETE FROM {s}.idempotency_cache WHERE execution_id = $1),
q AS (DELETE FROM {s}.run_queues WHERE execution_id = $1),
g AS (DELETE FROM {s}.signals WHERE execution_id = $1),
w AS (DELETE FROM {s}.run_waits WHERE execution_id = $1)
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
    "cache_intend": """
WITH found AS (SELECT value FROM {s}.idempotency_cache WHERE execution_id = $1 AND key = $2),
ins AS (
    INSERT INTO {s}.idempotency_cache (execution_id, key, value, created_at)
    SELECT $1, $3, $4, $5 WHERE NOT EXISTS (SELECT 1 FROM found)
    ON CONFLICT DO NOTHING RETURNING 1
)
SELECT (SELECT value FROM found) AS value, EXISTS (SELECT 1 FROM ins) AS recorded""",
    "mark_synced": "UPDATE {s}.checkpoints SET synced = true "
    "WHERE checkpoint_id = ANY($1::text[]) AND NOT synced",
    "mark_quarantined": "UPDATE {s}.checkpoints c SET synced = true, sync_error = u.reason "
    "FROM unnest($1::text[], $2::text[]) AS u(id, reason) WHERE c.checkpoint_id = u.id",
    "sync_state": "SELECT synced, sync_error FROM {s}.checkpoints WHERE checkpoint_id = $1",
    "cache_entries": "SELECT key, value, created_at FROM {s}.idempotency_cache WHERE execution_id = $1 "
    "ORDER BY created_at, key",
    "run_known": "SELECT 1 FROM {s}.checkpoints WHERE execution_id = $1 LIMIT 1",
    "import_cache": "INSERT INTO {s}.idempotency_cache (execution_id, key, value, created_at, synced) "
    "SELECT $1, k, v, t, true FROM unnest($2::text[], $3::json[], $4::timestamptz[]) AS u(k, v, t) "
    "ON CONFLICT DO NOTHING",
    "import_pending": f"INSERT INTO {{s}}.pending_interrupts ({_PENDING_COLS}) VALUES ($1, $2, $3, $4, $5, $6, $7)",
    "existing_ids": "SELECT checkpoint_id FROM {s}.checkpoints WHERE checkpoint_id = ANY($1::text[])",
    # prune: the skeleton (stores._prune.PruneRow) of every run that has something older than $1.
    "prune_skeleton": f"""
SELECT execution_id, seq, step_type, status, (created_at < $1 AND {_SENT}) AS old,
       CASE WHEN step_type IN ({", ".join(f"'{s}'" for s in sorted(BOOKKEEPING_STEPS))})
            THEN node_input END AS node_input, agent_path
FROM {{s}}.checkpoints
WHERE execution_id IN (SELECT execution_id FROM {{s}}.checkpoints WHERE created_at < $1
                       UNION SELECT execution_id FROM {{s}}.idempotency_cache WHERE created_at < $1)
ORDER BY execution_id, seq""",
    "prune_done_cache": "DELETE FROM {s}.idempotency_cache WHERE execution_id = ANY($1::text[]) "
    f"AND created_at < $2 AND {_SENT}",
    "unsynced_stored": f"SELECT {_COLS}, new_messages FROM {{s}}.checkpoints WHERE NOT synced ORDER BY id LIMIT $1",
    "unsynced_cache": "SELECT execution_id, key, value, created_at FROM {s}.idempotency_cache "
    "WHERE NOT synced ORDER BY created_at, execution_id, key LIMIT $1",
    "mark_cache_synced": "UPDATE {s}.idempotency_cache c SET synced = true "
    "FROM unnest($1::text[], $2::text[]) AS u(e, k) WHERE c.execution_id = u.e AND c.key = u.k",
    "attach_replica": "INSERT INTO {s}.replica (attached_at) SELECT now() "
    "WHERE NOT EXISTS (SELECT 1 FROM {s}.replica)",
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

#: Arguments of a single-row write: the 18 columns, the chunk and the two log-guard bounds.
COLUMN_COUNT: Final = 21
#: Arrays of the ``batch`` statement: a single write's arguments and its ownership (see ``append_own``).
BATCH_COLUMNS: Final = COLUMN_COUNT + 3


def notice_channel(schema: str) -> str:
    """The NOTIFY channel of ``schema``'s rows: one per schema (a digest keeps it an identifier)."""
    return "tether_rows_" + hashlib.blake2b(schema.encode(), digest_size=8).hexdigest()


def statements(schema: str) -> dict[str, str]:
    """Every statement with ``{s}`` replaced by the quoted ``schema`` (validated by the caller) and
    ``{n}`` by its notice channel."""
    quoted, channel = f'"{schema}"', notice_channel(schema)
    return {name: sql.replace("{s}", quoted).replace("{n}", channel) for name, sql in _SQL.items()}
