"""Flow control in the store, on SQLite and PostgreSQL: a sweep's take under a queue's limits.

Two store instances stand for two processes (two owner ids, two liveness locks): the limits hold
across them, a closed store's slots are free at once (its lock is gone), a rate refuses a start
until its window passes, the listing puts higher priorities first, and two declarations of one
queue keep the stricter with a WARNING. The rules alone (``Queue``, ``parse_queue``, ``stricter``,
``admit``) are checked without a store.
"""

from __future__ import annotations

import logging
from datetime import timedelta

import anyio
import pytest
from conftest import Backend

from stores import Admission, Checkpoint, Queue, Store, parse_queue
from stores.lowlevel import admit, start_slot, stricter

pytestmark = pytest.mark.anyio


def first_row(execution_id: str) -> Checkpoint:
    return Checkpoint(execution_id=execution_id, seq=0, runner="a", node_id="turn:0", state_snapshot={})


async def enqueued(
    store: Store, execution_id: str, queue: str, key: str | None = None, priority: int = 0
) -> None:
    """A run's first row, handed to the fleet in ``queue`` (what ``system.enqueue`` writes)."""
    assert await store.try_lock(execution_id)
    await store.append(first_row(execution_id))
    await store.hand_off(execution_id, queue, key, priority)  # type: ignore[attr-defined]


async def opened(backend: Backend) -> Store:
    store = backend.open()
    await store.setup()
    return store


# -- the rules ------------------------------------------------------------------------------------


def test_a_queue_refuses_bad_limits_naming_them() -> None:
    for bad, named in [
        ({"concurrency": 0}, "concurrency"),
        ({"per_key": True}, "per_key"),
        ({"rate": (0, timedelta(seconds=1))}, "count"),
        ({"rate": (3, timedelta(0))}, "window"),
        ({"rate": (3, 1.0)}, "window"),
    ]:
        with pytest.raises(ValueError, match=named):
            Queue("q", **bad)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="queue name"):
        Queue("")
    with pytest.raises(TypeError):
        Queue("q", 3)  # type: ignore[misc]  # the limits are keyword-only


def test_a_spec_parses_and_a_bad_one_says_what_is_wrong() -> None:
    assert parse_queue("llm:concurrency=3,per_key=1,rate=10/60s") == Queue(
        "llm", concurrency=3, per_key=1, rate=(10, timedelta(seconds=60))
    )
    assert parse_queue("q:rate=5/500ms").rate == (5, timedelta(milliseconds=500))
    assert parse_queue("q:rate=2/1m").rate == (2, timedelta(minutes=1))
    for spec, named in [
        ("llm", "NAME:limit=value"),
        ("llm:", "no limit"),
        ("llm:concurrency=0", "concurrency must be a whole number"),
        ("llm:concurrency=x", "concurrency must be a whole number"),
        ("llm:burst=3", "unknown limit 'burst'"),
        ("llm:rate=10", "COUNT/WINDOW"),
        ("llm:rate=10/0s", "COUNT/WINDOW"),
        ("llm:concurrency=1,concurrency=2", "given twice"),
        ("llm:per_key", "is not limit=value"),
    ]:
        with pytest.raises(ValueError, match=named) as info:
            parse_queue(spec)
        assert repr(spec) in str(info.value)


def test_the_stricter_of_two_declarations_holds() -> None:
    a = Queue("q", concurrency=3, rate=(10, timedelta(seconds=60)))
    b = Queue("q", concurrency=5, per_key=1, rate=(5, timedelta(seconds=2)))
    assert stricter(a, b) == Queue("q", concurrency=3, per_key=1, rate=(10, timedelta(seconds=60)))
    assert stricter(b, a) == stricter(a, b)
    assert stricter(Queue("q"), b) == b


