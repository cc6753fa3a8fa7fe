"""``@idempotent`` in real runs, on SQLite and PostgreSQL: keys by occurrence, the step of a resumed
tool, entries of the older key form, ``idempotency_key()`` and ``at_most_once``.

The SIGKILL storm against a deduplicating payment service is in ``test_side_effect_storm.py``.
"""

from __future__ import annotations

import hashlib
import os
import sys
import textwrap
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest
from conftest import Backend, on_asyncpg

from actors import (
    ActorSystem,
    Agent,
    AlreadyResumed,
    Resume,
    SideEffectInDoubt,
    TetherError,
    idempotency_key,
    idempotent,
    interrupt,
    tool,
)
from actors.lowlevel import bind_run
from actors.models import FunctionModel, Message, ModelReply, ToolCall
from stores import SQLiteStore, Store, canonical_json

pytestmark = pytest.mark.anyio

LIMIT = 30.0
HERE = Path(__file__).resolve().parent


@asynccontextmanager
async def running(backend: Backend, *runners: Agent) -> AsyncIterator[tuple[Store, ActorSystem]]:
    store = backend.open()
    await store.setup()
    try:
        async with ActorSystem(store, runners=runners) as system:
            yield store, system
    finally:
        await store.close()


def two_calls_then_answer(*calls: ToolCall) -> FunctionModel:
    """Turn 0 asks for ``calls``; once tools replied, the answer joins what they said."""

    def model(messages: list[Message]) -> str | ModelReply:
        if messages[-1].role == "tool":
            return " | ".join(m.content for m in messages if m.role == "tool")
        return ModelReply(tool_calls=list(calls))

    return FunctionModel(model)


async def test_two_identical_refunds_in_one_step_both_run(store_backend: Backend) -> None:
    refunds: list[tuple[str, int]] = []

    @idempotent
    async def refund_money(order: str, amount: int) -> int:
        refunds.append((order, amount))
        return len(refunds)

    @tool
    async def refund_items(order: str) -> list[int]:
        """Refund two line items of the same amount."""
        return [await refund_money(order, 500), await refund_money(order, 500)]

    agent = Agent(
        "items", two_calls_then_answer(ToolCall("refund_items", {"order": "1042"})), tools=[refund_items]
    )
    with anyio.fail_after(LIMIT):
        async with running(store_backend, agent) as (_, system):
            result = await (await system.spawn(agent, "refund both")).result(timeout=10)
    assert result.output == "[1,2]"
    assert refunds == [("1042", 500), ("1042", 500)]  # not merged into one: no lost payment


async def test_identical_calls_in_two_steps_both_run(store_backend: Backend) -> None:
    refunds: list[str] = []

    @idempotent
    async def refund_money(order: str) -> int:
        refunds.append(order)
        return len(refunds)

    @tool
    async def refund(order: str) -> int:
        """Refund an order."""
        return await refund_money(order)

    # Two calls of one tool in one reply are two steps (two rows, two seqs).
    call = ToolCall("refund", {"order": "7"})
    agent = Agent("twice", two_calls_then_answer(call, ToolCall("refund", {"order": "7"})), tools=[refund])
    with anyio.fail_after(LIMIT):
        async with running(store_backend, agent) as (_, system):
            result = await (await system.spawn(agent, "refund twice")).result(timeout=10)
    assert result.output == "1 | 2"
    assert refunds == ["7", "7"]


def pausing_agent(log: list[str], keys: list[str], name: str = "pauser") -> Agent:
    """A tool that charges twice (identical calls), then pauses; on resume it re-runs from the top."""

    @idempotent
    async def charge(order: str) -> str:
        keys.append(idempotency_key())
        log.append(order)
        return f"charge-{len(log)}"

    @tool
    async def refund(order: str) -> str:
        """Charge, then wait for approval."""
        first, second = await charge(order), await charge(order)
        decision = interrupt("approval", {"order": order})
        return f"{first},{second},approved={decision.approved}"

    return Agent(name, two_calls_then_answer(ToolCall("refund", {"order": "9"})), tools=[refund])


