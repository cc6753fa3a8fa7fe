"""Flow control on PostgreSQL (the rules are ``stores._queues``): the statements, with ``{s}`` for the
quoted schema, and the store's take function (created by migration 6 of ``stores.postgres._schema``).

A sweep's take is ONE statement, ``SELECT * FROM {s}.take_queued(...)``, limited queue or not. The
function is ``VOLATILE`` plpgsql, so under READ COMMITTED each statement in it reads a fresh
snapshot: it locks the queue's row (``FOR UPDATE``, held until the take commits), and only then
counts the queue's runs whose owner's liveness lock is held (``pg_locks``) and reads the queue's
recorded starts, so two takes of one queue never both see a free slot. A dead worker's runs stop
counting the moment its lock connection goes: no lease.
"""

from __future__ import annotations

from typing import Final

from ._sql import HELD_KEYS

__all__ = ["QUEUE_SQL", "TAKE_FUNCTION"]

#: The take function (``{s}``: the quoted schema): the run taken for ``taker`` unless a live other
#: owner holds it or its queue's limits refuse it (``refused``: ``queue``, ``key`` or ``rate``, with
#: ``retry_in`` seconds until the rate admits a start); a start is recorded with the take.
TAKE_FUNCTION: Final = f"""
CREATE OR REPLACE FUNCTION {{s}}.take_queued(eid text, taker text, taker_key bigint,
    OUT took boolean, OUT refused text, OUT retry_in double precision, OUT of_queue text,
    OUT of_key text)
LANGUAGE plpgsql VOLATILE AS $take$
DECLARE
    v_queue text;
    v_key text;
    v_limit_all integer;
    v_limit_key integer;
    v_rate_count integer;
    v_rate_window double precision;
    v_held bigint[];
    v_live integer;
    v_keyed integer;
    v_now double precision;
    v_nth double precision;
    v_recorded integer;
    v_slot integer;
BEGIN
    took := false;
    SELECT o.queue, o.key INTO v_queue, v_key FROM {{s}}.run_owners o WHERE o.execution_id = eid;
    of_queue := v_queue;
    of_key := v_key;
    IF v_queue IS NOT NULL THEN
        -- Held until the take commits: every take of the queue waits here, and what follows reads
        -- what the takes before this one committed (a fresh snapshot per statement).
        SELECT q.concurrency, q.per_key, q.rate_count, q.rate_window
        INTO v_limit_all, v_limit_key, v_rate_count, v_rate_window
        FROM {{s}}.queues q WHERE q.name = v_queue FOR UPDATE;
        IF v_limit_all IS NOT NULL OR (v_limit_key IS NOT NULL AND v_key IS NOT NULL) THEN
            v_held := ARRAY({HELD_KEYS});
            SELECT count(*), count(*) FILTER (WHERE o.key = v_key) INTO v_live, v_keyed
            FROM {{s}}.run_owners o
            WHERE o.queue = v_queue AND o.execution_id <> eid AND o.owner_key = ANY(v_held);
            IF v_limit_all IS NOT NULL AND v_live >= v_limit_all THEN
                refused := 'queue';
                RETURN;
            END IF;
            IF v_limit_key IS NOT NULL AND v_key IS NOT NULL AND v_keyed >= v_limit_key THEN
                refused := 'key';
                RETURN;
            END IF;
        END IF;
        IF v_rate_count IS NOT NULL THEN
            v_now := extract(epoch FROM clock_timestamp());
            SELECT s.at INTO v_nth FROM {{s}}.queue_starts s WHERE s.queue = v_queue
            ORDER BY s.at DESC OFFSET v_rate_count - 1 LIMIT 1;
            IF v_nth IS NOT NULL AND v_now - v_nth < v_rate_window THEN
                refused := 'rate';
                retry_in := v_nth + v_rate_window - v_now;
                RETURN;
            END IF;
        END IF;
    END IF;
    IF v_held IS NULL THEN
        v_held := ARRAY({HELD_KEYS});
    END IF;
    INSERT INTO {{s}}.run_owners AS o (execution_id, owner, owner_key, since)
    VALUES (eid, taker, taker_key, now())
    ON CONFLICT (execution_id) DO UPDATE
        SET owner = excluded.owner, owner_key = excluded.owner_key, since = excluded.since
        WHERE o.owner IS NULL OR o.owner = excluded.owner OR NOT o.owner_key = ANY(v_held)
    RETURNING true INTO took;
    took := coalesce(took, false);
    IF took AND v_rate_count IS NOT NULL THEN
        -- One of rate_count slots per queue: the next, else the oldest start's.
        SELECT count(*), coalesce(max(s.slot) + 1, 0) INTO v_recorded, v_slot
        FROM {{s}}.queue_starts s WHERE s.queue = v_queue;
        IF v_recorded >= v_rate_count THEN
            SELECT s.slot INTO v_slot FROM {{s}}.queue_starts s WHERE s.queue = v_queue ORDER BY s.at LIMIT 1;
        END IF;
        INSERT INTO {{s}}.queue_starts AS s (queue, slot, at) VALUES (v_queue, v_slot, v_now)
        ON CONFLICT (queue, slot) DO UPDATE SET at = excluded.at;
    END IF;
END
$take$;
"""

