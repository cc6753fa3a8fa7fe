"""Step path: the small refund as runs/s, tether beside the raw driver and the peers, per backend.

    python -m benchmarks.step_path [--runs 300] [--concurrency 64] [--rounds 5]
                                   [--backend sqlite|postgres|both] [--peers] [--tiny]

The work (every contender does the same): an offline deterministic model asks for ``refund(order,
amount)``, the tool runs once, the model answers; a checkpoint before each model call, before the
tool and at the end. tether writes its 4 rows (``turn:0``, ``turn:0/tool:refund``, ``turn:1``,
``run_end``). ``--runs`` runs are measured one after another (sequential) and with ``--concurrency``
runs in flight (concurrent), on SQLite (WAL, ``synchronous=FULL``, the SQLite default every peer
keeps) and PostgreSQL (``synchronous_commit=on``).

Contenders:

* raw: no framework: the model function, the tool function and the same 4 rows written directly on
  the driver, each before its step, one one-hop transaction per row (aiosqlite autocommit ``INSERT``
  on one connection; asyncpg autocommit ``INSERT`` on a dedicated connection, a pool of 20 when
  concurrent).
* raw batched (concurrent only, :mod:`benchmarks._raw_batched`): an ideal group commit: batches of
  ``--concurrency`` runs in lockstep, each step's rows in one transaction; tether is printed against it.
* tether: ``ActorSystem.spawn(...)`` then ``RunRef.result()`` on ``SQLiteStore`` / ``PostgresStore``.
* spawns (concurrent only, tether): batches of ``--concurrency`` runs, each batch started by that many
  awaited ``spawn`` calls one after another and then awaited, beside batches spawned at once
  (``asyncio.gather`` of the spawns) and then awaited; printed with their ratio.
* with ``--peers`` (install ``.[bench]``; see benchmarks/README.md): FastAIAgent 1.94 untraced
  (``FASTAIAGENT_TRACE_ENABLED=false``; ``SQLiteCheckpointer`` / ``PostgresCheckpointer``), LangGraph
  1.2 (a ``StateGraph`` with a model node and a ``ToolNode``; ``AsyncSqliteSaver`` /
  ``AsyncPostgresSaver`` on a pool, ``durability="sync"``) and DBOS 3.4 (a workflow with two model
  steps and a tool step; SQLite / PostgreSQL system database).

Each measurement runs in a fresh child process (no contender shares a process with what another one
left behind: a peer's background threads, modules or garbage), on a fresh database (file, schema or
database), with two warm-up runs before the timed runs; every run is verified afterwards (completed with the expected answer, the tool ran exactly once
per run, tether and raw batched: exactly the 4 rows in order; raw: 4 rows per run). Configurations are interleaved
(rotating order) over ``--rounds`` rounds; the table shows medians and ratios to raw and to
FastAIAgent untraced. ``--tiny`` is a CI smoke size (tether and raw only unless ``--peers``; 1 round).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any, NamedTuple

os.environ.setdefault("FASTAIAGENT_TRACE_ENABLED", "false")  # before fastaiagent is imported

import aiosqlite
import asyncpg
import msgspec

from actors import ActorSystem, Agent
from benchmarks._common import PG_DSN, interleaved, measure_child, median
from stores import Checkpoint, PostgresStore, SQLiteStore
from tether.lowlevel import RefundBot

PROMPT = "Refund order 1042, amount 20"
#: The PostgreSQL schema of tether's measurement, per process: runs may overlap.
_TETHER_SCHEMA = f"bench_step_tether_{os.getpid()}"
ARGS: dict[str, Any] = {"order": "1042", "amount": 20}
EXPECTED_ROWS = ["turn:0", "turn:0/tool:refund", "turn:1", "run_end"]
WARMUP = 2
CHILD_TIMEOUT = 600.0
#: tether over FastAIAgent untraced, per backend, one run after another and ``--concurrency`` in
#: flight; ahead of every peer in every cell.
TARGET_SEQUENTIAL = {"sqlite": 1.3, "postgres": 1.5}
TARGET_CONCURRENT = {"sqlite": 3.0, "postgres": 4.0}
#: Awaited spawns one after another against spawns at once (runs/s of batches of ``--concurrency``).
TARGET_SPAWNS = 0.8
SPAWNS_AWAITED = "tether awaited spawns"
SPAWNS_AT_ONCE = "tether spawns at once"
RAW_BATCHED = "raw batched"  #: the name of benchmarks._raw_batched's contenders
BASE = "FastAIAgent untraced"

_encode = msgspec.json.Encoder().encode


# -------------------------------------------------------------------------------- the shared work


class ToolCounter:
    """How often the refund tool ran (checked against the number of runs)."""

    calls = 0


def charge(order: str, amount: int) -> dict[str, Any]:
    """The refund tool's body, shared by every contender."""
    ToolCounter.calls += 1
    return {"refunded": True, "order": order, "amount": amount}


