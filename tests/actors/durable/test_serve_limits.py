"""``serve`` keeps its bounds: at most ``concurrency`` runs at once, work woken by the store's notices
on PostgreSQL, a grace of 0 accepted, and the queue's first row as the run starts it.

Runs are enqueued and served in one process; the tools count how many of them run at once.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import anyio
import pytest
from conftest import Backend, PgSchema

from actors import ActorSystem, Agent, Swarm, tool
from actors.models import FunctionModel, Message, ModelReply, ToolCall

pytestmark = pytest.mark.anyio

LIMIT = 60.0


class Gauge:
    """How many tool calls run at once, and the most there ever were."""

    def __init__(self) -> None:
        self.now = 0
        self.most = 0
        self.done = 0


def counted_agent(gauge: Gauge, seconds: float = 0.3) -> Agent:
    @tool
    async def work(item: str) -> str:
        """Work on an item for a moment."""
        gauge.now += 1
        gauge.most = max(gauge.most, gauge.now)
        try:  # staggered ends ("o0", "o1", ...): a slot frees while the others still run
            await anyio.sleep(seconds * (1 + int(item[1:]) % 3) / 2 if item[1:].isdigit() else seconds)
        finally:
            gauge.now -= 1
        gauge.done += 1
        return f"worked on {item}"

    def model(messages: list[Message]) -> str | ModelReply:
        if messages[-1].role == "tool":
            return "done"
        return ModelReply(tool_calls=[ToolCall("work", {"item": str(messages[-1].content)})])

    return Agent("served", FunctionModel(model), tools=[work])


async def until(check: Callable[[], bool], timeout: float) -> None:
    with anyio.fail_after(timeout):
        while not check():  # noqa: ASYNC110 (a counter the served runs move)
            await anyio.sleep(0.01)


@pytest.mark.parametrize("concurrency", [1, 3])
async def test_serve_runs_at_most_concurrency_runs_at_once(store_backend: Backend, concurrency: int) -> None:
    gauge = Gauge()
    agent = counted_agent(gauge)
    with anyio.fail_after(LIMIT):
        async with store_backend.open() as store, ActorSystem(store, runners=[agent]) as system:
            ids = [await system.enqueue(agent, f"o{i}") for i in range(7)]
            first = await system.history(ids[0])
            assert [(r.node_id, r.step_index, r.state_snapshot["turn"]) for r in first] == [("turn:0", 0, 0)]
            async with anyio.create_task_group() as group:
                group.start_soon(lambda: system.serve(concurrency=concurrency, poll=0.05, shutdown_grace=0))
                for eid in ids:
                    assert (await system.ref(eid).result(timeout=LIMIT / 2)).status == "completed"
                group.cancel_scope.cancel()
    assert gauge.most == concurrency


async def test_serve_is_woken_by_new_work_on_postgres(pg_schema: PgSchema) -> None:
    """With a poll of a minute, a run enqueued by another system is taken at once: the store's
    notice wakes the serving loop (SQLite has no notices: serve polls there)."""
    store_backend = Backend("postgres", pg_schema.dsn, pg_schema.schema)
    gauge = Gauge()
    agent = counted_agent(gauge, seconds=0.0)
    with anyio.fail_after(LIMIT):
        async with store_backend.open() as store, ActorSystem(store, runners=[agent]) as system:
            async with anyio.create_task_group() as group:
                group.start_soon(lambda: system.serve(concurrency=2, poll=60.0))
                await anyio.sleep(1.0)  # serve has looked once and waits for its poll or a notice
                async with store_backend.open() as other, ActorSystem(other) as producer:
                    enqueued = time.monotonic()
                    await producer.enqueue(agent, "late")
                await until(lambda: gauge.done == 1, 10)
                taken = time.monotonic() - enqueued
                group.cancel_scope.cancel()
    assert taken < 5.0, f"the new run waited {taken:.2f} s"


async def test_serve_and_enqueue_refusals_name_what_was_wrong(store_backend: Backend) -> None:
    agent = counted_agent(Gauge())
    swarm = Swarm("pair", [agent, Agent("other", FunctionModel(lambda m: "x"))])
    async with store_backend.open() as store, ActorSystem(store, runners=[agent]) as system:
        with anyio.fail_after(5):  # a refusal is at once: a serve that starts instead must not hang here
            with pytest.raises(TypeError, match="enqueue takes an Agent runner, not Swarm; spawn it instead"):
                await system.enqueue(swarm, "go")
            with pytest.raises(ValueError, match="shutdown_grace must be a number of seconds >= 0, not -1"):
                await system.serve(shutdown_grace=-1)
            with pytest.raises(ValueError, match="concurrency must be an int of at least 1, not 0"):
                await system.serve(concurrency=0)
            with pytest.raises(ValueError, match="limit must be an int of at least 1, not 0"):
                await system.sweep(limit=0)
        await system.enqueue(agent, "one")
        await system.enqueue(agent, "two")
        with anyio.fail_after(LIMIT):
            assert await system.sweep(limit=1) == 1  # the smallest page takes one run
            assert await system.sweep(limit=1) == 1
            assert await system.sweep(limit=1) == 0