async def test_a_resumed_tool_gets_each_earlier_result_in_order(store_backend: Backend) -> None:
    log: list[str] = []
    keys: list[str] = []
    agent = pausing_agent(log, keys)
    with anyio.fail_after(LIMIT):
        async with running(store_backend, agent) as (_, system):
            paused = await (await system.spawn(agent, "refund")).result(timeout=10)
            assert paused.status == "paused"
            rows = await system.history(paused.execution_id)
            tool_row = next(r for r in rows if r.step_type == "tool_call")
            pause_row = rows[-1]
            assert pause_row.step_type == "hitl_pause"
            assert pause_row.state_snapshot["tool_seq"] == tool_row.seq  # the step a resume keys by
        # Another ActorSystem and store instance: the resume finds the entries by the tool row.
        async with running(store_backend, agent) as (_, system):
            done = await system.resume(paused.execution_id, Resume(approved=True), timeout=10)
    assert done.output == "charge-1,charge-2,approved=True"
    assert log == ["9", "9"]  # each body once, none again on resume
    assert len(set(keys)) == 2


def crashing_agent(marks: Path) -> Agent:
    """A tool that charges twice (identical calls), then kills its process the first time."""

    @idempotent
    def charge(order: str) -> str:
        with (marks / "charges").open("a") as out:
            out.write(f"{os.getpid()}\n")
        return f"charge-{len((marks / 'charges').read_text().split())}-by-{os.getpid()}"

    @tool
    def refund(order: str) -> str:
        """Charge twice, then (the first time) die."""
        first, second = charge(order), charge(order)
        crashed = marks / "crashed"
        if not crashed.exists():
            crashed.write_text("1")
            os._exit(9)  # the cache rows are committed, the tool's result is not
        return f"{first},{second}"

    return Agent("crasher", two_calls_then_answer(ToolCall("refund", {"order": "3"})), tools=[refund])


CRASH_CHILD = textwrap.dedent(
    """
    import os
    import sys
    from pathlib import Path

    import anyio

    sys.path[:0] = [{tests!r}, {here!r}]
    from conftest import Backend
    from test_idempotent_runs import crash_child

    anyio.run(crash_child, Backend(*sys.argv[1:3], sys.argv[3] if sys.argv[3] != "-" else ""), Path(sys.argv[4]), backend=os.environ.get("TETHER_TEST_LOOP", "asyncio"))
    """
)


async def crash_child(backend: Backend, marks: Path) -> None:
    """The child's part: start the run; its tool kills this process after two charges."""
    agent = crashing_agent(marks)
    async with running(backend, agent) as (_, system):
        await (await system.spawn(agent, "refund", execution_id="crashy")).result(timeout=30)
    raise SystemExit("the tool was supposed to kill this process")


async def test_a_recovery_in_another_process_finds_each_entry(store_backend: Backend, tmp_path: Path) -> None:
    code = CRASH_CHILD.format(tests=str(HERE.parents[1]), here=str(HERE))
    with anyio.fail_after(60):
        child = await anyio.run_process(
            [sys.executable, "-c", code, *store_backend.child_args(), str(tmp_path)], check=False
        )
    assert child.returncode == 9, child.stderr.decode()
    child_pid = (tmp_path / "charges").read_text().split()[0]
    agent = crashing_agent(tmp_path)
    with anyio.fail_after(LIMIT):
        async with running(store_backend, agent) as (_, system):
            for _ in range(500):  # a dead owner's PostgreSQL lock goes within milliseconds
                try:
                    result = await system.resume("crashy", timeout=10)
                    break
                except AlreadyResumed:
                    await anyio.sleep(0.01)
    assert result.output == f"charge-1-by-{child_pid},charge-2-by-{child_pid}"
    assert (tmp_path / "charges").read_text().split() == [child_pid, child_pid]  # none ran here


async def test_an_entry_of_the_older_key_form_stays_readable(store_backend: Backend) -> None:
    """A run paused before keys counted occurrences: its entry is under sha256([name, arguments])."""
    log: list[str] = []
    keys: list[str] = []
    agent = pausing_agent(log, keys, name="legacy")
    with anyio.fail_after(LIMIT):
        async with running(store_backend, agent) as (store, system):
            paused = await (await system.spawn(agent, "refund")).result(timeout=10)
            eid = paused.execution_id
            name = f"{__name__}.pausing_agent.<locals>.charge"
            old_key = hashlib.sha256(canonical_json([name, {"order": "9"}])).hexdigest()
            await wipe_cache(store_backend, store, eid)
            await store.cache_put(eid, old_key, "charged-by-the-older-version")
            log.clear()
            done = await system.resume(eid, Resume(approved=True), timeout=10)
    assert done.output == "charged-by-the-older-version,charged-by-the-older-version,approved=True"
    assert log == []  # the in-flight run did not charge again


