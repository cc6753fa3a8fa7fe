"""Topologies: a Supervisor with one Agent worker beside the same work done by one agent, per step
and per delegation.

    python -m benchmarks.topologies [--runs 200] [--rounds 5] [--backend sqlite|postgres] [--tiny]

The work: an offline deterministic model decides, a ``refund(order, amount)`` tool runs once, and
the run answers. Three runners do it, one run after another, each measurement on a fresh database
(SQLite: WAL, ``synchronous=FULL``; PostgreSQL: a fresh schema), interleaved over ``--rounds`` rounds:

* agent: one ``Agent``: model call (asks for the tool), the tool, model call (answers): 3 step rows
  and ``run_end``;
* supervisor: ``Supervisor("desk", manager, {"clerk": worker})``: the manager's model call (asks to
  delegate), its ``delegate_to_clerk`` tool row, then the worker as a child actor (model call, the
  tool, model call), then the manager's model call that answers with the worker's result: 3 model
  calls of the manager and the worker's own, 6 step rows and ``run_end``;
* flat: the supervisor's work without the delegation, in one ``Agent``: the model asks for
  ``delegate_to_clerk`` (an async tool that hands the task back), then for the refund, then answers:
  the same tool rows and all but one of the model calls (the worker's answer, which the manager
  reads, is the delegation's), 5 step rows and ``run_end``.

It prints runs/s of agent and supervisor, the time per step (a run's time divided by its rows,
``run_end`` included) and their ratio; the target is a topology step at most 1.5x an agent step.
Then what one delegation costs, supervisor minus flat per run: rows, write transactions (SQLite's
``SQLiteStore.transactions``; not counted on PostgreSQL), wall time and event-loop CPU
(``time.thread_time`` of the loop thread around the timed runs); the target is at most one more
row's commit plus 0.1 ms of loop CPU: at most one more row and one more transaction, and loop CPU
at most a flat row's (flat's loop CPU per run over its rows) plus 0.1 ms. Every run is verified
afterwards (its answer, the tool once per run, the rows in order). Medians of the rounds.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import NamedTuple

import anyio
import asyncpg

from actors import ActorSystem, Agent, Supervisor, tool
from actors.models import FunctionModel, Message, ModelReply, ToolCall
from benchmarks._common import PG_DSN, interleaved, median
from stores import PostgresStore, SQLiteStore, Store

TARGET = 1.5
#: Loop CPU a delegation may cost beyond one flat row's, seconds.
TARGET_DELEGATION_CPU = 0.1e-3
WARMUP = 2
ANSWER = "refunded 20 on 1042"
AGENT_ROWS = ["turn:0", "turn:0/tool:refund", "turn:1", "run_end"]
FLAT_ROWS = ["turn:0", "turn:0/tool:delegate_to_clerk", "turn:1", "turn:1/tool:refund", "turn:2", "run_end"]
SUPERVISOR_ROWS = [
    ("supervisor:desk", "turn:0"),
    ("supervisor:desk/tool:delegate_to_clerk", "turn:0/tool:delegate_to_clerk"),
    ("supervisor:desk/worker:clerk", "turn:0"),
    ("supervisor:desk/worker:clerk/tool:refund", "turn:0/tool:refund"),
    ("supervisor:desk/worker:clerk", "turn:1"),
    ("supervisor:desk", "turn:1"),
    ("supervisor:desk", "run_end"),
]


class Count:
    """Tool runs, checked against the number of runs."""

    refunds = 0


@tool
def refund(order: str, amount: int) -> str:
    """Refund ``amount`` on ``order``."""
    Count.refunds += 1
    return f"refunded {amount} on {order}"


def worker_model(messages: list[Message]) -> str | ModelReply:
    if messages[-1].role == "tool":
        return messages[-1].content
    return ModelReply(tool_calls=[ToolCall("refund", {"order": "1042", "amount": 20})])


def manager_model(messages: list[Message]) -> str | ModelReply:
    if messages[-1].role == "tool":
        return messages[-1].content
    return ModelReply(tool_calls=[ToolCall("delegate_to_clerk", {"task": "refund 20 on order 1042"})])


@tool
async def delegate_to_clerk(task: str) -> str:
    """Hand ``task`` to the clerk (in one agent: the task comes back to the same conversation).

    Async, as the supervisor's own delegate tool runs on the event loop (a sync tool would add a
    worker-thread hop the supervisor does not make)."""
    return task


def flat_model(messages: list[Message]) -> str | ModelReply:
    done = sum(1 for m in messages if m.role == "tool")
    if done == 0:
        return ModelReply(tool_calls=[ToolCall("delegate_to_clerk", {"task": "refund 20 on order 1042"})])
    if done == 1:
        return ModelReply(tool_calls=[ToolCall("refund", {"order": "1042", "amount": 20})])
    return messages[-1].content


def agent() -> Agent:
    return Agent("clerk", FunctionModel(worker_model), tools=[refund])


def flat() -> Agent:
    return Agent("desk", FunctionModel(flat_model), tools=[delegate_to_clerk, refund])


def supervisor() -> Supervisor:
    manager = Agent("manager", FunctionModel(manager_model))
    return Supervisor("desk", manager, {"clerk": agent()})


def open_store(backend: str, workdir: Path, tag: str) -> Store:
    if backend == "sqlite":
        return SQLiteStore(workdir / f"{tag}.db")
    return PostgresStore(PG_DSN, schema=f"bench_topo_{os.getpid()}_{tag}")


async def drop(store: Store, backend: str) -> None:
    if backend == "postgres" and isinstance(store, PostgresStore):
        conn = await asyncpg.connect(PG_DSN)
        try:
            await conn.execute(f'DROP SCHEMA IF EXISTS "{store.schema}" CASCADE')
        finally:
            await conn.close()


class PerRun(NamedTuple):
    """One measurement, per run: wall seconds, loop-thread CPU seconds, write transactions."""

    wall: float
    cpu: float
    commits: float | None  #: ``None`` where the store does not count them


RUNNERS: dict[str, tuple[Callable[[], Agent | Supervisor], list[str]]] = {
    "agent": (agent, AGENT_ROWS),
    "supervisor": (supervisor, [node for _, node in SUPERVISOR_ROWS]),
    "flat": (flat, FLAT_ROWS),
}


async def measure(name: str, backend: str, runs: int, workdir: Path, tag: str) -> PerRun:
    """``runs`` runs of ``name`` one after another (after warm-up), per run; verified."""
    runner = RUNNERS[name][0]()
    store = open_store(backend, workdir, tag)
    try:
        async with store, ActorSystem(store) as system:

            async def one(run_id: str) -> None:
                result = await (await system.spawn(runner, "refund order 1042", execution_id=run_id)).result()
                if result.output != ANSWER:
                    raise AssertionError(f"{name}: run {run_id} answered {result!r}")

            for i in range(WARMUP):
                await one(f"warm-{i}")
            before = Count.refunds
            commits = getattr(store, "transactions", None)
            start, cpu = time.perf_counter(), time.thread_time()
            for i in range(runs):
                await one(f"run-{i}")
            elapsed, cpu = time.perf_counter() - start, time.thread_time() - cpu
            if commits is not None:
                commits = (getattr(store, "transactions", 0) - commits) / runs
            if Count.refunds - before != runs:
                raise AssertionError(f"{name}: the tool ran {Count.refunds - before} times in {runs} runs")
            for run_id in ("run-0", f"run-{runs - 1}"):
                rows = await system.history(run_id)
                if name == "supervisor":
                    assert [(r.agent_path, r.node_id) for r in rows] == SUPERVISOR_ROWS, rows
                else:
                    assert [r.node_id for r in rows] == RUNNERS[name][1], rows
    finally:
        await drop(store, backend)
    return PerRun(elapsed / runs, cpu / runs, commits)


async def run(runs: int, rounds: int, backend: str) -> bool:
    counter = iter(range(1_000_000))
    with tempfile.TemporaryDirectory(prefix="bench-topo-") as tmp:
        workdir = Path(tmp)

        taken: dict[str, list[PerRun]] = {name: [] for name in RUNNERS}

        def measurement(name: str) -> Callable[[], Awaitable[float]]:
            async def go() -> float:
                found = await measure(name, backend, runs, workdir, f"{name}{next(counter)}")
                taken[name].append(found)
                return found.wall

            return go

        samples = await interleaved(rounds, {name: measurement(name) for name in RUNNERS})
    agent_run = median(samples["agent"])
    topo_run = median(samples["supervisor"])
    agent_step = agent_run / len(AGENT_ROWS)
    topo_step = topo_run / len(SUPERVISOR_ROWS)
    ratio = topo_step / agent_step
    print(f"topologies, {backend}: {runs} runs one after another per measurement, medians of {rounds} rounds")
    header = f"{'runner':<12}{'runs/s':>10}{'rows/run':>10}{'ms/run':>10}{'ms/step':>10}{'x agent/step':>14}"
    print(header)
    print("-" * len(header))
    for label, per_run, rows in (("agent", agent_run, AGENT_ROWS), ("supervisor", topo_run, SUPERVISOR_ROWS)):
        step = per_run / len(rows)
        print(
            f"{label:<12}{1 / per_run:>10,.0f}{len(rows):>10}{per_run * 1e3:>10.3f}{step * 1e3:>10.3f}"
            f"{step / agent_step:>13.2f}x"
        )
    passed = ratio <= TARGET
    print(
        f"time per step, supervisor / agent: {ratio:.2f}x (target <= {TARGET:.2f}x): {'PASS' if passed else 'MISS'}"
    )
    passed = report_delegation(taken, backend) and passed
    print("correctness: ok (every run answered, the tool ran once per run, the rows in order)")
    return passed


def report_delegation(taken: dict[str, list[PerRun]], backend: str) -> bool:
    """Print what one delegation costs (supervisor minus flat, per run) against its target."""
    print(f"\ndelegation, {backend}: supervisor minus flat (the same work in one agent), per run, medians")
    header = f"{'runner':<12}{'rows/run':>10}{'commits/run':>13}{'ms/run':>10}{'loop CPU ms/run':>17}"
    print(header)
    print("-" * len(header))
    found: dict[str, tuple[int, float | None, float, float]] = {}
    for name in ("flat", "supervisor"):
        commits = [s.commits for s in taken[name] if s.commits is not None]
        found[name] = (
            len(RUNNERS[name][1]),
            median(commits) if commits else None,
            median([s.wall for s in taken[name]]),
            median([s.cpu for s in taken[name]]),
        )
        rows, per_run, wall, cpu = found[name]
        shown = f"{per_run:.2f}" if per_run is not None else "-"
        print(f"{name:<12}{rows:>10}{shown:>13}{wall * 1e3:>10.3f}{cpu * 1e3:>17.3f}")
    (flat_rows, flat_commits, flat_wall, flat_cpu), (rows, commits, wall, cpu) = (
        found["flat"],
        found["supervisor"],
    )
    extra_rows, extra_cpu = rows - flat_rows, cpu - flat_cpu
    row_cpu = flat_cpu / flat_rows
    extra_commits = commits - flat_commits if commits is not None and flat_commits is not None else None
    shown = f"{extra_commits:+.2f} commits" if extra_commits is not None else "commits not counted"
    print(
        f"per delegation: {extra_rows:+d} row, {shown}, {(wall - flat_wall) * 1e3:+.3f} ms wall, "
        f"{extra_cpu * 1e3:+.3f} ms loop CPU (a flat row: {row_cpu * 1e3:.3f} ms loop CPU)"
    )
    passed = (
        extra_rows <= 1
        and (extra_commits is None or extra_commits <= 1.0)
        and extra_cpu <= row_cpu + TARGET_DELEGATION_CPU
    )
    print(
        f"target delegation: at most one more row's commit plus {TARGET_DELEGATION_CPU * 1e3:.1f} ms of loop CPU "
        f"(rows <= +1, commits <= +1, loop CPU <= {(row_cpu + TARGET_DELEGATION_CPU) * 1e3:.3f} ms): "
        f"{'PASS' if passed else 'MISS'}"
    )
    return passed


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--backend", choices=["sqlite", "postgres"], default="sqlite")
    parser.add_argument("--tiny", action="store_true", help="a fast smoke size for CI")
    args = parser.parse_args(argv)
    runs, rounds = (10, 3) if args.tiny else (args.runs, args.rounds)
    anyio.run(run, runs, rounds, args.backend)


if __name__ == "__main__":
    main()
