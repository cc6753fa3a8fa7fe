"""Restore-anywhere on a fresh store (a paused run after an ``@idempotent`` charge,
a failed run, a run whose process was killed), ``TETHER_RESTORE_FROM_PLANE=off``, and never when
the local store has the run; by hand with ``restore_from_plane``. Real HTTP on loopback, both
backends for the local stores."""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path
from typing import Any

import anyio
import pytest
from _crash_child import build
from _plane_support import Plane, eventually, plane_fixture  # noqa: F401 (fixture)
from conftest import Backend

from actors import ActorSystem, Agent, Resume, RunNotFound, idempotent, interrupt, tool
from actors.models import FunctionModel, Message, ModelReply, ToolCall
from replication import Replicator, restore_from_plane
from stores import Store

pytestmark = pytest.mark.anyio

HERE = Path(__file__).parent


def respond(messages: list[Message]) -> str | ModelReply:
    if any(m.role == "tool" for m in messages):
        return f"done: {messages[-1].content}"
    return ModelReply(tool_calls=[ToolCall("refund", {"order": "1042", "amount": 2000})])


def charging_agent(charges: list[int]) -> Agent:
    """Charges (once, ``@idempotent``) and then waits for a manager's approval."""

    @idempotent
    async def charge(order: str, amount: int) -> dict[str, Any]:
        charges.append(amount)
        return {"charged": amount, "order": order, "n": len(charges)}

    @tool
    async def refund(order: str, amount: int) -> dict[str, Any]:
        """Refund ``amount`` on ``order`` once a manager approves."""
        receipt = await charge(order, amount)
        decision = interrupt("manager_approval", {"order": order, "amount": amount})
        return {"receipt": receipt, "approved": decision.approved}

    return Agent("charging", FunctionModel(respond), tools=[refund])


async def replicated(store: Store, replicator: Replicator) -> None:
    """Wait until the replicator has sent every row and cache entry of ``store``."""

    async def empty() -> bool:
        return not await store.fetch_unsynced(10) and not await store.fetch_unsynced_cache(10)  # type: ignore[attr-defined]

    await eventually(empty)


def second(backend: Backend, tmp_path: Path) -> Store:
    """A fresh store on the backend, elsewhere (another machine's)."""
    if backend.name == "sqlite":
        return backend.open().__class__(tmp_path / "elsewhere.db")  # type: ignore[call-arg]
    return backend.open()


async def test_a_paused_run_resumes_elsewhere_with_one_charge_in_total(
    store_backend: Backend, plane: Plane, tmp_path: Path
) -> None:
    charges: list[int] = []
    agent = charging_agent(charges)
    here = store_backend.open()
    replicator = Replicator(plane.url, "key-a")
    async with ActorSystem(here, runners=[agent], replicator=replicator) as system:
        paused = await (await system.spawn(agent, "refund 2000")).result(timeout=10)
        assert paused.status == "paused" and charges == [2000]
        await replicated(here, replicator)
        rows = await system.history(paused.execution_id)
    await here.delete_run(paused.execution_id)  # the local copy is gone
    await here.close()

    elsewhere = second(store_backend, tmp_path)
    async with ActorSystem(elsewhere, runners=[agent], replicator=Replicator(plane.url, "key-a")) as system:
        done = await system.resume(paused.execution_id, Resume(approved=True), timeout=10)
        assert done.status == "completed"
        assert done.output == 'done: {"receipt":{"charged":2000,"order":"1042","n":1},"approved":true}'
        history = await system.history(paused.execution_id)
        assert history[: len(rows)] == rows  # restored as they were
        assert [r.step_type for r in history[len(rows) :]] == ["resume", "llm_call", "run_end"]
    assert charges == [2000]  # the cache entry came along: one charge in total
    await elsewhere.close()


async def test_a_failed_run_and_a_crashed_run_resume_elsewhere(plane: Plane, tmp_path: Path) -> None:
    from stores import SQLiteStore

    attempts: list[int] = []

    def flaky(messages: list[Message]) -> str:
        attempts.append(1)
        if len(attempts) == 1:
            raise RuntimeError("the model is down")
        return "recovered"

    agent = Agent("flaky", FunctionModel(flaky))
    here = SQLiteStore(tmp_path / "here.db")
    replicator = Replicator(plane.url, "key-a")
    async with ActorSystem(here, runners=[agent], replicator=replicator) as system:
        failed = await (await system.spawn(agent, "hello")).result(timeout=10)
        assert failed.status == "failed"
        await replicated(here, replicator)
    await here.close()

    # a run whose process was killed (SIGKILL) in its tool, after its rows reached the plane
    crashed_id = "crashed-run"
    with anyio.fail_after(60):
        child = await anyio.run_process(
            [
                sys.executable,
                str(HERE / "_crash_child.py"),
                plane.url,
                str(tmp_path / "child.db"),
                crashed_id,
            ],
            check=False,
        )
    assert child.returncode == -9, child.stderr.decode()

    calls: list[int] = []

    async def count() -> None:
        calls.append(1)

    crashy = build(count)
    elsewhere = SQLiteStore(tmp_path / "elsewhere.db")
    async with ActorSystem(
        elsewhere, runners=[agent, crashy], replicator=Replicator(plane.url, "key-a")
    ) as system:
        again = await system.resume(failed.execution_id, timeout=10)
        assert (again.status, again.output) == ("completed", "recovered")
        recovered = await system.resume(crashed_id, timeout=10)
        assert recovered.status == "completed" and calls == [1]  # the tool re-ran once, here
        steps = [r.step_type for r in await system.history(crashed_id)]
        assert steps[:3] == ["llm_call", "tool_call", "recover"]
    await elsewhere.close()


