"""The fleet's edges: claim refusals by their words, a claim keeps the runner version, the queue's and
a claim's release of the run when cancelled or when the store hangs, a sweep's limit across expired
pauses and orphans, and an enqueue that rides out a short outage within the grace only.
"""

from __future__ import annotations

import functools
import logging
from pathlib import Path

import anyio
import pytest
from conftest import Backend, until_status

from actors import ActorSystem, Agent, Resume, interrupt, tool
from actors.lowlevel import sweep_module
from actors.models import FunctionModel, Message, ModelReply, ToolCall
from stores import (
    RESUME,
    Admission,
    AlreadyResumed,
    Checkpoint,
    PendingInterrupt,
    RunExists,
    SQLiteStore,
    StoreError,
    StoreUnavailable,
)

pytestmark = pytest.mark.anyio

LIMIT = 30.0


def _agent(*, version: str | None = None, expires_in: float | None = None) -> Agent:
    @tool
    async def refund(order: str) -> str:
        """Refund an order once a person approves."""
        decision = interrupt("approve the refund?", {"order": order}, expires_in=expires_in)
        return f"{'refunded' if decision.approved else 'refused'} {order}"

    def model(messages: list[Message]) -> str | ModelReply:
        if messages[-1].role == "tool":
            return f"done: {messages[-1].content}"
        return ModelReply(tool_calls=[ToolCall("refund", {"order": str(messages[-1].content)})])

    return Agent("edges", FunctionModel(model), tools=[refund], version=version)


async def _paused(system: ActorSystem, agent: Agent, execution_id: str) -> None:
    result = await (await system.spawn(agent, "o1", execution_id=execution_id)).result(timeout=LIMIT)
    assert result.status == "paused", result


async def test_claims_refused_say_why(store_backend: Backend) -> None:
    agent = _agent()
    async with store_backend.open() as store, ActorSystem(store, runners=[agent]) as system:
        await _paused(system, agent, "p1")
        other = store_backend.open()
        async with other:
            assert await other.try_lock("p1")  # another process is resuming it right now
            with pytest.raises(AlreadyResumed, match="'p1' is owned by another live process or actor"):
                await system.claim("p1", Resume(approved=True))
            await other.unlock("p1")
            with pytest.raises(RunExists, match="run 'q9' is owned by a live process"):
                assert await other.try_lock("q9")
                await system.enqueue(agent, "o9", execution_id="q9")
        await system.claim("p1", Resume(approved=True))
        with pytest.raises(AlreadyResumed, match="'p1' has no pending interrupt to claim"):
            await system.claim("p1", Resume(approved=False))  # approved, not yet driven
        assert (await system.status("p1")).status == "approved"


async def test_a_claimed_run_waits_for_a_worker_of_its_version(
    store_backend: Backend, caplog: pytest.LogCaptureFixture
) -> None:
    v1, v2 = _agent(version="1"), _agent(version="2")
    async with store_backend.open() as store:
        async with ActorSystem(store, runners=[v2]) as system:
            await _paused(system, v2, "v1")
            await system.claim("v1", Resume(approved=True))
        async with ActorSystem(store, runners=[v1]) as system:
            with caplog.at_level(logging.WARNING, logger="tether"):
                assert await system.sweep() == 0  # the claim's row keeps the run's version
            assert (await system.status("v1")).status == "approved"
            said = [r.getMessage() for r in caplog.records if r.name == "tether"]
            assert any("run waits for its runner version" in m and "version='2'" in m for m in said), said
        async with ActorSystem(store, runners=[v2]) as system:
            assert await system.sweep() == 1
            done = await system.ref("v1").result(timeout=LIMIT)
            assert done.output == "done: refunded o1"
            assert [row.step_type for row in await system.history("v1")].count(RESUME) == 1


class HeldStore(SQLiteStore):
    """A SQLite store whose ``unlock`` hangs while ``hang_unlock``."""

    hang_unlock = False

    async def unlock(self, execution_id: str) -> None:
        if self.hang_unlock:
            await anyio.sleep_forever()
        await super().unlock(execution_id)


async def test_a_cancelled_claim_still_releases_the_run(store_backend: Backend) -> None:
    agent = _agent()
    async with store_backend.open() as store, ActorSystem(store, runners=[agent]) as system:
        await _paused(system, agent, "c1")
        entered, release = anyio.Event(), anyio.Event()
        claim = store.claim

        async def held_claim(row: Checkpoint) -> PendingInterrupt:
            entered.set()
            await release.wait()
            return await claim(row)

        store.claim = held_claim  # type: ignore[method-assign]
        with anyio.move_on_after(LIMIT) as scope:
            async with anyio.create_task_group() as tg:
                tg.start_soon(system.claim, "c1", Resume(approved=True))
                await entered.wait()
                tg.cancel_scope.cancel()  # the claimer goes away mid-claim
        assert not scope.cancelled_caught
        async with store_backend.open() as other:
            assert await other.try_lock("c1")  # released, shielded from the cancel
            await other.unlock("c1")
        assert (await system.status("c1")).status == "paused"