def test_admit_counts_slots_keys_and_the_rate_window() -> None:
    q = Queue("q", concurrency=2, per_key=1, rate=(2, timedelta(seconds=10)))
    assert admit(q, 1, 0, None, 100.0) == Admission(True)
    assert admit(q, 2, 0, None, 100.0) == Admission(False, "queue")
    assert admit(q, 1, 1, None, 100.0) == Admission(False, "key")
    assert admit(q, 1, None, None, 100.0) == Admission(True)  # no key: no per-key limit
    assert admit(q, 0, 0, 95.0, 100.0) == Admission(False, "rate", 5.0)  # the 2nd most recent: 5 s ago
    assert admit(q, 0, 0, 90.0, 100.0) == Admission(True)  # 10 s ago: out of the window
    assert start_slot(0, None, None, 2) == 0 and start_slot(1, 0, 0, 2) == 1
    assert start_slot(2, 1, 0, 2) == 0  # full: the oldest start's slot


# -- the store ------------------------------------------------------------------------------------


async def test_concurrency_holds_across_stores_and_a_closed_stores_slots_free_at_once(
    store_backend: Backend,
) -> None:
    a, b = await opened(store_backend), await opened(store_backend)
    try:
        assert await a.declare_queues([Queue("q", concurrency=2)]) == [Queue("q", concurrency=2)]  # type: ignore[attr-defined]
        for i in range(5):
            await enqueued(a, f"r{i}", "q")
        assert await a.take_queued("r0") == Admission(True)  # type: ignore[attr-defined]
        assert await b.take_queued("r1") == Admission(True)  # type: ignore[attr-defined]
        assert await b.take_queued("r2") == Admission(False, "queue", queue="q")  # type: ignore[attr-defined]
        assert await a.take_queued("r2") == Admission(False, "queue", queue="q")  # type: ignore[attr-defined]
        assert await b.take_queued("r0") == Admission(False)  # a live owner holds it
        await a.close()  # its liveness lock goes: r0's slot is free, r0 an orphan
        with anyio.fail_after(10):
            while not (await b.take_queued("r2")).taken:  # type: ignore[attr-defined]  # noqa: ASYNC110
                await anyio.sleep(0.005)
        assert await b.take_queued("r3") == Admission(False, "queue", queue="q")  # type: ignore[attr-defined]
        assert "r0" in await b.orphans()
        await b.unlock("r1")  # handed back mid-step: a slot again
        assert await b.take_queued("r3") == Admission(True)  # type: ignore[attr-defined]
    finally:
        await a.close()
        await b.close()


async def test_per_key_and_an_unlimited_queue(store_backend: Backend) -> None:
    store = await opened(store_backend)
    try:
        await store.declare_queues([Queue("tenants", per_key=1)])  # type: ignore[attr-defined]
        await enqueued(store, "a1", "tenants", "a")
        await enqueued(store, "a2", "tenants", "a")
        await enqueued(store, "b1", "tenants", "b")
        await enqueued(store, "n1", "tenants")
        await enqueued(store, "free", "default")
        await enqueued(store, "free2", "default")
        assert (await store.take_queued("a1")).taken  # type: ignore[attr-defined]
        assert await store.take_queued("a2") == Admission(False, "key", queue="tenants", key="a")  # type: ignore[attr-defined]
        assert (await store.take_queued("b1")).taken  # type: ignore[attr-defined]
        assert (await store.take_queued("n1")).taken  # type: ignore[attr-defined]  # no key: no limit
        assert (await store.take_queued("free")).taken  # type: ignore[attr-defined]
        assert (await store.take_queued("free2")).taken  # type: ignore[attr-defined]
        assert await store.orphans(10, full_keys=[("tenants", "a")]) == []  # type: ignore[call-arg]
        await store.untake("a1")  # type: ignore[attr-defined]  # a take no activation used
        assert (await store.take_queued("a2")).taken  # type: ignore[attr-defined]
        assert await store.queues_of(["a1", "n1", "x"]) == {  # type: ignore[attr-defined]
            "a1": ("tenants", "a"),
            "n1": ("tenants", None),
        }
    finally:
        await store.close()


