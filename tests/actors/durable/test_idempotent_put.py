"""The lookup and the put of an ``@idempotent`` result through store faults.

A lookup that meets an unusable store is retried for the outage grace, then the step is abandoned
(never a tool result); a lost lock abandons it at once.

Once a body has run, its result is stored even if the run is cancelled meanwhile, so a resume finds
it instead of running the side effect again. A put the store never answers is given up after the
outage grace plus a slack: the step is abandoned (no row written), with an error that names the run,
the grace and how long the put took.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import anyio
import pytest

from actors import ActorSystem, Agent, idempotent, tool
from actors.lowlevel import idempotent_module
from actors.models import FunctionModel, Message, ModelReply, ToolCall
from stores import RUN_END, OwnershipLost, SQLiteStore, StoreCorrupt, StoreUnavailable

pytestmark = pytest.mark.anyio

LIMIT = 20.0


class FlakyPut(SQLiteStore):
    """A SQLite store whose first ``cache_put`` finds the store unusable."""

    failed = False

    async def cache_put(self, execution_id: str, key: str, value: Any) -> Any:
        if not self.failed:
            self.failed = True
            raise StoreUnavailable("the store is down")
        return await super().cache_put(execution_id, key, value)


async def test_a_put_that_meets_an_outage_is_retried_and_says_which_write(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="tether")
    charged: list[str] = []
    agent = _agent(charged)
    async with FlakyPut(tmp_path / "t.db") as store, ActorSystem(store, runners=[agent]) as system:
        done = await (await system.spawn(agent, "o1", execution_id="run-1")).result(timeout=LIMIT)
        assert done.output == "done: charged o1"
    assert charged == ["o1"]
    said = [r.getMessage() for r in caplog.records if "store unusable: retrying" in r.getMessage()]
    assert len(said) == 1 and "execution_id='run-1'" in said[0], said
    assert "write='@idempotent test_idempotent_put._agent.<locals>.charge put'" in said[0], said


class HeldPut(SQLiteStore):
    """A SQLite store whose ``cache_put`` waits for ``release`` (or forever with ``hang``)."""

    def __init__(self, path: Path, *, hang: bool = False) -> None:
        super().__init__(path)
        self.hang = hang
        self.entered = anyio.Event()
        self.release = anyio.Event()

    async def cache_put(self, execution_id: str, key: str, value: Any) -> Any:
        self.entered.set()
        if self.hang:
            await anyio.sleep_forever()
        await self.release.wait()
        return await super().cache_put(execution_id, key, value)


def _agent(charged: list[str]) -> Agent:
    @idempotent
    async def charge(order: str) -> str:
        charged.append(order)
        return f"charged {order}"

    @tool
    async def refund(order: str) -> str:
        """Refund an order."""
        return await charge(order)

    def model(messages: list[Message]) -> str | ModelReply:
        if messages[-1].role == "tool":
            return f"done: {messages[-1].content}"
        return ModelReply(tool_calls=[ToolCall("refund", {"order": str(messages[-1].content)})])

    return Agent("refunds", FunctionModel(model), tools=[refund])


async def test_a_result_is_stored_when_the_run_is_cancelled_during_its_put(tmp_path: Path) -> None:
    charged: list[str] = []
    agent = _agent(charged)
    async with HeldPut(tmp_path / "t.db") as store, ActorSystem(store, runners=[agent]) as system:
        ref = await system.spawn(agent, "o1", execution_id="run-1")
        with anyio.fail_after(LIMIT):
            await store.entered.wait()
        async with anyio.create_task_group() as tg:
            tg.start_soon(system.cancel, "run-1", "stop it")
            await anyio.sleep(0.2)  # the cancel reached the run while its put waits
            store.release.set()
        result = await ref.result(timeout=LIMIT)
        assert result.status == "failed" and "stop it" in (result.error or "")
        assert [entry.value for entry in await store.cache_entries("run-1")] == ["charged o1"]
        # A resume of the cancelled run finds the stored result: the body does not run again.
        resumed = await system.resume("run-1", timeout=LIMIT)
        assert resumed.status == "completed" and resumed.output == "done: charged o1"
    assert charged == ["o1"]


async def test_a_put_the_store_never_answers_abandons_the_step(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(idempotent_module, "_PUT_SLACK", 0.3)
    charged: list[str] = []
    agent = _agent(charged)
    async with (
        HeldPut(tmp_path / "t.db", hang=True) as store,
        ActorSystem(store, runners=[agent], store_outage_grace=0.2) as system,
    ):
        ref = await system.spawn(agent, "o1", execution_id="run-1")
        with anyio.fail_after(LIMIT):
            with pytest.raises(OwnershipLost) as caught:
                await ref.result(timeout=LIMIT)
        text = str(caught.value)
        assert "run 'run-1' was abandoned: its store stayed unusable for 0.2 s" in text, text
        assert "(TimeoutError: the put took over 0.5 s)" in text, text
        rows = await system.history("run-1")
        assert RUN_END not in [row.step_type for row in rows]  # abandoned: nothing written after
        assert rows[-1].step_type == "tool_call"
    assert charged == ["o1"]


class DownLookup(SQLiteStore):
    """A SQLite store whose cache lookups fail with ``error``."""

    error: Exception = StoreUnavailable("the store is down")

    async def cache_get(self, execution_id: str, key: str) -> Any:
        raise self.error


async def test_a_lookup_refused_for_another_reason_than_an_outage_abandons_the_step_at_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="tether")
    charged: list[str] = []
    agent = _agent(charged)
    store = DownLookup(tmp_path / "t.db")
    store.error = StoreCorrupt("the cache entry is not JSON")
    async with store, ActorSystem(store, runners=[agent], store_outage_grace=5) as system:
        ref = await system.spawn(agent, "o1", execution_id="run-1")
        with anyio.fail_after(2), pytest.raises(OwnershipLost) as caught:  # no wait for the grace
            await ref.result(timeout=LIMIT)
        rows = await system.history("run-1")
    assert charged == []
    assert rows[-1].step_type == "tool_call"  # abandoned: nothing written after the tool's row
    assert str(caught.value) == (
        "run 'run-1' was abandoned: its store refused the @idempotent "
        "test_idempotent_put._agent.<locals>.charge lookup (StoreCorrupt: the cache entry is not JSON); "
        "it stopped without writing"
    )
    assert not [r for r in caplog.records if "store unusable: retrying" in r.getMessage()]


@pytest.mark.parametrize("lost", [False, True])
async def test_a_lookup_the_store_refuses_abandons_the_step(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, lost: bool
) -> None:
    caplog.set_level(logging.WARNING, logger="tether")
    charged: list[str] = []
    agent = _agent(charged)
    store = DownLookup(tmp_path / "t.db")
    if lost:
        store.error = OwnershipLost("run 'run-1' was abandoned: the lock went")
    async with store, ActorSystem(store, runners=[agent], store_outage_grace=0.2) as system:
        ref = await system.spawn(agent, "o1", execution_id="run-1")
        with pytest.raises(OwnershipLost) as caught:
            await ref.result(timeout=LIMIT)
        rows = await system.history("run-1")
    assert charged == []
    assert rows[-1].step_type == "tool_call"  # abandoned: nothing written after the tool's row
    said = [r.getMessage() for r in caplog.records if "store unusable: retrying" in r.getMessage()]
    if lost:
        assert str(caught.value) == "run 'run-1' was abandoned: the lock went"
        assert said == []  # a lost lock is not retried
    else:
        assert str(caught.value).startswith(
            "run 'run-1' was abandoned: its store stayed unusable for 0.2 s "
            "(StoreUnavailable: the store is down)"
        ), caught.value
        assert (
            len(said) == 1
            and "write='@idempotent test_idempotent_put._agent.<locals>.charge lookup'" in said[0]
        )


class ProbeDown(SQLiteStore):
    """A SQLite store whose next ownership check fails once ``fail_next`` is set, as a store that
    cannot read its lock file does."""

    fail_next = False

    def check_owner(self, execution_id: str) -> None:
        if self.fail_next:
            self.fail_next = False
            raise StoreUnavailable("the lock file cannot be read")
        super().check_owner(execution_id)


async def test_an_ownership_check_the_store_cannot_make_abandons_the_step(tmp_path: Path) -> None:
    """The check made before the body fails with a store error: the step is abandoned, as on a lost
    lock, and the model never reads the store's error as the tool's result."""
    charged: list[str] = []
    store = ProbeDown(tmp_path / "t.db")

    @idempotent
    async def charge(order: str) -> str:
        charged.append(order)
        return f"charged {order}"

    @tool
    async def refund(order: str) -> str:
        """Refund an order."""
        if not charged:
            store.fail_next = True  # the check before the body, not the one before this tool
        return await charge(order)

    def model(messages: list[Message]) -> str | ModelReply:
        if messages[-1].role == "tool":
            return f"done: {messages[-1].content}"
        return ModelReply(tool_calls=[ToolCall("refund", {"order": "o1"})])

    agent = Agent("refunds", FunctionModel(model), tools=[refund])
    async with store, ActorSystem(store, runners=[agent]) as system:
        ref = await system.spawn(agent, "go", execution_id="run-1")
        with anyio.fail_after(LIMIT), pytest.raises(OwnershipLost) as caught:
            await ref.result()
        assert str(caught.value) == (
            "run 'run-1' was abandoned: its store refused the ownership check of @idempotent "
            "test_idempotent_put.test_an_ownership_check_the_store_cannot_make_abandons_the_step"
            ".<locals>.charge (StoreUnavailable: the lock file cannot be read); it stopped without writing"
        )
        assert (await system.history("run-1"))[-1].step_type == "tool_call"  # no tool result written
    assert charged == []