async def test_a_cancelled_enqueue_still_releases_the_run(store_backend: Backend) -> None:
    agent = _agent()
    async with store_backend.open() as store, ActorSystem(store, runners=[agent]) as system:
        await store.setup()
        entered, release = anyio.Event(), anyio.Event()
        append = store.append

        async def held_append(row: Checkpoint) -> None:
            entered.set()
            await release.wait()
            await append(row)

        store.append = held_append  # type: ignore[method-assign]
        with anyio.move_on_after(LIMIT) as scope:
            async with anyio.create_task_group() as tg:
                tg.start_soon(functools.partial(system.enqueue, agent, "o1", execution_id="q1"))
                await entered.wait()
                tg.cancel_scope.cancel()  # the caller goes away mid-enqueue
        assert not scope.cancelled_caught
        async with store_backend.open() as other:
            assert await other.try_lock("q1")  # released, shielded from the cancel
            await other.unlock("q1")


async def test_a_hung_release_is_given_up_after_its_bound(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sweep_module, "_RELEASE_TIMEOUT", 0.2)
    agent = _agent()
    async with HeldStore(tmp_path / "t.db") as store, ActorSystem(store, runners=[agent]) as system:
        await _paused(system, agent, "h1")
        store.hang_unlock = True
        with anyio.fail_after(5):
            pending = await system.claim("h1", Resume(approved=True))
            assert pending.execution_id == "h1"
            await system.enqueue(agent, "o2", execution_id="h2")
        store.hang_unlock = False


async def test_a_sweep_takes_at_most_its_limit_expired_pauses_first(store_backend: Backend) -> None:
    waiting, expiring = _agent(), _agent(expires_in=0.2)
    async with store_backend.open() as store, ActorSystem(store, runners=[expiring]) as system:
        await system.enqueue(waiting, "o1", execution_id="q1")
        await _paused(system, expiring, "x1")
        await anyio.sleep(0.3)
        assert await system.sweep(limit=1) == 1  # the expired pause; the queued run waits
        assert (await system.ref("x1").result(timeout=LIMIT)).output == "done: refused o1"
        assert (await system.status("q1")).status == "queued"
        assert await system.sweep(limit=1) == 1
        assert (await system.ref("q1").result(timeout=LIMIT)).status == "paused"
        # A limit of 3 with two expired pauses (q1 paused too): those and one queued run, not two.
        await _paused(system, expiring, "x2")
        await system.enqueue(waiting, "o3", execution_id="q3")
        await system.enqueue(waiting, "o4", execution_id="q4")
        await anyio.sleep(0.3)
        assert await system.sweep(limit=3) == 3
        assert (await system.ref("x2").result(timeout=LIMIT)).output == "done: refused o1"
        assert (await system.ref("q1").result(timeout=LIMIT)).output == "done: refused o1"
        statuses = {eid: (await system.status(eid)).status for eid in ("q3", "q4")}
        assert sorted(statuses.values()) == ["paused", "queued"], statuses


class DownStore(SQLiteStore):
    """A SQLite store whose appends fail as an unusable store does while ``down``."""

    down = False

    async def append(self, row: Checkpoint) -> None:
        if self.down:
            raise StoreUnavailable("the store is down")
        await super().append(row)


async def test_an_enqueue_rides_out_an_outage_within_the_grace_only(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="tether")
    agent = _agent()
    for grace, queued in ((5.0, True), (0.3, False)):
        async with (
            DownStore(tmp_path / f"{grace}.db") as store,
            ActorSystem(store, runners=[agent], store_outage_grace=grace) as system,
        ):
            store.down = True
            async with anyio.create_task_group() as tg:
                tg.start_soon(_up_after, store, 0.6)
                if queued:
                    await system.enqueue(agent, "o1", execution_id="e1")
                else:
                    with pytest.raises(StoreError, match="'e1'"):
                        await system.enqueue(agent, "o1", execution_id="e1")
            runs = await system.runs()
            assert [(run.execution_id, run.status) for run in runs] == ([("e1", "queued")] if queued else [])
    started = [r.getMessage() for r in caplog.records if r.getMessage().startswith("event='step started'")]
    assert len(started) == 1 and "execution_id='e1'" in started[0] and "runner='edges'" in started[0], started


async def _up_after(store: DownStore, seconds: float) -> None:
    await anyio.sleep(seconds)
    store.down = False


async def test_a_sweep_goes_past_an_expired_pause_decided_elsewhere(
    store_backend: Backend, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="tether")
    agent = _agent(expires_in=0.2)
    async with store_backend.open() as store, ActorSystem(store, runners=[agent]) as system:
        await _paused(system, agent, "x1")
        await anyio.sleep(0.3)
        expired = store.expired

        async def with_one_decided_elsewhere(limit: int) -> list[str]:
            # "gone" was listed, then decided and deleted by another process before this claim
            return ["gone", *await expired(limit)]

        store.expired = with_one_decided_elsewhere  # type: ignore[method-assign]
        assert await system.sweep() == 1
        assert (await system.ref("x1").result(timeout=LIMIT)).output == "done: refused o1"
    said = [r.getMessage() for r in caplog.records if r.getMessage().startswith("event='pause expired' ")]
    assert len(said) == 1 and said[0].startswith("event='pause expired' execution_id='x1' "), said


