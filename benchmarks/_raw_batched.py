"""step_path's second raw counterpart for the concurrent column: "raw batched", an ideal group commit.

The runs in flight advance in lockstep: every run's first row, then every run's second row, and so
on, each step's rows written by the raw driver in one transaction (``executemany``): aiosqlite
``BEGIN`` / ``executemany`` / ``COMMIT`` on one connection, asyncpg ``executemany`` in one
transaction on one connection. The rows and the work between them are the raw contender's
(:func:`benchmarks.step_path.raw_steps`): the tool of each run runs after its tool row is written.
Verified per run: exactly its 4 rows, in ``seq`` order, with the node ids tether writes.

Imported by :mod:`benchmarks.step_path` when it builds its contenders (this module uses its classes).
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from typing import Any

from benchmarks.step_path import (
    _RAW_COLUMNS,
    EXPECTED_ROWS,
    RAW_BATCHED,
    WARMUP,
    RawPostgres,
    RawSQLite,
    raw_steps,
)

__all__ = ["TARGET", "RawBatchedPostgres", "RawBatchedSQLite", "print_target"]

#: tether with ``--concurrency`` runs in flight against raw batched, runs/s.
TARGET = 0.5


def lockstep(run_ids: Sequence[str]) -> Iterator[list[tuple[Any, ...]]]:
    """The rows of one step of every run in ``run_ids``, step after step (the work between done)."""
    steps = [raw_steps(run_id) for run_id in run_ids]
    while True:
        rows = [row for step in steps if (row := next(step, None)) is not None]
        if not rows:
            return
        yield rows


def print_target(tether: float, batched: float, concurrency: int) -> bool:
    """Print raw batched's rate and tether's ratio to it against :data:`TARGET`; whether it holds."""
    ratio = tether / batched
    verdict = "PASS" if ratio >= TARGET else "MISS"
    print(
        f"raw batched, {concurrency} runs in lockstep, one transaction per step: {batched:,.0f} runs/s; "
        f"tether {concurrency} concurrent {ratio:.2f}x raw batched (>= {TARGET:.1f}x): {verdict}"
    )
    return verdict == "PASS"


def check_runs(name: str, found: Sequence[tuple[str, str]], run_ids: Sequence[str]) -> None:
    """``found`` is ``(execution_id, node_id)`` in ``(execution_id, seq)`` order: each run's 4 rows in order."""
    by_run: dict[str, list[str]] = {}
    for run_id, node_id in found:
        by_run.setdefault(run_id, []).append(node_id)
    assert len(by_run) == len(run_ids) + WARMUP, (name, len(by_run))
    for run_id in run_ids:
        if by_run.get(run_id) != EXPECTED_ROWS:
            raise AssertionError(f"{name} run {run_id} wrote {by_run.get(run_id)}")


class RawBatchedSQLite(RawSQLite):
    """aiosqlite, WAL, ``synchronous=FULL``; each step of the batch one transaction of its rows."""

    name = RAW_BATCHED
    batched = True

    async def one(self, run_id: str) -> None:
        await self.batch([run_id])

    async def batch(self, run_ids: list[str]) -> None:
        conn = self._conn
        assert conn is not None
        sql = f"INSERT INTO rows {_RAW_COLUMNS} VALUES (?, ?, ?, ?, ?, ?, ?)"
        for rows in lockstep(run_ids):
            now = time.strftime("%Y-%m-%dT%H:%M:%S")
            await conn.execute("BEGIN")
            try:
                await conn.executemany(sql, [(*row, now) for row in rows])
            except BaseException:
                await conn.execute("ROLLBACK")
                raise
            await conn.execute("COMMIT")

    async def verify(self, run_ids: list[str]) -> None:
        assert self._conn is not None
        async with self._conn.execute(
            "SELECT execution_id, node_id FROM rows ORDER BY execution_id, seq"
        ) as cursor:
            found = [(str(eid), str(node)) for eid, node in await cursor.fetchall()]
        check_runs(self.name, found, run_ids)


class RawBatchedPostgres(RawPostgres):
    """asyncpg, ``synchronous_commit=on``; each step of the batch one transaction (``executemany``)."""

    name = RAW_BATCHED
    batched = True

    async def one(self, run_id: str) -> None:
        await self.batch([run_id])

    async def batch(self, run_ids: list[str]) -> None:
        assert self._pool is not None
        sql = f"INSERT INTO {self.SCHEMA}.rows {_RAW_COLUMNS} VALUES ($1, $2, $3, $4, $5, $6, now())"
        async with self._pool.acquire() as conn:
            for rows in lockstep(run_ids):
                async with conn.transaction():
                    await conn.executemany(sql, rows)

    async def verify(self, run_ids: list[str]) -> None:
        assert self._pool is not None
        records = await self._pool.fetch(
            f"SELECT execution_id, node_id FROM {self.SCHEMA}.rows ORDER BY execution_id, seq"
        )
        check_runs(self.name, [(r["execution_id"], r["node_id"]) for r in records], run_ids)
