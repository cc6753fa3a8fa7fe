"""Claim path: racing resumers claiming pauses, against a hand-written transaction in the same run.

    python -m benchmarks.claim_path [--rounds 5] [--pauses 120] [--backend both] [--tiny]

Larger size: ``--pauses 1000 --rounds 7``.

K racers (K = 1, 8, 32), each on its own store instance (its own connections), try to claim every
one of N pauses, all in the same order, so every pause is raced by all K. A pause is "decided" when
one racer won (``claim`` returned) and the others were refused (``AlreadyResumed``). The raw
counterpart is K connections of the same driver, each running per pause the same statements by
hand in one transaction: ``DELETE FROM pending ... RETURNING`` and, if a row came back, ``INSERT``
the resume row (SQLite: ``BEGIN IMMEDIATE`` ... ``COMMIT`` in one aiosqlite hop; PostgreSQL:
``BEGIN``/``DELETE``/``INSERT``/``COMMIT`` on asyncpg). Same durability as the stores (WAL +
``synchronous=FULL``; ``synchronous_commit=on``).

Also measured: 5 racers for one pause (the time until all five have their answer), and, on SQLite,
8 processes racing on one file. Exactly-once is checked on every measurement: one winner per pause,
one resume row per run in the database and no pending row left; any other error fails the run.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import os
import sqlite3
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any, Protocol

import aiosqlite
import asyncpg
import msgspec

from benchmarks._common import PG_DSN, Target, interleaved, median, print_targets
from stores import AlreadyResumed, Checkpoint, PendingInterrupt, PostgresStore, SQLiteStore

RACERS = (1, 8, 32)
DECIDERS = 5
PROCESSES = 8
PG_SCHEMA = f"bench_claim_{os.getpid()}"  # per process: runs may overlap
PG_RAW = f"bench_claim_raw_{os.getpid()}"
NODE = "turn:0/tool:approve"
PATH = "agent:bench/tool:approve"
_encode = msgspec.json.Encoder().encode


def _pause_row(eid: str) -> tuple[Checkpoint, PendingInterrupt]:
    row = Checkpoint(
        execution_id=eid,
        seq=0,
        runner="bench",
        node_id=NODE,
        step_type="hitl_pause",
        status="interrupted",
        interrupt_reason="approve?",
        interrupt_context={"amount": 42},
        agent_path=PATH,
    )
    return row, PendingInterrupt(
        execution_id=eid, reason="approve?", context={"amount": 42}, node_id=NODE, agent_path=PATH
    )


def _resume_input(racer: int) -> dict[str, Any]:
    return {"resume": {"approved": True, "metadata": {"racer": racer}}, "reentry_seq": 0}


def _resume_row(eid: str, racer: int) -> Checkpoint:
    return Checkpoint(
        execution_id=eid,
        seq=1,
        runner="bench",
        node_id=NODE,
        step_type="resume",
        node_input=_resume_input(racer),
        agent_path=PATH,
    )


class Side(Protocol):
    """One way of claiming: the tether stores or the raw driver, with ``racers`` connections."""

    async def prepare(self, eids: Sequence[str]) -> None: ...

    async def claim(self, racer: int, eid: str) -> bool: ...

    async def verify(self, eids: Sequence[str]) -> None: ...


async def race(side: Side, k: int, eids: Sequence[str]) -> float:
    """Claims/s with ``k`` racers each trying every pause; checks exactly-once."""
    await side.prepare(eids)
    wins: Counter[str] = Counter()

    async def racer(index: int) -> None:
        for eid in eids:
            if await side.claim(index, eid):
                wins[eid] += 1

    start = time.perf_counter()
    await asyncio.gather(*(racer(i) for i in range(k)))
    elapsed = time.perf_counter() - start
    assert set(wins) == set(eids) and set(wins.values()) == {1}, "a pause was not claimed exactly once"
    await side.verify(eids)
    return len(eids) / elapsed


async def decide(side: Side, eids: Sequence[str]) -> float:
    """Decisions/s (1 / median time) for ``DECIDERS`` racers started together on one pause."""
    await side.prepare(eids)
    times = []
    for eid in eids:
        start = time.perf_counter()
        results = await asyncio.gather(*(side.claim(i, eid) for i in range(DECIDERS)))
        times.append(time.perf_counter() - start)
        assert sum(results) == 1, f"{eid}: {sum(results)} winners"
    await side.verify(eids)
    return 1 / median(times)


# ---------------------------------------------------------------------------------------- tether


class TetherSide:
    """``racers`` store instances of one backend, plus one that lays out the pauses."""

    def __init__(self, make: Callable[[], Any], racers: int) -> None:
        self._make = make
        self._count = racers
        self.stores: list[Any] = []
        self.seeder: Any = None

    async def open(self) -> None:
        self.seeder = self._make()
        await self.seeder.setup()
        for _ in range(self._count):
            store = self._make()
            await store.setup()
            self.stores.append(store)

    async def close(self) -> None:
        for store in [self.seeder, *self.stores]:
            if store is not None:
                await store.close()

    async def prepare(self, eids: Sequence[str]) -> None:
        await asyncio.gather(*(self.seeder.append_pause(*_pause_row(eid)) for eid in eids))

    async def claim(self, racer: int, eid: str) -> bool:
        try:
            await self.stores[racer].claim(_resume_row(eid, racer))
        except AlreadyResumed:
            return False
        return True

    async def verify(self, eids: Sequence[str]) -> None:
        for eid in eids[:: max(len(eids) // 8, 1)]:
            rows = await self.seeder.history(eid)
            assert [r.step_type for r in rows] == ["hitl_pause", "resume"], (eid, rows)
        left = {p.execution_id for p in await self.seeder.pending()}
        assert not left.intersection(eids), "a claimed pause is still pending"


# ---------------------------------------------------------------------------------------- SQLite

_RAW_SQLITE = (
    "CREATE TABLE IF NOT EXISTS pending (execution_id TEXT PRIMARY KEY, reason TEXT NOT NULL, "
    "context BLOB NOT NULL, node_id TEXT NOT NULL, agent_path TEXT, created_at TEXT NOT NULL)",
    "CREATE TABLE IF NOT EXISTS rows (execution_id TEXT NOT NULL, seq INTEGER NOT NULL, "
    "step_type TEXT NOT NULL, node_id TEXT NOT NULL, node_input BLOB NOT NULL, agent_path TEXT, "
    "created_at TEXT NOT NULL, PRIMARY KEY (execution_id, seq))",
)
_PENDING_COLS = "reason, context, node_id, agent_path, created_at"


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S")


def _sqlite_connect(path: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(path, timeout=30, isolation_level=None, check_same_thread=False)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA synchronous = FULL")
    for statement in _RAW_SQLITE:
        conn.execute(statement)
    return conn


def _sqlite_claim(conn: sqlite3.Connection, eid: str, body: bytes) -> bool:
    conn.execute("BEGIN IMMEDIATE")
    try:
        found = conn.execute(
            f"DELETE FROM pending WHERE execution_id = ? RETURNING {_PENDING_COLS}", (eid,)
        ).fetchone()
        if found is not None:
            conn.execute(
                "INSERT INTO rows VALUES (?, 1, 'resume', ?, ?, ?, ?)", (eid, NODE, body, PATH, _now())
            )
        conn.execute("COMMIT")
    except BaseException:
        conn.rollback()
        raise
    return found is not None


def _sqlite_seed(conn: sqlite3.Connection, eids: Sequence[str]) -> None:
    context = _encode({"amount": 42})
    conn.execute("BEGIN IMMEDIATE")
    conn.executemany(
        "INSERT INTO rows VALUES (?, 0, 'hitl_pause', ?, '{}', ?, ?)", [(e, NODE, PATH, _now()) for e in eids]
    )
    conn.executemany(
        f"INSERT INTO pending (execution_id, {_PENDING_COLS}) VALUES (?, 'approve?', ?, ?, ?, ?)",
        [(e, context, NODE, PATH, _now()) for e in eids],
    )
    conn.execute("COMMIT")


class RawSQLite:
    """``racers`` aiosqlite connections on one file; one hop per claim transaction."""

    def __init__(self, path: Path, racers: int) -> None:
        self.path = path
        self._count = racers
        self._conns: list[tuple[aiosqlite.Connection, sqlite3.Connection]] = []

    async def open(self) -> None:
        for _ in range(self._count + 1):
            raw = _sqlite_connect(self.path)
            conn = aiosqlite.Connection(functools.partial(lambda c: c, raw), iter_chunk_size=64)
            await conn
            self._conns.append((conn, raw))

    async def close(self) -> None:
        for conn, _ in self._conns:
            await conn.close()

    async def _hop(self, index: int, fn: Callable[[], Any]) -> Any:
        execute: Callable[[Callable[[], Any]], Awaitable[Any]] = self._conns[index][0]._execute
        return await execute(fn)

    async def prepare(self, eids: Sequence[str]) -> None:
        raw = self._conns[-1][1]
        await self._hop(-1, functools.partial(_sqlite_seed, raw, eids))

    async def claim(self, racer: int, eid: str) -> bool:
        body = _encode(_resume_input(racer))
        result: bool = await self._hop(
            racer, functools.partial(_sqlite_claim, self._conns[racer][1], eid, body)
        )
        return result

    async def verify(self, eids: Sequence[str]) -> None:
        raw = self._conns[-1][1]

        def check() -> None:
            marks = ", ".join("?" * len(eids))
            (left,) = raw.execute(
                f"SELECT count(*) FROM pending WHERE execution_id IN ({marks})", eids
            ).fetchone()
            (resumed,) = raw.execute(
                f"SELECT count(*) FROM rows WHERE seq = 1 AND execution_id IN ({marks})", eids
            ).fetchone()
            assert left == 0 and resumed == len(eids), (left, resumed)

        await self._hop(-1, check)


# ------------------------------------------------------------------------------------ PostgreSQL


class RawPostgres:
    """``racers`` asyncpg connections; per claim BEGIN, DELETE ... RETURNING, INSERT, COMMIT."""

    def __init__(self, dsn: str, racers: int) -> None:
        self.dsn = dsn
        self._count = racers
        self._conns: list[asyncpg.Connection] = []

    async def open(self) -> None:
        self._conns = [
            await asyncpg.connect(self.dsn, server_settings={"synchronous_commit": "on"})
            for _ in range(self._count + 1)
        ]
        await self._conns[-1].execute(
            f"DROP SCHEMA IF EXISTS {PG_RAW} CASCADE; CREATE SCHEMA {PG_RAW}; "
            f"CREATE TABLE {PG_RAW}.pending (execution_id text PRIMARY KEY, reason text NOT NULL, "
            "context bytea NOT NULL, node_id text NOT NULL, agent_path text, created_at timestamptz NOT NULL); "
            f"CREATE TABLE {PG_RAW}.rows (execution_id text NOT NULL, seq bigint NOT NULL, "
            "step_type text NOT NULL, node_id text NOT NULL, node_input bytea NOT NULL, agent_path text, "
            "created_at timestamptz NOT NULL, PRIMARY KEY (execution_id, seq))"
        )

    async def close(self) -> None:
        if self._conns:
            await self._conns[-1].execute(f"DROP SCHEMA IF EXISTS {PG_RAW} CASCADE")
        for conn in self._conns:
            await conn.close()

    async def prepare(self, eids: Sequence[str]) -> None:
        conn = self._conns[-1]
        async with conn.transaction():
            await conn.execute(
                f"INSERT INTO {PG_RAW}.rows SELECT e, 0, 'hitl_pause', $2, '{{}}', $3, now() FROM unnest($1::text[]) e",
                list(eids),
                NODE,
                PATH,
            )
            await conn.execute(
                f"INSERT INTO {PG_RAW}.pending SELECT e, 'approve?', $2, $3, $4, now() FROM unnest($1::text[]) e",
                list(eids),
                _encode({"amount": 42}),
                NODE,
                PATH,
            )

    async def claim(self, racer: int, eid: str) -> bool:
        conn = self._conns[racer]
        async with conn.transaction():
            found = await conn.fetchrow(
                f"DELETE FROM {PG_RAW}.pending WHERE execution_id = $1 RETURNING {_PENDING_COLS}", eid
            )
            if found is None:
                return False
            await conn.execute(
                f"INSERT INTO {PG_RAW}.rows VALUES ($1, 1, 'resume', $2, $3, $4, now())",
                eid,
                NODE,
                _encode(_resume_input(racer)),
                PATH,
            )
        return True

    async def verify(self, eids: Sequence[str]) -> None:
        conn = self._conns[-1]
        left = await conn.fetchval(
            f"SELECT count(*) FROM {PG_RAW}.pending WHERE execution_id = ANY($1::text[])", list(eids)
        )
        resumed = await conn.fetchval(
            f"SELECT count(*) FROM {PG_RAW}.rows WHERE seq = 1 AND execution_id = ANY($1::text[])", list(eids)
        )
        assert left == 0 and resumed == len(eids), (left, resumed)


# ------------------------------------------------------------------- 8 processes on one SQLite file


async def _child(path: str, eids: list[str]) -> None:
    """A racing process: claim every pause in ``eids``; print what it won and any error."""
    async with SQLiteStore(path) as store:
        print("ready", flush=True)
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
        won, lost, errors = [], 0, []
        for eid in eids:
            try:
                await store.claim(_resume_row(eid, os.getpid()))
                won.append(eid)
            except AlreadyResumed:
                lost += 1
            except Exception as exc:
                errors.append(f"{type(exc).__name__}: {exc}")
    print(json.dumps({"won": won, "lost": lost, "errors": errors}), flush=True)


async def processes(path: Path, count: int, pauses: int) -> tuple[float, int]:
    """``count`` processes race for ``pauses`` pauses on one file; returns (claims/s, attempts)."""
    eids = [f"proc-{i}" for i in range(pauses)]
    async with SQLiteStore(path) as seeder:
        await asyncio.gather(*(seeder.append_pause(*_pause_row(eid)) for eid in eids))
    ids_file = path.with_suffix(".ids.json")
    ids_file.write_text(json.dumps(eids))
    children = [
        await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "benchmarks.claim_path",
            "--child",
            str(path),
            str(ids_file),
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
        )
        for _ in range(count)
    ]
    for child in children:
        assert child.stdout is not None
        line = await child.stdout.readline()
        assert line.strip() == b"ready", line
    start = time.perf_counter()
    for child in children:
        assert child.stdin is not None
        child.stdin.write(b"go\n")
        await child.stdin.drain()
    outputs = [await child.communicate() for child in children]
    elapsed = time.perf_counter() - start
    wins: Counter[str] = Counter()
    lost = 0
    for (out, _), child in zip(outputs, children, strict=True):
        assert child.returncode == 0, out
        report = json.loads(out.decode().strip().splitlines()[-1])
        assert not report["errors"], report["errors"]
        wins.update(report["won"])
        lost += report["lost"]
    assert set(wins) == set(eids) and set(wins.values()) == {1}, "not exactly once across processes"
    assert lost == pauses * (count - 1), lost
    async with SQLiteStore(path) as checker:
        assert not await checker.pending(), "a pending row was left"
        for eid in eids[:: max(pauses // 8, 1)]:
            assert [r.step_type for r in await checker.history(eid)] == ["hitl_pause", "resume"]
    return pauses / elapsed, pauses * count


# ------------------------------------------------------------------------------------------ main


class _Ids:
    def __init__(self, prefix: str, pauses: int) -> None:
        self.prefix = prefix
        self.pauses = pauses
        self.n = 0

    def __call__(self) -> list[str]:
        self.n += 1
        return [f"{self.prefix}{self.n}-{i}" for i in range(self.pauses)]


async def run(backends: list[str], rounds: int, pauses: int, tmp: Path) -> list[Target]:
    ids = _Ids("p", pauses)
    decide_ids = _Ids("d", max(pauses // 4, 5))
    sides: dict[str, tuple[TetherSide, Side]] = {}
    opened: list[Any] = []
    measures: dict[str, Callable[[], Awaitable[float]]] = {}
    try:
        for backend in backends:
            if backend == "sqlite":
                path = tmp / "claim.db"
                ours = TetherSide(functools.partial(SQLiteStore, path), max(RACERS))
                raw: Any = RawSQLite(tmp / "raw.db", max(RACERS))
            else:
                admin = await asyncpg.connect(PG_DSN)
                await admin.execute(f"DROP SCHEMA IF EXISTS {PG_SCHEMA} CASCADE")
                await admin.close()
                ours = TetherSide(
                    functools.partial(PostgresStore, PG_DSN, schema=PG_SCHEMA, min_size=1, max_size=1),
                    max(RACERS),
                )
                raw = RawPostgres(PG_DSN, max(RACERS))
            for side in (ours, raw):
                await side.open()
                opened.append(side)
            sides[backend] = (ours, raw)
            for k in RACERS:
                for who, side in (("tether", ours), ("raw", raw)):
                    measures[f"{backend} K={k} {who}"] = lambda s=side, k=k: race(s, k, ids())
            for who, side in (("tether", ours), ("raw", raw)):
                measures[f"{backend} 5 racers {who}"] = lambda s=side: decide(s, decide_ids())
        samples = await interleaved(rounds, measures)
    finally:
        for side in reversed(opened):
            await side.close()
        if "postgres" in backends:
            admin = await asyncpg.connect(PG_DSN)
            await admin.execute(f"DROP SCHEMA IF EXISTS {PG_SCHEMA} CASCADE")
            await admin.close()
    med = {name: median(values) for name, values in samples.items()}
    targets: list[Target] = []
    for backend in backends:
        for k in RACERS:
            t, r = med[f"{backend} K={k} tether"], med[f"{backend} K={k} raw"]
            if backend == "postgres":
                targets.append(Target(f"postgres K={k} claims/s", t, r, 0.8))
            else:
                targets.append(Target(f"sqlite K={k} claims/s", t, r, None, "vs raw, no target"))
        t, r = med[f"{backend} 5 racers tether"], med[f"{backend} 5 racers raw"]
        targets.append(Target(f"{backend} 5 racers, 1 pause, decided/s", t, r, 1 / 1.5, "time <= 1.5x raw"))
        if backend == "sqlite":
            k1, k8 = med["sqlite K=1 tether"], med["sqlite K=8 tether"]
            targets.append(Target("sqlite K=8 vs K=1 (tether)", k8, k1, 0.5, "base column: tether K=1"))
    return targets


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds (median over them)")
    parser.add_argument("--pauses", type=int, default=120, help="pauses per measurement")
    parser.add_argument("--backend", choices=("sqlite", "postgres", "both"), default="both")
    parser.add_argument("--tiny", action="store_true", help="a fast smoke size for CI")
    parser.add_argument("--child", nargs=2, metavar=("DB", "IDS"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        db, ids_file = args.child
        asyncio.run(_child(db, json.loads(Path(ids_file).read_text())))
        return
    pauses = 12 if args.tiny else args.pauses
    backends = ["sqlite", "postgres"] if args.backend == "both" else [args.backend]
    with tempfile.TemporaryDirectory(prefix="tether-claim-") as tmp:
        targets = asyncio.run(run(backends, args.rounds, pauses, Path(tmp)))
        print_targets(
            f"tether claim path: {pauses} pauses per measurement, every racer tries every pause, "
            f"medians of {args.rounds} interleaved rounds",
            targets,
        )
        print(f"exactly-once verified on every measurement ({', '.join(backends)}): ok")
        if "sqlite" in backends:
            rate, attempts = asyncio.run(processes(Path(tmp) / "procs.db", PROCESSES, pauses))
            print(
                f"sqlite {PROCESSES} processes, one file: {pauses} pauses, {attempts} attempts, "
                f"{rate:,.0f} claims/s; exactly-once, no lock error: ok"
            )


if __name__ == "__main__":
    main()