async def test_a_rate_admits_n_starts_per_window_and_says_when_the_next_fits(store_backend: Backend) -> None:
    a, b = await opened(store_backend), await opened(store_backend)
    try:
        await a.declare_queues([Queue("r", rate=(2, timedelta(seconds=0.6)))])  # type: ignore[attr-defined]
        for i in range(5):
            await enqueued(a, f"r{i}", "r")
        assert (await a.take_queued("r0")).taken  # type: ignore[attr-defined]
        assert (await b.take_queued("r1")).taken  # type: ignore[attr-defined]
        both_out = anyio.current_time() + 0.6 + 0.05  # both starts are out of the window then
        refused = await b.take_queued("r2")  # type: ignore[attr-defined]
        assert refused.taken is False and refused.full == "rate"
        assert refused.retry_in is not None and 0.3 < refused.retry_in <= 0.6
        await a.unlock("r0")  # a run that ends frees no start: the window does
        assert (await a.take_queued("r2")).full == "rate"  # type: ignore[attr-defined]
        await anyio.sleep(both_out - anyio.current_time())
        assert (await a.take_queued("r2")).taken  # type: ignore[attr-defined]
        assert (await b.take_queued("r3")).taken  # type: ignore[attr-defined]
        assert (await b.take_queued("r4")).full == "rate"  # type: ignore[attr-defined]
    finally:
        await a.close()
        await b.close()


async def test_the_listing_puts_higher_priority_first_then_the_oldest(store_backend: Backend) -> None:
    store = await opened(store_backend)
    try:
        for eid, priority in [("p0", 0), ("p5", 5), ("p1", 1), ("p5b", 5), ("other", 9)]:
            await enqueued(store, eid, "other" if eid == "other" else "q", priority=priority)
        assert await store.orphans(10) == ["other", "p5", "p5b", "p1", "p0"]
        assert await store.orphans(10, full=["other"]) == ["p5", "p5b", "p1", "p0"]  # type: ignore[call-arg]
        assert await store.orphans(10, full_keys=[("q", "x")]) == ["other", "p5", "p5b", "p1", "p0"]  # type: ignore[call-arg]
    finally:
        await store.close()


async def test_disagreeing_workers_log_a_warning_and_the_stricter_holds(
    store_backend: Backend, caplog: pytest.LogCaptureFixture
) -> None:
    a, b = await opened(store_backend), await opened(store_backend)
    try:
        await a.declare_queues([Queue("q", concurrency=3)])  # type: ignore[attr-defined]
        with caplog.at_level(logging.WARNING, logger="tether"):
            held = await b.declare_queues([Queue("q", concurrency=1, per_key=2)])  # type: ignore[attr-defined]
        assert held == [Queue("q", concurrency=1, per_key=2)]
        assert any("disagree" in r.getMessage() and "'q'" in r.getMessage() for r in caplog.records)
        for i in range(2):
            await enqueued(a, f"r{i}", "q")
        assert (await a.take_queued("r0")).taken  # type: ignore[attr-defined]
        assert (await a.take_queued("r1")).full == "queue"  # type: ignore[attr-defined]  # 1 holds, not 3
        caplog.clear()
        await b.close()  # the stricter declarer is gone: a new declaration replaces it quietly
        c = await opened(store_backend)
        try:
            with caplog.at_level(logging.WARNING, logger="tether"):
                assert await c.declare_queues([Queue("q", concurrency=3)]) == [Queue("q", concurrency=3)]  # type: ignore[attr-defined]
            assert not [r for r in caplog.records if "disagree" in r.getMessage()]
        finally:
            await c.close()
    finally:
        await a.close()
        await b.close()


async def test_a_lower_rate_count_declared_keeps_only_the_most_recent_starts(store_backend: Backend) -> None:
    a, b = await opened(store_backend), await opened(store_backend)
    try:
        await a.declare_queues([Queue("r", rate=(3, timedelta(seconds=0.4)))])  # type: ignore[attr-defined]
        for i in range(4):
            await enqueued(a, f"r{i}", "r")
        for i in range(3):
            assert (await a.take_queued(f"r{i}")).taken  # type: ignore[attr-defined]
        await anyio.sleep(0.45)  # the three starts are out of the window
        # A stricter rate, 1 start per 10 s: the most recent of the three starts is kept, and it is
        # within 10 s, so the next start waits for it.
        held = await b.declare_queues([Queue("r", rate=(1, timedelta(seconds=10)))])  # type: ignore[attr-defined]
        assert held == [Queue("r", rate=(1, timedelta(seconds=10)))]
        refused = await a.take_queued("r3")  # type: ignore[attr-defined]
        assert refused.full == "rate" and refused.retry_in is not None and 9.0 < refused.retry_in < 10.0
    finally:
        await a.close()
        await b.close()
