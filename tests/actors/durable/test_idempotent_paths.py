"""``@idempotent``'s less travelled paths, on SQLite and PostgreSQL: in-process waiters of a hit, of a
doubt and of a failed store write; the owner check before a body; ``key=`` with ``at_most_once``;
a function without a signature; an entry of the older key form read by an ``at_most_once`` call.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
import pytest
from conftest import Backend, on_asyncpg

from actors import SideEffectInDoubt, idempotency_key, idempotent
from actors.lowlevel import StepAbandoned, bind_run
from stores import IdempotencyError, OwnershipLost, Store, canonical_json

pytestmark = pytest.mark.anyio

LIMIT = 30.0


async def opened(backend: Backend) -> Store:
    store = backend.open()
    await store.setup()
    return store


async def together(n: int, call: Any) -> list[Any]:
    """Start ``n`` concurrent calls of ``call()`` in one task group; each one's value or exception."""
    outcomes: list[Any] = [None] * n

    async def one(i: int) -> None:
        try:
            outcomes[i] = await call()
        except (Exception, StepAbandoned) as exc:
            outcomes[i] = exc

    async with anyio.create_task_group() as tg:
        for i in range(n):
            tg.start_soon(one, i)
    return outcomes


async def test_waiters_of_a_stored_hit_get_its_value(store_backend: Backend) -> None:
    bodies: list[str] = []

    @idempotent(key=lambda order: order)
    async def charge(order: str) -> dict[str, str]:
        bodies.append(order)
        return {"charged": order}

    store = await opened(store_backend)
    try:
        with anyio.fail_after(LIMIT), bind_run("run-h", store=store):
            assert await charge(order="7") == {"charged": "7"}  # key= gets keyword arguments too
            # The first of these leads and finds the stored result; the others wait for it in-process.
            assert await together(3, lambda: charge("7")) == [{"charged": "7"}] * 3
    finally:
        await store.close()
    assert bodies == ["7"]


async def test_key_with_at_most_once_raises_the_doubt_to_every_waiter(store_backend: Backend) -> None:
    bodies: list[str] = []

    def by_order(order: str) -> str:
        return order

    @idempotent(key=by_order, at_most_once=True)
    async def wire(order: str) -> str:
        bodies.append(idempotency_key())
        raise ConnectionError("gateway timed out")  # was the money sent? nobody knows

    store = await opened(store_backend)
    try:
        with anyio.fail_after(LIMIT), bind_run("run-d", store=store, step=1):
            with pytest.raises(ConnectionError):
                await wire("5")
        with anyio.fail_after(LIMIT), bind_run("run-d", store=store, step=2):  # the key spans the run
            outcomes = await together(3, lambda: wire("5"))
    finally:
        await store.close()
    assert len(bodies) == 1  # never run again
    name = f"{__name__}.test_key_with_at_most_once_raises_the_doubt_to_every_waiter.<locals>.wire"
    for doubt in outcomes:
        assert isinstance(doubt, SideEffectInDoubt), outcomes
        assert (doubt.function, doubt.key, doubt.execution_id) == (name, bodies[0], "run-d")


async def test_waiters_of_a_non_json_result_share_the_error(store_backend: Backend) -> None:
    bodies: list[int] = []

    @idempotent(key=lambda n: str(n))
    async def make(n: int) -> Any:
        bodies.append(n)
        await anyio.sleep(0.05)  # the waiters queue behind this call
        return {"when": {1, 2}}

    store = await opened(store_backend)
    try:
        with anyio.fail_after(LIMIT), bind_run("run-n", store=store):
            outcomes = await together(3, lambda: make(1))
            assert await store.cache_get("run-n", f"{make.__module__}.{make.__qualname__}:1") is None
    finally:
        await store.close()
    assert bodies == [1]  # the leader ran it; its error reached every waiter
    name = f"{__name__}.test_waiters_of_a_non_json_result_share_the_error.<locals>.make"
    for error in outcomes:
        assert isinstance(error, IdempotencyError), outcomes
        assert error.path == "$.when"
        text = str(error)
        assert text.startswith(f"@idempotent function {name!r} returned a value that is not JSON: ")
        assert text.endswith(" (at $.when)") and text.count("(at ") == 1, text  # the path said once
        assert "set" in text, text  # the reason is kept


async def _lose_lock(backend: Backend, store: Store) -> None:
    """Take the store's liveness lock away while it lives: replace the SQLite lock file, terminate
    the PostgreSQL lock connection; then wait (bounded) until the store has noticed."""
    if backend.name == "sqlite":
        lock_path = Path(backend.target + ".locks")
        fresh = lock_path.with_name(lock_path.name + ".new")
        fresh.write_bytes(b"")
        os.replace(fresh, lock_path)
    else:
        pid = store._lock_conn.get_server_pid()  # type: ignore[attr-defined]
        assert await on_asyncpg(
            backend.target, lambda conn: conn.fetchval("SELECT pg_terminate_backend($1)", pid)
        )
    with anyio.fail_after(LIMIT):
        while True:
            try:
                store.check_owner("run-o")
            except OwnershipLost:
                return
            await anyio.sleep(0.01)


async def test_the_owner_check_refuses_the_body_for_every_waiter(store_backend: Backend) -> None:
    bodies: list[str] = []

    @idempotent(key=lambda order: order)
    async def charge(order: str) -> str:
        bodies.append(order)
        return "charged"

    store = await opened(store_backend)
    try:
        assert await store.try_lock("run-o")
        with anyio.fail_after(LIMIT), bind_run("run-o", store=store):
            await _lose_lock(store_backend, store)
            outcomes = await together(3, lambda: charge("1"))
    finally:
        await store.close()
    assert bodies == []  # the run is no longer ours: no body ran
    for error in outcomes:  # raised past any tool (never its result), carrying the lock loss
        assert isinstance(error, StepAbandoned), outcomes
        assert isinstance(error.lost, OwnershipLost)
        assert "'run-o'" in str(error.lost)


