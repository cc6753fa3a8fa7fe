"""@idempotent against the real SQLiteStore: once per occurrence (or explicit key), JSON in and out.

``bind_run(..., step=N)`` is one execution of step ``N``; binding it again is a re-run of that step.
"""

from __future__ import annotations

import threading
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import anyio.lowlevel
import anyio.to_thread
import msgspec
import pytest

from actors import idempotent, tool
from actors.lowlevel import bind_run
from stores import IdempotencyError, SerializationError, SQLiteStore


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[SQLiteStore]:
    s = SQLiteStore(tmp_path / "t.db")
    await s.setup()
    try:
        yield s
    finally:
        await s.close()


class Receipt(msgspec.Struct):
    order: str
    amount: int


def make_charge() -> tuple[Any, list[tuple[str, int]]]:
    charges: list[tuple[str, int]] = []

    @idempotent
    async def charge(order: str, amount: int) -> dict[str, Any]:
        charges.append((order, amount))
        await anyio.lowlevel.checkpoint()
        return {"order": order, "amount": amount, "n": len(charges)}

    return charge, charges


@pytest.mark.anyio
async def test_outside_a_run_the_body_runs_every_time() -> None:
    charge, charges = make_charge()
    assert await charge("1042", 5) == {"order": "1042", "amount": 5, "n": 1}
    assert await charge("1042", 5) == {"order": "1042", "amount": 5, "n": 2}
    assert len(charges) == 2


@pytest.mark.anyio
async def test_identical_calls_are_occurrences_and_a_rerun_of_the_step_returns_them_in_order(
    store: SQLiteStore,
) -> None:
    charge, charges = make_charge()
    with anyio.fail_after(10), bind_run("run-1", store=store, step=3):
        first = await charge("1042", 5)
        # Two intentional identical calls (arguments bound to the signature: positional, keyword,
        # any order are one call) are two occurrences: both run, as they would without durability.
        second = await charge("1042", amount=5)
        other = await charge("1043", 5)
    assert (first["n"], second["n"], other["n"]) == (1, 2, 3)
    with anyio.fail_after(10), bind_run("run-1", store=store, step=3):  # the step re-runs
        assert await charge(amount=5, order="1042") == first
        assert await charge("1043", 5) == other
        assert await charge("1042", 5) == second
        third = await charge("1042", 5)  # an occurrence the first execution never made
    assert third["n"] == 4
    with anyio.fail_after(10), bind_run("run-1", store=store, step=4):  # another step
        assert (await charge("1042", 5))["n"] == 5
    assert len(charges) == 5


@pytest.mark.anyio
async def test_a_new_run_is_a_new_cache_and_runs_share_a_store(store: SQLiteStore, tmp_path: Path) -> None:
    charge, charges = make_charge()
    with anyio.fail_after(10):
        with bind_run("run-a", store=store):
            a = await charge("1", 1)
        with bind_run("run-b", store=store):  # e.g. a fork: a new execution_id
            b = await charge("1", 1)
        assert a["n"] == 1 and b["n"] == 2
        # Another store object on the same file (another process, as far as the cache knows).
        other = SQLiteStore(tmp_path / "t.db")
        await other.setup()
        try:
            with bind_run("run-a", store=other, agent_path="swarm:s/agent:x"):
                assert await charge("1", 1) == a
        finally:
            await other.close()
    assert len(charges) == 2


@pytest.mark.anyio
async def test_ten_concurrent_calls_of_one_explicit_key_run_the_body_once(store: SQLiteStore) -> None:
    calls = 0
    gate = anyio.Event()

    @idempotent(key=lambda order: order)
    async def slow_charge(order: str) -> str:
        nonlocal calls
        calls += 1
        await gate.wait()
        return f"charged {order}"

    results: list[str] = []

    async def one() -> None:
        results.append(await slow_charge("1042"))

    with anyio.fail_after(10), bind_run("run-c", store=store):
        async with anyio.create_task_group() as tg:
            for _ in range(10):
                tg.start_soon(one)
            await anyio.sleep(0.05)
            gate.set()
    assert calls == 1
    assert results == ["charged 1042"] * 10


@pytest.mark.anyio
async def test_sync_function_inside_a_sync_tool_runs_once(store: SQLiteStore) -> None:
    calls: list[str] = []
    lock = threading.Lock()

    @idempotent
    def charge(order: str) -> dict[str, str]:
        with lock:
            calls.append(threading.current_thread().name)
        return {"charged": order}

    @tool
    def refund(order: str) -> Any:
        return charge(order)

    outs = []
    for _ in range(2):  # a first execution of the step and a re-run of it
        with anyio.fail_after(10), bind_run("run-s", store=store, step=1):
            async with anyio.create_task_group() as tg:
                for _ in range(5):

                    async def go() -> None:
                        outs.append(await refund.invoke({"order": "7"}))

                    tg.start_soon(go)
    assert len(calls) == 5  # five occurrences, none run again by the re-run
    assert [o.value for o in outs] == [{"charged": "7"}] * 10
    # Outside a run, a sync function just runs.
    assert charge("8") == {"charged": "8"}
    assert len(calls) == 6


@pytest.mark.anyio
async def test_sync_function_on_the_event_loop_in_a_run_is_refused(store: SQLiteStore) -> None:
    @idempotent
    def charge(order: str) -> str:
        raise AssertionError("must not run")

    with bind_run("run-x", store=store), pytest.raises(RuntimeError, match="worker thread"):
        charge("1")