async def test_a_paused_run_whose_owner_died_has_its_stale_ownership_dropped(
    store_backend: Backend, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="tether")
    agent = _agent()
    async with store_backend.open() as store, ActorSystem(store, runners=[agent]) as system:
        await _paused(system, agent, "p2")
        async with store_backend.open() as dead:  # an owner that dies after writing the pause
            assert await dead.try_lock("p2")
        assert "p2" in await store.orphans()
        assert await system.sweep() == 0  # a resting run: nothing to drive
        assert "p2" not in await store.orphans()
        assert (await system.status("p2")).status == "paused"
    assert [r.getMessage() for r in caplog.records if r.name == "tether"] == []  # not tried and refused


class DownReads(SQLiteStore):
    """A SQLite store whose reads of a run's newest row fail while ``down``."""

    down = False

    async def latest(self, execution_id: str) -> Checkpoint | None:
        if self.down:
            raise StoreUnavailable("the store is down")
        return await super().latest(execution_id)


async def test_a_run_let_go_in_an_outage_is_taken_by_a_later_sweep(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="tether")
    agent = _agent()
    async with DownReads(tmp_path / "t.db") as store, ActorSystem(store, runners=[agent]) as system:
        await system.enqueue(agent, "o1", execution_id="q1")
        store.down = True
        assert await system.sweep() == 0
        said = [r.getMessage() for r in caplog.records if r.name == "tether"]
        assert len(said) == 1, said
        assert said[0].startswith("event='run let go in a store outage' execution_id='q1'"), said
        assert "error=\"StoreUnavailable('the store is down')\"" in said[0], said
        store.down = False
        assert await system.sweep() == 1
        assert (await system.ref("q1").result(timeout=LIMIT)).status == "paused"


class DownTakes(SQLiteStore):
    """A SQLite store whose takes of a queued run fail while ``down``."""

    down = False

    async def take_queued(self, execution_id: str) -> Admission:
        if self.down:
            raise StoreUnavailable("the store is down")
        return await super().take_queued(execution_id)


async def test_a_sweep_whose_take_meets_an_outage_raises_it_and_a_later_sweep_takes_the_run(
    tmp_path: Path,
) -> None:
    agent = _agent()
    async with DownTakes(tmp_path / "t.db") as store, ActorSystem(store, runners=[agent]) as system:
        await system.enqueue(agent, "o1", execution_id="q1")
        store.down = True
        with pytest.raises(StoreUnavailable, match="the store is down"):
            await system.sweep()
        store.down = False
        assert await system.sweep() == 1
        assert (await system.ref("q1").result(timeout=LIMIT)).status == "paused"


async def test_serve_rides_out_an_outage_met_in_a_take_and_takes_the_run_after(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="tether")
    agent = _agent()
    async with DownTakes(tmp_path / "t.db") as store, ActorSystem(store, runners=[agent]) as system:
        await system.enqueue(agent, "o1", execution_id="q1")
        store.down = True
        with anyio.fail_after(LIMIT):
            async with anyio.create_task_group() as tg:
                tg.start_soon(functools.partial(system.serve, poll=0.05))
                while not any(  # noqa: ASYNC110 (the log of the serve task)
                    r.getMessage().startswith("event='store unusable: serve looks again' ")
                    for r in caplog.records
                ):
                    await anyio.sleep(0.02)
                store.down = False
                await until_status(system, "q1", "paused", timeout=LIMIT)
                tg.cancel_scope.cancel()


class DownWaits(SQLiteStore):
    """A SQLite store whose reads of the index of resting runs fail while ``down``."""

    down = False

    async def due_waits(self, limit: int) -> list[tuple[str, int]]:
        if self.down:
            raise StoreUnavailable("the store is down")
        return await super().due_waits(limit)


async def test_a_sweep_that_cannot_read_the_due_runs_drives_the_runs_it_took_or_raises(
    tmp_path: Path,
) -> None:
    agent = _agent()
    async with DownWaits(tmp_path / "t.db") as store, ActorSystem(store, runners=[agent]) as system:
        store.down = True
        with pytest.raises(StoreUnavailable, match="the store is down"):
            await system.sweep()  # nothing taken: the outage is the caller's to hear
        await system.enqueue(agent, "o1", execution_id="q1")
        assert await system.sweep() == 1  # the queued run it took is driven all the same
        assert (await system.ref("q1").result(timeout=LIMIT)).status == "paused"


class NoOwnership(SQLiteStore):
    """A store that records no run ownership (no ``orphans``), as a third-party store may."""

    orphans = None


async def test_a_store_without_ownership_cannot_serve_a_fleet(tmp_path: Path) -> None:
    async with NoOwnership(tmp_path / "t.db") as store, ActorSystem(store) as system:
        with pytest.raises(TypeError, match="does not record run ownership, so it cannot serve a fleet"):
            await system.sweep()
