"""How a run stands is read in more than one read (its newest row, then who owns it). A run that a
sweep takes and drives to its end between those reads is never reported ``orphaned``, and
``RunRef.result()`` waits for it instead of raising ``RunNotFound``.

The race is made certain: the status read of the run's newest row is held, the sweep takes the run
and finishes it, and only then does the read go on (its row is by then stale, and the run's
ownership row was deleted with its ``run_end``). Both backends.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import pytest
from conftest import Backend

from actors import ActorSystem, Agent
from actors.models import FunctionModel, Message
from stores import Store

pytestmark = pytest.mark.anyio

LIMIT = 30.0


def _agent() -> Agent:
    def model(messages: list[Message]) -> str:
        return f"done: {messages[-1].content}"

    return Agent("queued", FunctionModel(model))


class _HeldHead:
    """Holds the first read of one run's newest row (``Store.heads`` for that run) until
    :attr:`go` is set: the run moves on while the reader holds a stale row."""

    def __init__(self, store: Store, execution_id: str) -> None:
        self._heads: Callable[..., Awaitable[Any]] = store.heads
        self._execution_id = execution_id
        self.read = anyio.Event()
        self.go = anyio.Event()

    async def heads(self, **options: Any) -> Any:
        found = await self._heads(**options)
        if options.get("execution_id") == self._execution_id and not self.read.is_set():
            self.read.set()
            await self.go.wait()
        return found


async def _read_while_a_sweep_finishes_the_run(
    store: Store, system: ActorSystem, read: Callable[[], Awaitable[Any]]
) -> Any:
    """``read()`` (which reads how the run ``r`` stands), its read of the run's newest row held
    while a sweep takes the run and drives it to its end; what ``read()`` returned."""
    held = _HeldHead(store, "r")
    store.heads = held.heads  # type: ignore[method-assign]
    found: list[Any] = []

    async def reader() -> None:
        found.append(await read())

    async with anyio.create_task_group() as tg:
        tg.start_soon(reader)
        await held.read.wait()  # the reader holds the run's first row, unfinished
        assert await system.sweep(limit=1) == 1  # taken and driven to its end meanwhile
        assert (await system.history("r"))[-1].step_type == "run_end"
        held.go.set()
    return found[0]


async def test_a_run_a_sweep_finishes_between_the_reads_of_its_status_is_not_orphaned(
    store_backend: Backend,
) -> None:
    agent = _agent()
    async with store_backend.open() as store, ActorSystem(store, runners=[agent]) as system:
        with anyio.fail_after(LIMIT):
            await system.enqueue(agent, "go", execution_id="r")
            assert (await system.status("r")).status == "queued"
            summary = await _read_while_a_sweep_finishes_the_run(store, system, lambda: system.status("r"))
            assert summary.status == "completed", summary
            assert summary.output == "done: go"


async def test_result_waits_for_a_run_a_sweep_finishes_between_its_reads(store_backend: Backend) -> None:
    agent = _agent()
    async with store_backend.open() as store, ActorSystem(store, runners=[agent]) as system:
        with anyio.fail_after(LIMIT):
            await system.enqueue(agent, "go", execution_id="r")
            result = await _read_while_a_sweep_finishes_the_run(
                store, system, lambda: system.ref("r").result(timeout=LIMIT)
            )
            assert result.status == "completed", result
            assert result.output == "done: go"
