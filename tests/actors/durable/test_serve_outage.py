"""``serve`` through a store that fails: it says so once, looks again with a growing backoff, says
when the store is back, and then serves the queue; a store that never failed is never said to be back.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path

import anyio
import pytest

from actors import ActorSystem, Agent, tool
from actors.models import FunctionModel, Message, ModelReply, ToolCall
from stores import SQLiteStore, StoreUnavailable

pytestmark = pytest.mark.anyio

LIMIT = 30.0


class DownStore(SQLiteStore):
    """A SQLite store whose list of orphans fails while ``down``, counting the looks."""

    down = False
    looks = 0

    async def orphans(
        self, limit: int = 100, *, full: Sequence[str] = (), full_keys: Sequence[tuple[str, str]] = ()
    ) -> list[str]:
        if self.down:
            self.looks += 1
            raise StoreUnavailable("the store is down")
        return await super().orphans(limit, full=full, full_keys=full_keys)


def _agent() -> Agent:
    def model(messages: list[Message]) -> str:
        return f"done: {messages[-1].content}"

    return Agent("served", FunctionModel(model))


def _said(caplog: pytest.LogCaptureFixture, text: str) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == "tether" and r.getMessage().startswith(f"event='{text}")
    ]


async def test_serve_rides_out_a_failing_store_and_says_so_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="tether")
    agent = _agent()
    async with DownStore(tmp_path / "t.db") as store, ActorSystem(store, runners=[agent]) as system:
        await system.enqueue(agent, "o1", execution_id="q1")
        store.down = True
        async with anyio.create_task_group() as tg:
            tg.start_soon(lambda: system.serve(poll=0.05))
            await anyio.sleep(1.0)
            looks = store.looks
            store.down = False
            done = await system.ref("q1").result(timeout=LIMIT)
            assert done.output == "done: o1"
            tg.cancel_scope.cancel()
    # Backoff 0.1, 0.2, 0.4, 0.8 s: four looks in the first second (not one every 0.1 s).
    assert 2 <= looks <= 6, looks
    unusable = _said(caplog, "store unusable: serve looks again")
    assert len(unusable) == 1, unusable
    assert "StoreUnavailable('the store is down')" in unusable[0], unusable
    assert len(_said(caplog, "store usable again: serve goes on")) == 1


async def test_serve_of_a_store_that_never_failed_says_nothing_of_it(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="tether")
    agent = _agent()
    async with SQLiteStore(tmp_path / "t.db") as store, ActorSystem(store, runners=[agent]) as system:
        await system.enqueue(agent, "o1", execution_id="q1")
        async with anyio.create_task_group() as tg:
            tg.start_soon(lambda: system.serve(poll=0.05))
            done = await system.ref("q1").result(timeout=LIMIT)
            assert done.output == "done: o1"
            tg.cancel_scope.cancel()
    assert _said(caplog, "store usable again") == []
    assert _said(caplog, "store unusable") == []
    assert _said(caplog, "runs handed to the fleet") == []  # its run had finished: nothing to hand on


async def test_a_cancelled_serve_says_which_runs_it_handed_to_the_fleet(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="tether")
    entered = anyio.Event()

    @tool
    async def wait(order: str) -> str:
        """Wait for ever (until the worker stops)."""
        entered.set()
        await anyio.sleep_forever()
        return order

    def model(messages: list[Message]) -> str | ModelReply:
        if messages[-1].role == "tool":
            return "done"
        return ModelReply(tool_calls=[ToolCall("wait", {"order": str(messages[-1].content)})])

    agent = Agent("held", FunctionModel(model), tools=[wait])
    async with SQLiteStore(tmp_path / "t.db") as store, ActorSystem(store, runners=[agent]) as system:
        await system.enqueue(agent, "o1", execution_id="q1")
        async with anyio.create_task_group() as tg:
            tg.start_soon(lambda: system.serve(poll=0.05, shutdown_grace=0))
            with anyio.fail_after(LIMIT):
                await entered.wait()
            tg.cancel_scope.cancel()
        assert (await system.status("q1")).status == "orphaned"  # handed on, for any worker's sweep
    assert _said(caplog, "runs handed to the fleet' runs=['q1']") != []