def answer(tool_result: str) -> str:
    return f"Done: {tool_result}"


_RESULT = {"refunded": True, "order": "1042", "amount": 20}
_ANSWER = answer(json.dumps(_RESULT))
_TETHER_ANSWER = answer(_encode(_RESULT).decode())  # tether encodes a tool's dict as compact JSON


# -------------------------------------------------------------------------------- contenders


class Contender:
    """One framework on one backend. ``open`` gets a fresh database; ``one`` does one whole run."""

    name = ""
    backend = ""
    tool_calls = 1  #: refund tool calls per run (checked against the count after the timed runs)

    async def open(self, tag: str) -> None:
        raise NotImplementedError

    async def one(self, run_id: str) -> None:
        raise NotImplementedError

    async def verify(self, run_ids: list[str]) -> None:
        """Check the timed runs (outside the timing); raise ``AssertionError`` on a wrong answer."""

    async def batch(self, run_ids: list[str]) -> None:
        """Start and finish a batch of runs (only contenders measured in batches define it)."""
        raise NotImplementedError

    batched = False  #: whether the timed runs go through :meth:`batch`, ``concurrency`` at a time

    async def close(self) -> None:
        raise NotImplementedError


class Timing(NamedTuple):
    """Seconds the timed runs took: wall clock, and CPU of the event-loop thread."""

    wall: float
    loop_cpu: float


async def timed_runs(
    contender: Contender,
    tag: str,
    runs: int,
    concurrency: int,
    *,
    before: Callable[[], object] = lambda: None,
) -> Timing:
    """``runs`` runs with ``concurrency`` in flight on a fresh database, after warm-up; verified.

    ``before`` is called just before the clocks start (after the warm-up runs).
    """
    await contender.open(tag)
    try:
        for i in range(WARMUP):
            await contender.one(f"{tag}-warm{i}")
        ids = [f"{tag}-{i}" for i in range(runs)]
        calls = ToolCounter.calls
        before()
        start, cpu = time.perf_counter(), time.thread_time()
        if contender.batched:
            for first in range(0, runs, concurrency):
                await contender.batch(ids[first : first + concurrency])
        elif concurrency <= 1:
            for run_id in ids:
                await contender.one(run_id)
        else:
            pending = iter(ids)

            async def worker() -> None:
                for run_id in pending:
                    await contender.one(run_id)

            await asyncio.gather(*(worker() for _ in range(min(concurrency, runs))))
        timing = Timing(time.perf_counter() - start, time.thread_time() - cpu)
        ran, expected = ToolCounter.calls - calls, contender.tool_calls * runs
        assert ran == expected, (contender.name, ran, expected)
        await contender.verify(ids)
    finally:
        await contender.close()
    return timing


async def measure(contender: Contender, tag: str, runs: int, concurrency: int) -> float:
    """Runs/s of ``runs`` runs with ``concurrency`` in flight, on a fresh database; verified."""
    return runs / (await timed_runs(contender, tag, runs, concurrency)).wall


async def check_rows(
    name: str, history: Callable[[str], Awaitable[list[Checkpoint]]], run_ids: list[str]
) -> None:
    """Raise ``AssertionError`` unless each run holds exactly the 4 rows of the refund, in order."""
    for run_id in run_ids:
        rows = [row.node_id for row in await history(run_id)]
        if rows != EXPECTED_ROWS:
            raise AssertionError(f"{name} run {run_id} wrote {rows}")