#: The statements of flow control, with ``{s}`` for the quoted schema.
QUEUE_SQL: Final[dict[str, str]] = {
    "take_queued": "SELECT took, refused, retry_in, of_queue, of_key FROM {s}.take_queued($1, $2, $3)",
    # Record the run's queue for good and hand it to the fleet in it; the workers are told ($6).
    "hand_off": """
WITH k AS (
    INSERT INTO {s}.run_queues (execution_id, queue, key, priority, enqueued_at)
    VALUES ($1, $3, $4, $5, now())
    ON CONFLICT (execution_id) DO UPDATE
        SET queue = excluded.queue, key = excluded.key, priority = excluded.priority
), q AS (
    UPDATE {s}.run_owners SET owner = NULL, owner_key = NULL, since = now(), queue = $3, key = $4,
        priority = $5
    WHERE execution_id = $1 AND owner = $2 RETURNING execution_id
)
SELECT pg_notify($6, q.execution_id) FROM q""",
    "declare_lock": "INSERT INTO {s}.queues (name) VALUES ($1) ON CONFLICT (name) DO NOTHING",
    "declared": f"""
SELECT concurrency, per_key, rate_count, rate_window,
       declared_by IS NOT NULL AND declared_by <> $2 AND declared_key IN ({HELD_KEYS}) AS other_live
FROM {{s}}.queues WHERE name = $1 FOR UPDATE""",
    "trim_starts": "DELETE FROM {s}.queue_starts WHERE queue = $1 AND slot NOT IN "
    "(SELECT slot FROM {s}.queue_starts WHERE queue = $1 ORDER BY at DESC LIMIT $2)",
    "declare": """
UPDATE {s}.queues SET concurrency = $2, per_key = $3, rate_count = $4, rate_window = $5,
    declared_by = $6, declared_key = $7, declared_at = now()
WHERE name = $1""",
    # Runs whose owner's lock is free (recovery first), then queued runs, higher priority first,
    # then oldest, but for those of the queues $2 and the (queue, key) pairs $3/$4 (full ones);
    # the owners are few (one per process), the runs found through the owner index.
    "work": f"""
WITH dead AS (
    SELECT DISTINCT owner_key FROM {{s}}.run_owners WHERE owner_key IS NOT NULL
    EXCEPT {HELD_KEYS}
)
SELECT execution_id, queue, key FROM (
    (SELECT execution_id, queue, key, priority, since, 1 AS queued FROM {{s}}.run_owners o
     WHERE owner IS NULL AND NOT coalesce(queue = ANY($2::text[]), false)
       AND NOT EXISTS (SELECT 1 FROM unnest($3::text[], $4::text[]) AS x(q, k) WHERE x.q = o.queue AND x.k = o.key)
     ORDER BY priority DESC, since LIMIT $1)
    UNION ALL
    (SELECT execution_id, queue, key, 0, since, 0 FROM {{s}}.run_owners
     WHERE owner_key IN (SELECT owner_key FROM dead) ORDER BY since LIMIT $1)
) found ORDER BY queued, priority DESC, since LIMIT $1""",
    "queues_of": "SELECT execution_id, queue, key FROM {s}.run_queues WHERE execution_id = ANY($1::text[])",
}