@pytest.mark.anyio
async def test_results_come_back_as_json_on_a_miss_and_a_hit(store: SQLiteStore) -> None:
    @idempotent
    async def receipt(order: str) -> Any:
        return Receipt(order, 5)

    @idempotent
    async def pair() -> Any:
        return (1, "a")

    nothing_calls = 0

    @idempotent
    async def nothing() -> Any:
        nonlocal nothing_calls
        nothing_calls += 1
        return None

    for _ in range(2):  # a miss, then the step's re-run: a hit
        with anyio.fail_after(10), bind_run("run-j", store=store):
            assert await receipt("1") == {"order": "1", "amount": 5}
            assert await pair() == [1, "a"]
            assert await nothing() is None  # a cached None is a hit
    assert nothing_calls == 1
    assert await receipt("2") == {"order": "2", "amount": 5}  # outside a run too


@pytest.mark.anyio
async def test_non_json_result_raises_and_caches_nothing(store: SQLiteStore) -> None:
    runs = 0

    @idempotent
    async def bad() -> Any:
        nonlocal runs
        runs += 1
        return {"tags": {1, 2}}

    with anyio.fail_after(10), bind_run("run-n", store=store):
        with pytest.raises(IdempotencyError) as info:
            await bad()
        assert info.value.path == "$.tags"
        assert "bad" in str(info.value) and "not JSON" in str(info.value)
        assert isinstance(info.value, SerializationError)
        with pytest.raises(IdempotencyError):
            await bad()
    assert runs == 2


@pytest.mark.anyio
async def test_non_json_result_in_a_tool_is_an_error_the_model_reads(store: SQLiteStore) -> None:
    @idempotent
    async def bad() -> Any:
        return object()

    @tool
    async def charge() -> Any:
        return await bad()

    with anyio.fail_after(10), bind_run("run-t", store=store):
        out = await charge.invoke({})
    assert not out.ok
    assert out.content.startswith("Tool 'charge' failed: IdempotencyError: @idempotent function")


@pytest.mark.anyio
async def test_non_json_arguments_need_a_key(store: SQLiteStore) -> None:
    @idempotent
    async def charge(card: object, amount: int) -> int:
        return amount

    keyed_runs = 0

    @idempotent(key=lambda card, amount: f"{card.number}:{amount}")
    async def charge_keyed(card: Any, amount: int) -> int:
        nonlocal keyed_runs
        keyed_runs += 1
        return amount

    class Card:
        number = "4242"

    # Outside a run no key is needed.
    assert await charge(Card(), 3) == 3
    with anyio.fail_after(10), bind_run("run-k", store=store):
        with pytest.raises(IdempotencyError, match="key=") as info:
            await charge(Card(), 3)
        assert info.value.path == "$.arguments.card"
        assert await charge_keyed(Card(), 3) == 3
        assert await charge_keyed(Card(), 3) == 3
    assert keyed_runs == 1
    assert (
        await store.cache_get("run-k", f"{charge_keyed.__module__}.{charge_keyed.__qualname__}:4242:3")
        is not None
    )


@pytest.mark.anyio
async def test_a_key_must_be_a_str(store: SQLiteStore) -> None:
    @idempotent(key=lambda n: n)
    async def f(n: int) -> int:
        return n

    with bind_run("run-ks", store=store), pytest.raises(TypeError, match="str"):
        await f(1)


@pytest.mark.anyio
async def test_a_raising_body_is_not_cached_and_concurrent_waiters_share_the_error(
    store: SQLiteStore,
) -> None:
    runs = 0
    gate = anyio.Event()

    @idempotent(key=lambda: "gateway")
    async def flaky() -> str:
        nonlocal runs
        runs += 1
        if runs == 1:
            await gate.wait()
            raise ConnectionError("gateway down")
        return "ok"

    errors: list[BaseException] = []

    async def one() -> None:
        try:
            await flaky()
        except ConnectionError as exc:
            errors.append(exc)

    with anyio.fail_after(10), bind_run("run-f", store=store):
        async with anyio.create_task_group() as tg:
            for _ in range(3):
                tg.start_soon(one)
            await anyio.sleep(0.05)
            gate.set()
        assert runs == 1 and len(errors) == 3
        assert await flaky() == "ok"
    assert runs == 2


@pytest.mark.anyio
async def test_a_cancelled_leader_lets_a_waiter_lead(store: SQLiteStore) -> None:
    runs = 0
    started = anyio.Event()

    @idempotent(key=lambda: "work")
    async def work() -> int:
        nonlocal runs
        runs += 1
        if runs == 1:
            started.set()
            await anyio.sleep(10)
        return runs

    results: list[int] = []
    with anyio.fail_after(10), bind_run("run-cl", store=store):
        async with anyio.create_task_group() as tg:
            leader = anyio.CancelScope()

            async def lead() -> None:
                with leader:
                    await work()

            async def wait() -> None:
                results.append(await work())

            tg.start_soon(lead)
            await started.wait()
            tg.start_soon(wait)
            await anyio.sleep(0.05)
            leader.cancel()
    assert results == [2]


@pytest.mark.anyio
async def test_sync_function_called_via_to_thread(store: SQLiteStore) -> None:
    runs = 0

    @idempotent
    def f(x: int) -> int:
        nonlocal runs
        runs += 1
        return x * 2

    for _ in range(2):
        with anyio.fail_after(10), bind_run("run-th", store=store):
            assert await anyio.to_thread.run_sync(f, 2) == 4
    assert runs == 1