async def test_restore_is_off_by_the_environment_switch(
    plane: Plane, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from stores import SQLiteStore

    agent = Agent("echo", FunctionModel(lambda messages: "hi"))
    here = SQLiteStore(tmp_path / "here.db")
    replicator = Replicator(plane.url, "key-a")
    async with ActorSystem(here, runners=[agent], replicator=replicator) as system:
        ref = await system.spawn(agent, "hello")
        assert (await ref.result(timeout=10)).status == "completed"
        await replicated(here, replicator)
    await here.close()
    for value in ("0", "false", "No", "OFF"):
        monkeypatch.setenv("TETHER_RESTORE_FROM_PLANE", value)
        elsewhere = SQLiteStore(tmp_path / f"elsewhere-{value}.db")
        async with ActorSystem(
            elsewhere, runners=[agent], replicator=Replicator(plane.url, "key-a")
        ) as system:
            with pytest.raises(RunNotFound):
                await system.fork(ref.execution_id)
        await elsewhere.close()
    assert not [g for g in plane.faults.gets if g.startswith("/public/v1/runs/")]
    monkeypatch.setenv("TETHER_RESTORE_FROM_PLANE", "on")
    elsewhere = SQLiteStore(tmp_path / "elsewhere-on.db")
    async with ActorSystem(elsewhere, runners=[agent], replicator=Replicator(plane.url, "key-a")) as system:
        forked = await system.fork(ref.execution_id)
        assert (await forked.result(timeout=10)).status == "completed"
    await elsewhere.close()


async def test_never_when_the_local_store_has_the_run(plane: Plane, tmp_path: Path) -> None:
    from stores import SQLiteStore

    charges: list[int] = []
    agent = charging_agent(charges)
    here = SQLiteStore(tmp_path / "here.db")
    async with ActorSystem(here, runners=[agent], replicator=Replicator(plane.url, "key-a")) as system:
        paused = await (await system.spawn(agent, "refund 2000")).result(timeout=10)
        done = await system.resume(paused.execution_id, Resume(approved=False), timeout=10)
        assert done.status == "completed"
        assert not [g for g in plane.faults.gets if g.startswith("/public/v1/runs/")]
    await here.close()


async def test_restore_from_plane_by_hand(plane: Plane, tmp_path: Path) -> None:
    from stores import SQLiteStore

    charges: list[int] = []
    agent = charging_agent(charges)
    here = SQLiteStore(tmp_path / "here.db")
    replicator = Replicator(plane.url, "key-a")
    async with ActorSystem(here, runners=[agent], replicator=replicator) as system:
        paused = await (await system.spawn(agent, "refund 2000")).result(timeout=10)
        await replicated(here, replicator)
        rows = await system.history(paused.execution_id)
        pending = await here.pending(paused.execution_id)
    await here.close()
    fresh = SQLiteStore(tmp_path / "fresh.db")
    newest = await restore_from_plane(fresh, paused.execution_id, url=plane.url, api_key="key-a")
    assert newest == rows[-1]
    assert await fresh.history(paused.execution_id) == rows
    assert await fresh.pending(paused.execution_id) == pending
    assert [e.value["charged"] for e in await fresh.cache_entries(paused.execution_id)] == [2000]
    assert await restore_from_plane(fresh, paused.execution_id, url=plane.url, api_key="key-a") is None
    assert await restore_from_plane(fresh, "no-such-run", url=plane.url, api_key="key-a") is None
    other = SQLiteStore(tmp_path / "other.db")
    assert await restore_from_plane(other, paused.execution_id, url=plane.url, api_key="key-b") is None
    await fresh.close()
    await other.close()


async def test_a_paused_supervisor_run_resumes_elsewhere(
    store_backend: Backend, plane: Plane, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A Supervisor whose Swarm worker paused deep inside: restored on a fresh store with every row
    (the supervisor's first row, the hand-offs, the pause), it finishes with one charge in total."""
    sys.path.insert(0, str(HERE.parent / "actors" / "durable" / "topologies"))
    from _team import BASELINE, OUTPUT, counts, team

    ledger = tmp_path / "ledger"
    monkeypatch.setenv("TEAM_LEDGER", str(ledger))
    monkeypatch.setenv("TEAM_GATES", "billing")
    here = store_backend.open()
    replicator = Replicator(plane.url, "key-a")
    async with ActorSystem(here, runners=[team()], replicator=replicator) as system:
        ref = await system.spawn(team(), "handle order 1042", execution_id="ops-r")
        paused = await ref.result(timeout=30)
        assert paused.status == "paused"
        assert paused.pending is not None
        assert paused.pending.agent_path == "supervisor:ops/worker:support/agent:billing/tool:refund"
        await replicated(here, replicator)
        rows = await system.history("ops-r")
    await here.delete_run("ops-r")
    await here.close()

    elsewhere = second(store_backend, tmp_path)
    async with ActorSystem(elsewhere, runners=[team()], replicator=Replicator(plane.url, "key-a")) as system:
        done = await system.resume("ops-r", Resume(approved=True, metadata={"approver": "dana"}), timeout=30)
        assert (done.status, done.output) == ("completed", OUTPUT)
        assert (await system.history("ops-r"))[: len(rows)] == rows
    await elsewhere.close()
    # nothing before the pause ran twice; the refund tool ran again with the decision; one charge
    assert counts(ledger) == BASELINE + Counter({"tool refund": 1, "charge 1042": 1})
