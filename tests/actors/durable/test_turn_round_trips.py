"""A model turn pays nothing for steering when no message waits: the check is folded into the turn
row's own write, on both stores.

Round trips are counted as the store makes them while a run goes from its spawn to its result: on
PostgreSQL every statement sent to the server (directly or through a prepared statement); on
SQLite every transaction (a thread hop each: the writer's ``BEGIN IMMEDIATE``, a read's ``BEGIN``)
and the writer's statements on the inbox. A run of more turns costs exactly its extra rows: one
round trip per row, and on SQLite one probe of the inbox per model turn, inside that turn row's
transaction. A steering check of its own (a read of the inbox before each turn, or a probe in a
transaction of its own) would add one per turn.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import NamedTuple

import anyio
import pytest
from conftest import Backend, Counter

from actors import ActorSystem, Agent, tool
from actors.models import FunctionModel, Message, ModelReply, ToolCall
from benchmarks.lowlevel import StatementCounter, counted_statements
from stores import LLM_CALL, Store

pytestmark = pytest.mark.anyio


class Cost(NamedTuple):
    """What one run cost the store, and what it wrote."""

    round_trips: int
    inbox_probes: int  #: SQLite: the writer's statements on the inbox (PostgreSQL: 0, inside its statements)
    rows: int
    turns: int


def _agent(turns: int) -> Agent:
    """A run of ``turns`` model turns that call a tool, then one that answers."""

    @tool
    async def step(i: int) -> str:
        """One step."""
        return f"step {i}"

    def model(messages: list[Message]) -> str | ModelReply:
        done = sum(1 for m in messages if m.role == "tool")
        return "done" if done >= turns else ModelReply(tool_calls=[ToolCall("step", {"i": done})])

    return Agent(f"turns{turns}", FunctionModel(model), tools=[step])


class Meter:
    """Counts the round trips of a store of ``backend`` (see the module) while ``counting``."""

    def __init__(self, backend: Backend, monkeypatch: pytest.MonkeyPatch) -> None:
        self.backend = backend
        self.sqlite = StatementCounter()
        self.postgres = Counter(backend.open(), monkeypatch) if backend.name == "postgres" else None

    @asynccontextmanager
    async def opened(self) -> AsyncIterator[Store]:
        with counted_statements(self.sqlite):  # SQLite's connections are traced from their opening
            async with self.backend.open() as store:
                yield store

    def start(self) -> None:
        self.sqlite.counting = True
        self.sqlite.texts.clear()
        if self.postgres is not None:
            self.postgres.calls.clear()

    def stop(self) -> tuple[int, int]:
        self.sqlite.counting = False
        if self.postgres is not None:
            return len(self.postgres.calls), 0
        texts = [" ".join(text.split()) for text in self.sqlite.texts]
        transactions = sum(1 for text in texts if text.startswith("BEGIN"))
        probes = sum(1 for text in texts if " signals " in f" {text} ".replace("(", " "))
        return transactions, probes


async def _run(system: ActorSystem, store: Store, meter: Meter, turns: int) -> Cost:
    agent = _agent(turns)
    meter.start()
    result = await (await system.spawn(agent, "go")).result()
    with anyio.fail_after(10):  # the run's actor is gone: nothing of the run is left to count
        while system.runtime.live_actors:  # noqa: ASYNC110
            await anyio.sleep(0.01)
    round_trips, probes = meter.stop()
    assert result.status == "completed" and result.output == "done", result
    rows = await store.history(result.execution_id)
    model_turns = sum(1 for row in rows if row.step_type == LLM_CALL)
    return Cost(round_trips, probes, len(rows), model_turns)


async def test_a_turn_costs_one_round_trip_per_row_and_no_steering_check_of_its_own(
    store_backend: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    meter = Meter(store_backend, monkeypatch)
    async with meter.opened() as store, ActorSystem(store) as system:
        await _run(system, store, meter, 1)  # warm: statements prepared, the writer taken
        short = await _run(system, store, meter, 2)
        long = await _run(system, store, meter, 8)
    more_rows, more_turns = long.rows - short.rows, long.turns - short.turns
    assert (more_rows, more_turns) == (12, 6)  # a turn: its model row and its tool's row
    assert long.round_trips - short.round_trips == more_rows, (short, long)
    if store_backend.name == "sqlite":
        assert long.inbox_probes - short.inbox_probes == more_turns, (short, long)