# -- tether


class _CountingBot(RefundBot):
    """tether's refund example, its charge counted as the other contenders' tools are."""

    def charge(self, order: str, amount: int, approver: str | None) -> None:
        charge(order, amount)


def refund_agent() -> Agent:
    """The tether agent of the small refund: tether's refund example (:mod:`tether._refund`)."""
    return _CountingBot().agent()


class Tether(Contender):
    name = "tether"

    def __init__(self, backend: str, workdir: Path) -> None:
        self.backend = backend
        self._workdir = workdir
        self._agent = refund_agent()
        self._stack: Any = None
        self._system: ActorSystem | None = None
        self._store: Any = None

    async def open(self, tag: str) -> None:
        if self.backend == "sqlite":
            self._store = SQLiteStore(self._workdir / f"{tag}.db")
        else:
            await _drop_schema(_TETHER_SCHEMA)
            self._store = PostgresStore(PG_DSN, schema=_TETHER_SCHEMA)
        await self._store.setup()
        self._system = ActorSystem(self._store, runners=[self._agent])
        await self._system.__aenter__()

    async def one(self, run_id: str) -> None:
        assert self._system is not None
        ref = await self._system.spawn(self._agent, PROMPT, execution_id=run_id)
        result = await ref.result()
        if result.status != "completed" or result.output != _TETHER_ANSWER:
            raise AssertionError(f"tether run {run_id}: {result}")

    async def verify(self, run_ids: list[str]) -> None:
        assert self._system is not None
        await check_rows(self.name, self._system.history, run_ids)

    async def close(self) -> None:
        if self._system is not None:
            await self._system.__aexit__(None, None, None)
            self._system = None
        if self._store is not None:
            await self._store.close()
            self._store = None
            if self.backend == "postgres":
                await _drop_schema(_TETHER_SCHEMA)


class TetherSpawns(Tether):
    """tether's runs in batches: started by awaited ``spawn`` calls one after another, or all at once."""

    batched = True

    def __init__(self, backend: str, workdir: Path, *, awaited: bool) -> None:
        super().__init__(backend, workdir)
        self.name = SPAWNS_AWAITED if awaited else SPAWNS_AT_ONCE
        self._awaited = awaited

    async def batch(self, run_ids: list[str]) -> None:
        system = self._system
        assert system is not None
        if self._awaited:
            refs = [await system.spawn(self._agent, PROMPT, execution_id=run_id) for run_id in run_ids]
        else:
            refs = await asyncio.gather(
                *(system.spawn(self._agent, PROMPT, execution_id=run_id) for run_id in run_ids)
            )
        for run_id, result in zip(
            run_ids, await asyncio.gather(*(ref.result() for ref in refs)), strict=True
        ):
            if result.status != "completed" or result.output != _TETHER_ANSWER:
                raise AssertionError(f"tether run {run_id}: {result}")


# -- raw


def raw_steps(run_id: str) -> Iterator[tuple[Any, ...]]:
    """The work of one run without a framework, a step at a time: each of the 4 rows to write, the
    model, tool and model between them (the next row is built once the one before it is taken)."""
    messages: list[dict[str, Any]] = [{"role": "user", "content": PROMPT}]

    def row(seq: int, node_id: str, step_type: str, turn: int, node_input: dict[str, Any]) -> tuple[Any, ...]:
        snapshot = _encode({"messages": messages, "turn": turn})
        return (run_id, seq, node_id, step_type, snapshot.decode(), _encode(node_input).decode())

    yield row(0, "turn:0", "llm_call", 0, {})
    messages.append(
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [{"name": "refund", "arguments": ARGS, "id": "c1"}],
        }
    )
    yield row(1, "turn:0/tool:refund", "tool_call", 0, ARGS)
    result = json.dumps(charge(**ARGS))
    messages.append({"role": "tool", "content": result, "tool_call_id": "c1", "name": "refund"})
    yield row(2, "turn:1", "llm_call", 1, {})
    messages.append({"role": "assistant", "content": answer(result)})
    yield row(3, "run_end", "run_end", 2, {})