async def wipe_cache(backend: Backend, store: Store, execution_id: str) -> None:
    """Delete the run's cache entries with raw SQL (as if the new-form entries never existed)."""
    if backend.name == "sqlite":
        import sqlite3

        with sqlite3.connect(backend.target) as conn:
            conn.execute("DELETE FROM idempotency_cache WHERE execution_id = ?", (execution_id,))
        return
    await on_asyncpg(
        backend.target,
        lambda conn: conn.execute(
            f'DELETE FROM "{backend.schema}".idempotency_cache WHERE execution_id = $1', execution_id
        ),
    )


async def test_idempotency_key_is_stable_across_reruns_and_distinct_per_occurrence(tmp_path: Path) -> None:
    seen: list[str] = []
    fail = True

    @idempotent
    async def charge(order: str) -> str:
        seen.append(idempotency_key())
        if fail:
            raise ConnectionError("gateway timed out")  # no result stored: a re-run runs the body again
        return "ok"

    @idempotent(key=lambda order: order)
    async def charge_keyed(order: str) -> str:
        seen.append(idempotency_key())
        return "ok"

    store = SQLiteStore(tmp_path / "k.db")
    await store.setup()
    try:
        with anyio.fail_after(LIMIT):
            for attempt in range(2):
                fail = attempt == 0
                with bind_run("run-k", store=store, step=5):
                    for _ in range(2):
                        try:
                            await charge("1")
                        except ConnectionError:
                            pass
            with bind_run("run-k", store=store, step=6):
                await charge_keyed("1")
            with bind_run("run-other", store=store, step=5):
                await charge("1")
    finally:
        await store.close()
    assert seen[0] == seen[2] and seen[1] == seen[3]  # the same on each re-run of that call
    assert len({seen[0], seen[1], seen[4], seen[5]}) == 4  # per occurrence, per function, per run
    assert all(len(k) == 64 for k in seen)
    # Outside a run every call is its own: a fresh key each time.
    fail = False
    await charge("1")
    await charge("1")
    assert seen[-1] != seen[-2]
    with pytest.raises(RuntimeError, match="inside an @idempotent"):
        idempotency_key()


async def test_at_most_once_never_runs_a_body_twice_and_names_the_doubt(store_backend: Backend) -> None:
    bodies: list[str] = []
    keys: list[str] = []
    entered = anyio.Event()

    @idempotent(at_most_once=True)
    async def wire(order: str) -> str:
        keys.append(idempotency_key())
        bodies.append(order)
        if len(bodies) == 1:
            entered.set()
            await anyio.sleep(30)  # the first attempt is stopped here: was the money sent?
        return f"sent {order}"

    @tool
    async def pay(order: str) -> str:
        """Send money once."""
        try:
            return await wire(order)
        except SideEffectInDoubt as doubt:
            return f"in doubt: {doubt.key}"

    agent = Agent("wire", two_calls_then_answer(ToolCall("pay", {"order": "5"})), tools=[pay])
    with anyio.fail_after(LIMIT):
        async with running(store_backend, agent) as (_, system):
            ref = await system.spawn(agent, "pay")
            await entered.wait()
        # The system stopped mid-body: the intent is recorded, the result is not.
        assert bodies == ["5"]
        async with running(store_backend, agent) as (_, system):
            result = await system.resume(ref.execution_id, timeout=10)
    assert result.output == f"in doubt: {keys[0]}"
    assert bodies == ["5"]  # never run twice


async def test_side_effect_in_doubt_is_a_tether_error_naming_the_key() -> None:
    doubt = SideEffectInDoubt("shop.wire", "abc123", execution_id="run-1")
    assert isinstance(doubt, TetherError)
    assert "abc123" in str(doubt) and "'shop.wire'" in str(doubt) and "'run-1'" in str(doubt)
    assert (doubt.key, doubt.function, doubt.execution_id) == ("abc123", "shop.wire", "run-1")


async def test_at_most_once_stores_its_result_like_any_call(store_backend: Backend) -> None:
    bodies: list[int] = []

    @idempotent(at_most_once=True)
    async def send(n: int) -> dict[str, Any]:
        bodies.append(n)
        return {"sent": n}

    store = store_backend.open()
    await store.setup()
    try:
        with anyio.fail_after(LIMIT):
            for _ in range(3):  # a first execution of the step, then two re-runs
                with bind_run("run-a", store=store, step=2):
                    assert [await send(1), await send(1)] == [{"sent": 1}, {"sent": 1}]
    finally:
        await store.close()
    assert bodies == [1, 1]


def test_at_most_once_must_be_a_bool() -> None:
    with pytest.raises(TypeError, match="at_most_once"):
        idempotent(at_most_once="yes")  # type: ignore[call-overload]