async def test_an_at_most_once_call_reads_an_entry_of_the_older_key_form(store_backend: Backend) -> None:
    bodies: list[str] = []

    @idempotent(at_most_once=True)
    async def wire(order: str) -> str:
        bodies.append(order)
        return f"sent {order}"

    name = f"{__name__}.test_an_at_most_once_call_reads_an_entry_of_the_older_key_form.<locals>.wire"
    old_key = hashlib.sha256(canonical_json([name, {"order": "9"}])).hexdigest()
    store = await opened(store_backend)
    try:
        await store.cache_put("run-l", old_key, "sent by the older version")
        with anyio.fail_after(LIMIT), bind_run("run-l", store=store, step=4):
            assert await wire("9") == "sent by the older version"
            assert await wire("8") == "sent 8"  # no entry of either form: the body runs
    finally:
        await store.close()
    assert bodies == ["8"]


async def test_a_function_without_a_signature_keys_on_its_arguments_as_given(tmp_path: Path) -> None:
    """``max`` has no ``inspect`` signature: its key is the JSON of ``[args, kwargs]``."""
    from stores import SQLiteStore

    imax = idempotent(max)
    store = SQLiteStore(tmp_path / "b.db")
    await store.setup()
    try:
        old_key = hashlib.sha256(canonical_json(["builtins.max", [[[1, 5]], {}]])).hexdigest()
        await store.cache_put("run-b", old_key, 99)  # an entry of the older form: read, not recomputed
        with anyio.fail_after(LIMIT), bind_run("run-b", store=store, step=1):
            assert await anyio.to_thread.run_sync(imax, [1, 5]) == 99
            assert await anyio.to_thread.run_sync(imax, [2, 3]) == 3
            with pytest.raises(IdempotencyError) as caught:
                await anyio.to_thread.run_sync(imax, {1, 2})
    finally:
        await store.close()
    assert caught.value.path == "$.arguments[0][0]"
    assert str(caught.value).startswith(
        "@idempotent function 'builtins.max' was called with an argument that is not JSON ("
    )
    assert "pass @idempotent(key=...)" in str(caught.value)


async def test_without_a_step_the_key_is_the_node(tmp_path: Path) -> None:
    from stores import SQLiteStore

    bodies: list[str] = []

    @idempotent
    async def charge(order: str) -> str:
        bodies.append(order)
        return f"charge {len(bodies)}"

    store = SQLiteStore(tmp_path / "n.db")
    await store.setup()
    try:
        with anyio.fail_after(LIMIT):
            with bind_run("run-s", store=store, node_id="turn:0/tool:a"):
                assert await charge("1") == "charge 1"
            with bind_run("run-s", store=store, node_id="turn:0/tool:b"):  # another node: its own call
                assert await charge("1") == "charge 2"
            with bind_run("run-s", store=store, node_id="turn:0/tool:a"):  # that node again: a re-run
                assert await charge("1") == "charge 1"
    finally:
        await store.close()
    assert bodies == ["1", "1"]


async def test_refusals_name_what_was_wrong(tmp_path: Path) -> None:
    from stores import SQLiteStore

    with pytest.raises(TypeError) as bad_key:
        idempotent(key="order")  # type: ignore[call-overload]
    assert str(bad_key.value) == "@idempotent(key=...) must be a callable returning a str"
    with pytest.raises(TypeError) as bad_flag:
        idempotent(at_most_once="yes")  # type: ignore[call-overload]
    assert str(bad_flag.value) == "@idempotent(at_most_once=...) must be a bool, not str"
    with pytest.raises(RuntimeError) as outside:
        idempotency_key()
    assert str(outside.value) == "idempotency_key() is called inside an @idempotent function's body, not here"

    @idempotent(key=lambda order: len(order))  # type: ignore[arg-type, return-value]
    async def charge(order: str) -> str:
        return order

    store = SQLiteStore(tmp_path / "r.db")
    await store.setup()
    try:
        with bind_run("run-r", store=store), pytest.raises(TypeError) as not_str:
            await charge("ab")
    finally:
        await store.close()
    assert str(not_str.value).endswith("must return a str, not int")
    assert "charge" in str(not_str.value)


async def test_one_run_id_in_two_stores_is_two_caches_even_at_once(tmp_path: Path) -> None:
    """A run copied into a second store (same ``execution_id``) keeps its own cache there: concurrent
    calls of one key in the two stores do not wait for each other's result."""
    from stores import SQLiteStore

    bodies: list[str] = []

    @idempotent(key=lambda where: "k")
    async def stamp(where: str) -> str:
        bodies.append(where)
        await anyio.sleep(0.05)  # both calls are in flight together
        return where

    stores = [SQLiteStore(tmp_path / "one.db"), SQLiteStore(tmp_path / "two.db")]
    results: dict[str, str] = {}

    async def call(store: SQLiteStore, where: str) -> None:
        with bind_run("run-x", store=store):
            results[where] = await stamp(where)

    try:
        for store in stores:
            await store.setup()
        with anyio.fail_after(LIMIT):
            async with anyio.create_task_group() as tg:
                tg.start_soon(call, stores[0], "one")
                tg.start_soon(call, stores[1], "two")
    finally:
        for store in stores:
            await store.close()
    assert results == {"one": "one", "two": "two"}
    assert sorted(bodies) == ["one", "two"]
