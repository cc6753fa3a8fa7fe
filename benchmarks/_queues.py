"""The take of a limited queue against an unlimited one (``python -m benchmarks.fleet --queues``).

Each round enqueues ``--runs`` runs into each of two queues (4 keys), then takes every one with the
store's take (``take_queued``, what a sweep's admission calls), one after the other, and times the
takes alone: ``capped`` has every limit set (``concurrency`` and ``per_key`` at the number of runs,
a rate of ``10 x runs`` per 10 minutes, so each take counts the live runs of its queue and of its
key and checks and records its start, and none is refused), ``free`` has none. Rounds alternate
which queue goes first; the medians of the rounds are compared in one run.

Statements are counted as the store sends them: SQLite's trace callback on the store's
connections (``BEGIN``/``COMMIT`` included), asyncpg's query logger on the pool's (one statement
per take on PostgreSQL either way: the take function runs its statements server-side, which the
printout lists). The target: a limited take costs at most one statement more than an unlimited one.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

from benchmarks._common import median
from stores import Checkpoint, Queue, Store
from stores.lowlevel import postgres_connection_module as pg_connection
from stores.lowlevel import sqlite_writer_module as sqlite_writer

__all__ = ["PG_INSIDE", "TARGET", "report", "take_rates"]

#: At most this many more statements per take for a limited queue than for an unlimited one.
TARGET = 1.0
#: What the take function runs server-side on PostgreSQL (see ``stores.postgres._queue_sql``).
PG_INSIDE = {
    "capped": "run lookup, queue row lock, live count, n-th start, take, slot, start recorded",
    "free": "run lookup, queue row, take",
}


class _Counter:
    """Statements sent by the store's connections while ``counting`` (SQLite's also kept as text)."""

    def __init__(self) -> None:
        self.counting = False
        self.count = 0
        self.texts: list[str] = []

    def statement(self, *found: Any) -> None:
        if self.counting:
            self.count += 1
            if found and isinstance(found[0], str):  # SQLite's trace gives the statement's text
                self.texts.append(found[0])


@contextmanager
def _counted(counter: _Counter) -> Iterator[None]:
    """Every connection a store opens from here on reports its statements to ``counter``."""
    connect, init = sqlite_writer.connect, pg_connection._init_connection

    def traced(*args: Any, **kwargs: Any) -> sqlite3.Connection:
        conn = connect(*args, **kwargs)
        conn.set_trace_callback(counter.statement)
        return conn

    async def logged(conn: Any) -> None:
        await init(conn)
        conn.add_query_logger(counter.statement)

    sqlite_writer.connect, pg_connection._init_connection = traced, logged  # type: ignore[assignment]
    try:
        yield
    finally:
        sqlite_writer.connect, pg_connection._init_connection = connect, init  # type: ignore[assignment]


async def _enqueue(store: Any, ids: list[str], queue: str) -> None:
    for i, eid in enumerate(ids):
        assert await store.try_lock(eid)
        await store.append(
            Checkpoint(execution_id=eid, seq=0, runner="bench", node_id="turn:0", state_snapshot={})
        )
        await store.hand_off(eid, queue, f"k{i % 4}", 0)


async def take_rates(open_store: Any, runs: int, rounds: int) -> dict[str, tuple[float, float]]:
    """Per queue, the median takes per second and the statements per take."""
    counter = _Counter()
    with _counted(counter):
        store: Store = open_store()
        await store.setup()
    taker: Any = store
    try:
        await taker.declare_queues(
            [Queue("capped", concurrency=runs, per_key=runs, rate=(10 * runs, timedelta(minutes=10)))]
        )
        rates: dict[str, list[float]] = {"capped": [], "free": []}
        statements: dict[str, list[int]] = {"capped": [], "free": []}
        for n in range(rounds):
            for queue in ("capped", "free") if n % 2 == 0 else ("free", "capped"):
                ids = [f"{queue}-{n}-{i}" for i in range(runs)]
                await _enqueue(taker, ids, queue)
                counter.count, counter.counting = 0, True
                start = time.perf_counter()
                for eid in ids:
                    assert (await taker.take_queued(eid)).taken, eid
                elapsed = time.perf_counter() - start
                counter.counting = False
                rates[queue].append(runs / elapsed)
                statements[queue].append(counter.count)
                for eid in ids:  # handed back: the next round's counts start from nothing
                    await taker.unlock(eid)
        return {q: (median(rates[q]), median(statements[q]) / runs) for q in rates}
    finally:
        await store.close()


def report(backend: str, runs: int, rounds: int, found: dict[str, tuple[float, float]]) -> None:
    """Print the table, the ratio and the verdict."""
    print(f"fleet --queues, {backend}: {runs} takes per queue per round, {rounds} rounds (medians)")
    print("  queue     takes/s  statements/take")
    for queue in ("free", "capped"):
        rate, per_take = found[queue]
        inside = f"  (inside the take function: {PG_INSIDE[queue]})" if backend == "postgres" else ""
        print(f"  {queue:<8}{rate:9.0f}  {per_take:15.2f}{inside}")
    ratio = found["capped"][0] / found["free"][0]
    more = found["capped"][1] - found["free"][1]
    verdict = "PASS" if more <= TARGET else "MISS"
    print(
        f"  capped / free: {ratio:.2f}x the take rate; {more:+.2f} statements per take "
        f"(target <= +{TARGET:.0f}): {verdict}"
    )