_RAW_COLUMNS = "(execution_id, seq, node_id, step_type, state_snapshot, node_input, created_at)"


class RawSQLite(Contender):
    """aiosqlite, WAL, ``synchronous=FULL``; each row one autocommit ``INSERT`` (one hop, one commit)."""

    name = "raw"
    backend = "sqlite"

    def __init__(self, workdir: Path) -> None:
        self._workdir = workdir
        self._conn: aiosqlite.Connection | None = None

    async def open(self, tag: str) -> None:
        conn = await aiosqlite.connect(self._workdir / f"{tag}-raw.db", isolation_level=None)
        await conn.execute("PRAGMA journal_mode = WAL")
        await conn.execute("PRAGMA synchronous = FULL")
        await conn.execute(
            "CREATE TABLE rows (execution_id TEXT NOT NULL, seq INTEGER NOT NULL, node_id TEXT NOT NULL,"
            " step_type TEXT NOT NULL, state_snapshot TEXT NOT NULL, node_input TEXT NOT NULL,"
            " created_at TEXT NOT NULL, PRIMARY KEY (execution_id, seq))"
        )
        self._conn = conn

    async def one(self, run_id: str) -> None:
        assert self._conn is not None
        for values in raw_steps(run_id):
            await self._conn.execute(
                f"INSERT INTO rows {_RAW_COLUMNS} VALUES (?, ?, ?, ?, ?, ?, ?)",
                (*values, time.strftime("%Y-%m-%dT%H:%M:%S")),
            )

    async def verify(self, run_ids: list[str]) -> None:
        assert self._conn is not None
        async with self._conn.execute("SELECT count(*) FROM rows") as cursor:
            found = await cursor.fetchone()
        assert found is not None and found[0] == 4 * (len(run_ids) + WARMUP), found

    async def close(self) -> None:
        if self._conn is not None:
            await self._conn.close()
            self._conn = None


class RawPostgres(Contender):
    """asyncpg, ``synchronous_commit=on``; each row one autocommit ``INSERT`` (one round trip)."""

    name = "raw"
    backend = "postgres"
    SCHEMA = f"bench_step_raw_{os.getpid()}"  # per process: runs may overlap

    def __init__(self, concurrency: int) -> None:
        self._concurrency = concurrency
        self._pool: asyncpg.Pool | None = None

    async def open(self, tag: str) -> None:
        await _drop_schema(self.SCHEMA)
        conn = await asyncpg.connect(PG_DSN)
        try:
            await conn.execute(f"CREATE SCHEMA {self.SCHEMA}")
            await conn.execute(
                f"CREATE TABLE {self.SCHEMA}.rows (execution_id TEXT NOT NULL, seq INTEGER NOT NULL,"
                " node_id TEXT NOT NULL, step_type TEXT NOT NULL, state_snapshot JSON NOT NULL,"
                " node_input JSON NOT NULL, created_at TIMESTAMPTZ NOT NULL,"
                " PRIMARY KEY (execution_id, seq))"
            )
        finally:
            await conn.close()
        size = 1 if self._concurrency <= 1 else 20
        self._pool = await asyncpg.create_pool(
            PG_DSN,
            min_size=size,
            max_size=size,
            reset=_no_reset,
            server_settings={"synchronous_commit": "on"},
        )

    async def one(self, run_id: str) -> None:
        assert self._pool is not None
        sql = f"INSERT INTO {self.SCHEMA}.rows {_RAW_COLUMNS} VALUES ($1, $2, $3, $4, $5, $6, now())"
        async with self._pool.acquire() as conn:
            for values in raw_steps(run_id):
                await conn.execute(sql, *values)

    async def verify(self, run_ids: list[str]) -> None:
        assert self._pool is not None
        found = await self._pool.fetchval(f"SELECT count(*) FROM {self.SCHEMA}.rows")
        assert found == 4 * (len(run_ids) + WARMUP), found

    async def close(self) -> None:
        if self._pool is not None:
            await self._pool.close()
            self._pool = None
            await _drop_schema(self.SCHEMA)


async def _no_reset(conn: asyncpg.Connection) -> None:
    """No ``RESET ALL`` on release (the raw side keeps no session state), as the store does."""


