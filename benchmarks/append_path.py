"""Append path: checkpoint rows/s through the stores against the raw driver doing the same write.

    python -m benchmarks.append_path [--rounds 5] [--rows 320] [--backend both] [--tiny]

Larger size: ``--rows 4800 --rounds 7``.

Workload: runs of 10 rows; each row adds one NEW message of 2 KB or 20 KB and its ``state_snapshot``
carries the run's whole, growing message list (as a real run does; the store keeps messages once).
One writer appends all rows in order; with 16 writers, 16 tasks each append their own runs at once.

Raw counterparts, same driver, same durability, same new bytes per row (msgspec-encoded on the loop):

* SQLite (WAL, ``synchronous=FULL``, aiosqlite): one row = one hop running an autocommit ``INSERT``;
  16 writers = one hop running ``BEGIN`` + ``executemany`` of 16 rows + ``COMMIT`` (the raw batch).
* PostgreSQL (asyncpg, ``synchronous_commit=on``): one autocommit ``INSERT`` per row; 16 writers = 16
  dedicated connections inserting concurrently.

Every measurement is verified: row counts per run, and the newest row of sample runs materialises
its full message list. Targets: one writer >= 0.75x raw; 16 writers >= 0.5x raw (SQLite batch) and
>= 0.75x raw (PostgreSQL).
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import os
import sqlite3
import tempfile
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import aiosqlite
import asyncpg
import msgspec

from benchmarks._common import PG_DSN, Target, interleaved, median, print_targets
from stores import Checkpoint, PostgresStore, SQLiteStore

RUN_ROWS = 10
SIZES = {"2KB": 2 * 1024, "20KB": 20 * 1024}
WRITERS = (1, 16)
TARGETS = {("sqlite", 1): 0.75, ("sqlite", 16): 0.5, ("postgres", 1): 0.75, ("postgres", 16): 0.75}
_FILLER = "the quick brown fox jumps over the lazy dog; " * 512
_encode = msgspec.json.Encoder().encode

PG_SCHEMA = f"bench_append_{os.getpid()}"  # per process: runs may overlap
PG_RAW = f"bench_append_raw_{os.getpid()}"


def _message(tag: str, size: int) -> dict[str, Any]:
    """A chat message whose content is ``size`` characters, unique per row."""
    return {"role": "assistant", "content": (tag + " " + _FILLER * (size // len(_FILLER) + 1))[:size]}


def _layout(prefix: str, writers: int, rows: int) -> list[list[tuple[str, int]]]:
    """Per writer, the ``(execution_id, seq)`` of each row it appends (runs of ``RUN_ROWS`` rows)."""
    per = rows // writers
    return [[(f"{prefix}-w{w}-r{i // RUN_ROWS}", i % RUN_ROWS) for i in range(per)] for w in range(writers)]


def _raw_expected(layout: list[list[tuple[str, int]]]) -> Counter[str]:
    return Counter(eid for rows in layout for eid, _ in rows)


def _warm_layout(layout: list[list[tuple[str, int]]]) -> list[list[tuple[str, int]]]:
    """Three warm-up rows per writer, in runs of their own."""
    return [[(f"warm-{rows[0][0]}", seq) for seq in range(3)] for rows in layout]


def _expected(layout: list[list[tuple[str, int]]]) -> Counter[str]:
    """Rows per run of ``layout`` and of its warm-up."""
    return Counter(eid for part in (layout, _warm_layout(layout)) for rows in part for eid, _ in rows)


async def _tether_writer(
    append: Callable[[Checkpoint], Awaitable[None]], rows: list[tuple[str, int]], size: int
) -> None:
    messages: list[dict[str, Any]] = []
    for eid, seq in rows:
        if seq == 0:
            messages = []
        messages.append(_message(f"{eid}:{seq}", size))
        await append(
            Checkpoint(
                execution_id=eid,
                seq=seq,
                runner="bench",
                node_id=f"turn:{seq}",
                step_index=seq,
                state_snapshot={"messages": list(messages), "turn": seq},
            )
        )


async def _tether(store: Any, layout: list[list[tuple[str, int]]], size: int) -> float:
    """Rows/s of the writers of ``layout`` appending through ``store`` (all commits awaited).

    The store is warmed first with a few rows of other runs in the same pattern (a long-running
    process has its statements prepared, as the raw side's persistent connections do); the caller
    counts them in with :func:`_warm_layout`.
    """
    warm = _warm_layout(layout)
    await asyncio.gather(*(_tether_writer(store.append, rows, size) for rows in warm))
    start = time.perf_counter()
    await asyncio.gather(*(_tether_writer(store.append, rows, size) for rows in layout))
    elapsed = time.perf_counter() - start
    return sum(map(len, layout)) / elapsed


async def _check_materialised(store: Any, layout: list[list[tuple[str, int]]], size: int) -> None:
    """The newest row of the first and last run of each writer carries its whole message list."""
    for rows in layout:
        for eid in {rows[0][0], rows[-1][0]}:
            last = max(s for e, s in rows if e == eid)
            newest = await store.latest(eid)
            assert newest is not None and newest.seq == last, (eid, newest)
            messages = newest.state_snapshot["messages"]
            assert len(messages) == last + 1, (eid, len(messages))
            assert messages == [_message(f"{eid}:{s}", size) for s in range(last + 1)], eid


def _raw_body(eid: str, seq: int, size: int) -> bytes:
    return _encode({"message": _message(f"{eid}:{seq}", size), "turn": seq})


# ---------------------------------------------------------------------------------------- SQLite

_RAW_SQLITE = "CREATE TABLE raw (execution_id TEXT NOT NULL, seq INTEGER NOT NULL, body BLOB NOT NULL, PRIMARY KEY (execution_id, seq))"
_RAW_INSERT = "INSERT INTO raw (execution_id, seq, body) VALUES (?, ?, ?)"


class SQLiteBench:
    """Fresh database files per measurement, in one temporary directory."""

    name = "sqlite"

    def __init__(self) -> None:
        self._tmp = tempfile.TemporaryDirectory(prefix="tether-append-")
        self._n = 0

    async def open(self) -> None:
        pass

    async def close(self) -> None:
        self._tmp.cleanup()

    def _path(self) -> Path:
        self._n += 1
        return Path(self._tmp.name) / f"b{self._n}.db"

    async def tether(self, writers: int, size: int, rows: int) -> float:
        path = self._path()
        layout = _layout(f"t{self._n}", writers, rows)
        async with SQLiteStore(path) as store:
            rate = await _tether(store, layout, size)
            await _check_materialised(store, layout, size)
        with sqlite3.connect(path) as conn:
            counts = Counter(
                dict(conn.execute("SELECT execution_id, count(*) FROM checkpoints GROUP BY execution_id"))
            )
        conn.close()
        assert counts == _expected(layout), "row counts per run differ"
        _unlink(path)
        return rate

    async def raw(self, writers: int, size: int, rows: int) -> float:
        path = self._path()

        def connect() -> sqlite3.Connection:
            conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
            conn.execute("PRAGMA journal_mode = WAL")
            conn.execute("PRAGMA synchronous = FULL")
            conn.execute(_RAW_SQLITE)
            return conn

        raw = connect()
        conn = aiosqlite.Connection(lambda: raw, iter_chunk_size=64)
        await conn
        hop: Callable[[Callable[[], Any]], Awaitable[Any]] = conn._execute
        layout = _layout(f"r{self._n}", writers, rows)
        try:
            start = time.perf_counter()
            if writers == 1:
                for eid, seq in layout[0]:
                    args = (eid, seq, _raw_body(eid, seq, size))
                    await hop(functools.partial(raw.execute, _RAW_INSERT, args))
            else:
                for j in range(len(layout[0])):
                    batch = [(eid, seq, _raw_body(eid, seq, size)) for eid, seq in (w[j] for w in layout)]
                    await hop(functools.partial(_batch, raw, batch))
            elapsed = time.perf_counter() - start
            counted = Counter(
                dict(
                    await hop(
                        lambda: raw.execute("SELECT execution_id, count(*) FROM raw GROUP BY 1").fetchall()
                    )
                )
            )
            assert counted == _raw_expected(layout), "raw row counts differ"
        finally:
            await conn.close()
        _unlink(path)
        return sum(map(len, layout)) / elapsed


def _batch(conn: sqlite3.Connection, batch: list[tuple[str, int, bytes]]) -> None:
    conn.execute("BEGIN")
    conn.executemany(_RAW_INSERT, batch)
    conn.execute("COMMIT")


def _unlink(path: Path) -> None:
    for suffix in ("", "-wal", "-shm", ".locks"):
        try:
            os.unlink(f"{path}{suffix}")
        except FileNotFoundError:
            pass


# ------------------------------------------------------------------------------------ PostgreSQL


class PostgresBench:
    """The tether store in schema ``bench_append``, the raw table in ``bench_append_raw``."""

    name = "postgres"

    def __init__(self, dsn: str) -> None:
        self.dsn = dsn
        self._n = 0
        self._admin: asyncpg.Connection | None = None
        self._raw: list[asyncpg.Connection] = []

    async def open(self) -> None:
        self._admin = admin = await asyncpg.connect(self.dsn)
        await admin.execute(
            f"DROP SCHEMA IF EXISTS {PG_SCHEMA} CASCADE; DROP SCHEMA IF EXISTS {PG_RAW} CASCADE; "
            f"CREATE SCHEMA {PG_RAW}; CREATE TABLE {PG_RAW}.raw (execution_id text NOT NULL, "
            "seq bigint NOT NULL, body bytea NOT NULL, PRIMARY KEY (execution_id, seq))"
        )
        async with PostgresStore(self.dsn, schema=PG_SCHEMA):
            pass  # create the schema once, outside the measurements
        self._raw = [
            await asyncpg.connect(self.dsn, server_settings={"synchronous_commit": "on"})
            for _ in range(max(WRITERS))
        ]

    async def close(self) -> None:
        for conn in self._raw:
            await conn.close()
        if self._admin is not None:
            await self._admin.execute(
                f"DROP SCHEMA IF EXISTS {PG_SCHEMA} CASCADE; DROP SCHEMA IF EXISTS {PG_RAW} CASCADE"
            )
            await self._admin.close()

    def _adm(self) -> asyncpg.Connection:
        assert self._admin is not None
        return self._admin

    async def tether(self, writers: int, size: int, rows: int) -> float:
        self._n += 1
        await self._adm().execute(f"TRUNCATE {PG_SCHEMA}.checkpoints")
        layout = _layout(f"t{self._n}", writers, rows)
        # A fresh store per measurement (its message memory starts empty), its pool opened beforehand.
        async with PostgresStore(self.dsn, schema=PG_SCHEMA, min_size=4, max_size=20) as store:
            rate = await _tether(store, layout, size)
            await _check_materialised(store, layout, size)
        found = await self._adm().fetch(
            f"SELECT execution_id, count(*) FROM {PG_SCHEMA}.checkpoints GROUP BY 1"
        )
        assert Counter({r[0]: r[1] for r in found}) == _expected(layout), "row counts per run differ"
        return rate

    async def raw(self, writers: int, size: int, rows: int) -> float:
        self._n += 1
        await self._adm().execute(f"TRUNCATE {PG_RAW}.raw")
        layout = _layout(f"r{self._n}", writers, rows)
        sql = f"INSERT INTO {PG_RAW}.raw (execution_id, seq, body) VALUES ($1, $2, $3)"

        async def writer(conn: asyncpg.Connection, mine: list[tuple[str, int]]) -> None:
            for eid, seq in mine:
                await conn.execute(sql, eid, seq, _raw_body(eid, seq, size))

        start = time.perf_counter()
        await asyncio.gather(*(writer(conn, mine) for conn, mine in zip(self._raw, layout, strict=False)))
        elapsed = time.perf_counter() - start
        found = await self._adm().fetch(f"SELECT execution_id, count(*) FROM {PG_RAW}.raw GROUP BY 1")
        assert Counter({r[0]: r[1] for r in found}) == _raw_expected(layout), "raw row counts differ"
        return sum(map(len, layout)) / elapsed


# ------------------------------------------------------------------------------------------ main


async def run(backends: list[str], rounds: int, rows: int) -> list[Target]:
    benches: list[SQLiteBench | PostgresBench] = []
    for name in backends:
        benches.append(SQLiteBench() if name == "sqlite" else PostgresBench(PG_DSN))
    measures: dict[str, Callable[[], Awaitable[float]]] = {}
    keys: list[tuple[str, int, str]] = []
    try:
        for bench in benches:
            await bench.open()
            for writers in WRITERS:
                for label, size in SIZES.items():
                    key = f"{bench.name} {writers}w {label}"
                    keys.append((bench.name, writers, label))
                    measures[key + " tether"] = functools.partial(bench.tether, writers, size, rows)
                    measures[key + " raw"] = functools.partial(bench.raw, writers, size, rows)
        samples = await interleaved(rounds, measures)
    finally:
        for bench in benches:
            await bench.close()
    targets = []
    for backend, writers, label in keys:
        key = f"{backend} {writers}w {label}"
        raw_note = "raw 16-row batch" if backend == "sqlite" and writers > 1 else "raw"
        targets.append(
            Target(
                f"{backend} {writers} writer{'s' if writers > 1 else ''}, {label}/row",
                median(samples[key + " tether"]),
                median(samples[key + " raw"]),
                TARGETS[backend, writers],
                raw_note,
            )
        )
    return targets


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds (median over them)")
    parser.add_argument("--rows", type=int, default=320, help="rows per measurement")
    parser.add_argument("--backend", choices=("sqlite", "postgres", "both"), default="both")
    parser.add_argument("--tiny", action="store_true", help="a fast smoke size for CI")
    args = parser.parse_args(argv)
    rows = 64 if args.tiny else args.rows
    rows = max(rows - rows % max(WRITERS), max(WRITERS))  # every writer gets the same share
    backends = ["sqlite", "postgres"] if args.backend == "both" else [args.backend]
    targets = asyncio.run(run(backends, args.rounds, rows))
    print_targets(
        f"tether append path: rows/s, {rows} rows per measurement, medians of {args.rounds} interleaved rounds",
        targets,
    )
    print("row counts per run verified, messages materialise: ok")


if __name__ == "__main__":
    main()