async def _drop_schema(schema: str) -> None:
    conn = await asyncpg.connect(PG_DSN)
    try:
        await conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
    finally:
        await conn.close()


# -------------------------------------------------------------------------------- the run


def contenders(backend: str, workdir: Path, concurrency: int, peers: bool) -> list[Contender]:
    """Every contender of ``backend`` (the peers only with ``peers``; they must be installed)."""
    found: list[Contender] = [
        RawSQLite(workdir) if backend == "sqlite" else RawPostgres(concurrency),
        Tether(backend, workdir),
    ]
    if concurrency > 1:
        from benchmarks import _raw_batched

        found += [TetherSpawns(backend, workdir, awaited=True), TetherSpawns(backend, workdir, awaited=False)]
        found.append(
            _raw_batched.RawBatchedSQLite(workdir)
            if backend == "sqlite"
            else _raw_batched.RawBatchedPostgres(concurrency)
        )
    if peers:
        from benchmarks import _peers

        found += _peers.contenders(backend, workdir, _ANSWER)
    return found


def contender(backend: str, name: str, workdir: Path, concurrency: int) -> Contender:
    """The one contender called ``name`` on ``backend`` (a peer needs the ``bench`` extra)."""
    ours = ("raw", RAW_BATCHED, "tether", SPAWNS_AWAITED, SPAWNS_AT_ONCE)
    for found in contenders(backend, workdir, concurrency, peers=name not in ours):
        if found.name == name:
            return found
    raise ValueError(f"no contender {name!r} on {backend!r}")


async def measure_in_child(backend: str, name: str, mode: int, tag: str, runs: int, workdir: Path) -> float:
    """Runs/s of one measurement, taken in a fresh child process of this module.

    Every measurement gets a process of its own, so no contender runs beside what another one left
    behind: a peer's background threads, its imported modules, its garbage. The child prints its
    rate as the last line of its output.
    """
    last = await measure_child(
        "benchmarks.step_path",
        [backend, name, mode, tag, runs, str(workdir)],
        timeout=CHILD_TIMEOUT,
        what=f"{backend}/{name}/{mode}",
    )
    return float(last.split()[-1])


def _measure_here(spec: str) -> None:
    """The child's side of :func:`measure_in_child`: measure once and print the rate."""
    backend, name, mode, tag, runs, workdir = json.loads(spec)
    rate = asyncio.run(measure(contender(backend, name, Path(workdir), mode), tag, runs, mode))
    print(rate)


async def run(
    backends: list[str], runs: int, concurrency: int, rounds: int, peers: bool
) -> dict[tuple[str, str, int], float]:
    """Median runs/s by ``(backend, contender, concurrency)`` over interleaved rounds."""
    with tempfile.TemporaryDirectory(prefix="tether-step-") as tmp:
        workdir = Path(tmp)
        measures: dict[str, Callable[[], Awaitable[float]]] = {}
        keys: dict[str, tuple[str, str, int]] = {}
        counter = iter(range(1_000_000))
        for backend in backends:
            for mode in (1, concurrency):
                for found in contenders(backend, workdir, mode, peers):

                    async def job(b: str = backend, n: str = found.name, m: int = mode) -> float:
                        rate = await measure_in_child(b, n, m, f"m{next(counter)}", runs, workdir)
                        print(f"  {b}/{n}/{m}: {rate:,.0f} runs/s", file=sys.stderr, flush=True)
                        return rate

                    name = f"{backend}/{found.name}/{mode}"
                    measures[name] = job
                    keys[name] = (backend, found.name, mode)
        samples = await interleaved(rounds, measures)
    return {keys[name]: median(values) for name, values in samples.items()}


def report(
    results: dict[tuple[str, str, int], float], backends: list[str], concurrency: int, rounds: int
) -> bool:
    """Print one table per backend; return whether every target holds (True when no peer ran)."""
    ok = True
    labels = {"sqlite": "SQLite (WAL, synchronous=FULL)", "postgres": "PostgreSQL (synchronous_commit=on)"}
    for backend in backends:
        names = [name for (b, name, mode) in results if b == backend and mode == 1]
        base = {mode: results.get((backend, BASE, mode)) for mode in (1, concurrency)}
        raw = {mode: results[(backend, "raw", mode)] for mode in (1, concurrency)}
        print(f"\nstep path, {labels[backend]}: runs/s, medians of {rounds} interleaved rounds")
        header = f"{'contender':<24}" + "".join(
            f"{label:>14}{'x raw':>8}{'x FastAIAgent':>15}"
            for label in ("sequential", f"{concurrency} concurrent")
        )
        print(header)
        print("-" * len(header))
        for name in names:
            line = f"{name:<24}"
            for mode in (1, concurrency):
                rate = results[(backend, name, mode)]
                versus = f"{rate / base[mode]:.2f}x" if base[mode] else "-"
                line += f"{rate:>14,.0f}{rate / raw[mode]:>7.2f}x{versus:>15}"
            print(line)
        awaited, at_once = (
            results.get((backend, SPAWNS_AWAITED, concurrency)),
            results.get((backend, SPAWNS_AT_ONCE, concurrency)),
        )
        if awaited is not None and at_once is not None:
            ratio = awaited / at_once
            verdict = "PASS" if ratio >= TARGET_SPAWNS else "MISS"
            print(
                f"spawns, {concurrency} runs a batch: {concurrency} awaited spawn calls then awaited "
                f"{awaited:,.0f} runs/s, {concurrency} spawned at once then awaited {at_once:,.0f} runs/s: "
                f"{ratio:.2f}x (>= {TARGET_SPAWNS:.1f}x): {verdict}"
            )
        batched = results.get((backend, RAW_BATCHED, concurrency))
        if batched is not None:
            from benchmarks._raw_batched import print_target

            ok = print_target(results[(backend, "tether", concurrency)], batched, concurrency) and ok
        if base[1] is None:
            continue
        for mode, target in ((1, TARGET_SEQUENTIAL[backend]), (concurrency, TARGET_CONCURRENT[backend])):
            ours = results[(backend, "tether", mode)]
            ratio = ours / base[mode]  # type: ignore[operator]
            beaten = [n for n in names if n not in ("tether", "raw") and results[(backend, n, mode)] >= ours]
            verdict = "PASS" if ratio >= target and not beaten else "MISS"
            ok = ok and verdict == "PASS"
            what = "sequential" if mode == 1 else f"{concurrency} concurrent"
            behind = f"; behind {', '.join(beaten)}" if beaten else ""
            print(
                f"target {backend} {what}: tether {ratio:.2f}x {BASE} (>= {target:.1f}x){behind}: {verdict}"
            )
    return ok


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=300, help="runs per measurement")
    parser.add_argument(
        "--concurrency", type=int, default=64, help="runs in flight for the concurrent column"
    )
    parser.add_argument(
        "--rounds", type=int, default=None, help="interleaved rounds (median over them; 5, --tiny 1)"
    )
    parser.add_argument("--backend", choices=("sqlite", "postgres", "both"), default="both")
    parser.add_argument(
        "--peers", action="store_true", help="also FastAIAgent, LangGraph and DBOS (.[bench])"
    )
    parser.add_argument("--tiny", action="store_true", help="a fast smoke size for CI")
    parser.add_argument("--measure", help=argparse.SUPPRESS)  # the child of measure_in_child
    args = parser.parse_args(argv)
    if args.measure:
        _measure_here(args.measure)
        return
    runs, concurrency = (10, 4) if args.tiny else (args.runs, args.concurrency)
    rounds = args.rounds if args.rounds is not None else 1 if args.tiny else 5
    backends = ["sqlite", "postgres"] if args.backend == "both" else [args.backend]
    results = asyncio.run(run(backends, runs, concurrency, rounds, args.peers))
    print(f"{runs} runs per measurement; small refund = model, refund tool, model, answer")
    report(results, backends, concurrency, rounds)
    print("correctness: ok (every run completed with the answer, the tool ran once per run, 4 rows per run)")


if __name__ == "__main__":
    # Run as ``benchmarks.step_path`` (not ``__main__``) so the peers share this module's classes.
    import benchmarks.step_path

    benchmarks.step_path.main()
