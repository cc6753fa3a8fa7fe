"""A spawn's opening (the take and first row its caller writes) when it fails, and a run handed on.

- A run handed to the fleet mid-step (its worker stopped serving) answers the request it was
  driving with ``ActorStopped``, saying a sweep of any worker goes on with it from its newest row.
- A spawn of an id that a live owner holds raises ``RunExists``, writes no row and leaves nothing
  live or reserved here: once the owner lets go, the id can be spawned. The owner is another store
  on the same database (its first row is refused) or this very store (its take is refused).
- A first row that takes longer than its bound makes the spawn raise ``TimeoutError`` naming the run
  and the bound, and the run's take is released (the id can be spawned again at once).
- A traced spawn whose opening fails (its take refused, or its first row) ends its ``invoke_agent``
  span with the error, and leaves no span current in the caller.

Every test is time-bounded.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import pytest
from _tool_agents import tool_agent
from conftest import Backend
from opentelemetry import trace
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode
from test_tracing import spans  # noqa: F401 (a fixture)

from actors import ActorStopped, ActorSystem, Agent, RunExists
from actors.lowlevel import run_actor_module
from actors.models import FunctionModel, Message
from stores import RUN_END, Checkpoint, Store

pytestmark = pytest.mark.anyio

#: Bound on one test's body (seconds); a hang fails instead of stalling the suite.
LIMIT = 20.0
#: The first row's bound in the tests of a first row that hangs (seconds).
OPEN_BOUND = 0.3


def answering_agent() -> Agent:
    def model(messages: list[Message]) -> str:
        return f"answer: {messages[-1].content}"

    return Agent("answerer", FunctionModel(model))


def first_row_hangs(store: Store) -> Callable[[], None]:
    """Make the store's ``append`` (on this instance only) hang on a run's first row until
    cancelled; returns what puts the real ``append`` back."""
    real: Callable[[Checkpoint], Awaitable[Any]] = store.append

    async def append(row: Checkpoint) -> Any:
        if row.seq == 0:
            await anyio.sleep_forever()
        return await real(row)

    store.append = append  # type: ignore[method-assign]

    def restore() -> None:
        store.append = real  # type: ignore[method-assign]

    return restore


def handed_text(execution_id: str) -> str:
    return (
        f"run {execution_id!r} was handed to the fleet (its worker stopped serving); a sweep of any "
        "worker goes on with it from its newest row"
    )


async def test_a_run_handed_to_the_fleet_mid_step_answers_actor_stopped(store_backend: Backend) -> None:
    entered, never = anyio.Event(), anyio.Event()

    async def body() -> str:
        entered.set()
        await never.wait()
        return "never"

    agent = tool_agent(body)
    async with store_backend.open() as store, ActorSystem(store, runners=[agent]) as system:
        with anyio.fail_after(LIMIT):
            ref = await system.spawn(agent, "go", execution_id="handed")
            await entered.wait()
            await system._runs.release(["handed"], grace=0.05)  # what a worker that stops serving does
            with pytest.raises(ActorStopped) as stopped:
                await ref.result()
            assert str(stopped.value) == handed_text("handed")
            assert not system._runs.is_live("handed")
            assert (await system.status("handed")).status == "orphaned"  # for any sweep to go on with


async def test_a_run_handed_to_the_fleet_stops_at_its_next_row(store_backend: Backend) -> None:
    """Released while its tool runs (within its grace), the run stops after the tool's row, unended."""
    entered, go = anyio.Event(), anyio.Event()

    async def body() -> str:
        entered.set()
        await go.wait()
        return "worked"

    agent = tool_agent(body)
    async with store_backend.open() as store, ActorSystem(store, runners=[agent]) as system:
        with anyio.fail_after(LIMIT):
            ref = await system.spawn(agent, "go", execution_id="handed")
            await entered.wait()
            async with anyio.create_task_group() as tg:
                tg.start_soon(lambda: system._runs.release(["handed"], grace=LIMIT))
                await anyio.sleep(0.05)
                go.set()
            with pytest.raises(ActorStopped) as stopped:
                await ref.result()
            assert str(stopped.value) == handed_text("handed")
            rows = await system.history("handed")
            assert "tool_call" in [row.step_type for row in rows]  # the tool's row was written
            assert RUN_END not in [row.step_type for row in rows]  # ... and the run did not end
            assert (await system.status("handed")).status == "orphaned"


async def test_a_spawn_of_an_id_another_store_holds_is_refused_and_leaves_nothing(
    store_backend: Backend,
) -> None:
    agent = answering_agent()
    async with store_backend.open() as other, store_backend.open() as store:
        async with ActorSystem(store, runners=[agent]) as system:
            with anyio.fail_after(LIMIT):
                assert await other.try_lock("taken")
                with pytest.raises(RunExists):
                    await system.spawn(agent, "hi", execution_id="taken")
                assert await store.latest("taken") is None  # no row written
                assert system.runtime.lookup("taken") is None
                assert not system.runtime.registry.reserved("taken")
                assert not system._runs.is_live("taken")
                await other.unlock("taken")
                result = await (await system.spawn(agent, "hi", execution_id="taken")).result()
                assert (result.status, result.output) == ("completed", "answer: hi")


async def test_a_spawn_of_an_id_its_own_store_holds_is_refused_before_any_write(
    store_backend: Backend,
) -> None:
    """The take itself is refused (this store holds the run already: a take of its own in flight)."""
    agent = answering_agent()
    async with store_backend.open() as store, ActorSystem(store, runners=[agent]) as system:
        with anyio.fail_after(LIMIT):
            assert await store.try_lock("held")
            with pytest.raises(RunExists):
                await system.spawn(agent, "hi", execution_id="held")
            assert await store.latest("held") is None
            assert system.runtime.lookup("held") is None
            assert not system.runtime.registry.reserved("held")
            await store.unlock("held")
            result = await (await system.spawn(agent, "hi", execution_id="held")).result()
            assert (result.status, result.output) == ("completed", "answer: hi")


async def test_a_first_row_past_its_bound_times_out_and_releases_the_run(
    store_backend: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(run_actor_module, "_OPEN_TIMEOUT", OPEN_BOUND)
    agent = answering_agent()
    async with store_backend.open() as store, ActorSystem(store, runners=[agent]) as system:
        with anyio.fail_after(LIMIT):
            restore = first_row_hangs(store)
            with pytest.raises(TimeoutError) as timed_out:
                await system.spawn(agent, "hi", execution_id="slow")
            assert str(timed_out.value) == f"the first row of run 'slow' took over {OPEN_BOUND} s"
            assert system.runtime.lookup("slow") is None and not system._runs.is_live("slow")
            restore()
            # The take was released: the id is free for this store's next spawn (a take left held
            # would refuse it) and for another store.
            result = await (await system.spawn(agent, "hi", execution_id="slow")).result()
            assert (result.status, result.output) == ("completed", "answer: hi")
        async with store_backend.open() as other:
            assert await other.try_lock("slow")
            await other.unlock("slow")


def invoke_agent_spans(exporter: InMemorySpanExporter) -> list[Any]:
    return [s for s in exporter.get_finished_spans() if s.name.startswith("invoke_agent ")]


async def test_a_traced_spawn_refused_its_take_ends_its_span_with_the_error(
    spans: InMemorySpanExporter,  # noqa: F811
    store_backend: Backend,
) -> None:
    agent = answering_agent()
    async with store_backend.open() as other, store_backend.open() as store:
        async with ActorSystem(store, runners=[agent]) as system:
            with anyio.fail_after(LIMIT):
                assert await other.try_lock("taken")
                with pytest.raises(RunExists) as refused:
                    await system.spawn(agent, "hi", execution_id="taken")
                assert not trace.get_current_span().get_span_context().is_valid  # nothing left current
                await other.unlock("taken")
    [span] = invoke_agent_spans(spans)
    assert span.end_time is not None
    assert span.attributes is not None and span.attributes["tether.execution_id"] == "taken"
    assert span.status.status_code is StatusCode.ERROR
    assert span.status.description == f"RunExists: {refused.value}"
    assert span.attributes["error.type"] == "RunExists"
    assert [event.name for event in span.events] == ["exception"]


async def test_a_traced_spawn_refused_by_its_own_store_ends_its_span_with_the_error(
    spans: InMemorySpanExporter,  # noqa: F811
    store_backend: Backend,
) -> None:
    agent = answering_agent()
    async with store_backend.open() as store, ActorSystem(store, runners=[agent]) as system:
        with anyio.fail_after(LIMIT):
            assert await store.try_lock("held")
            with pytest.raises(RunExists) as refused:
                await system.spawn(agent, "hi", execution_id="held")
            assert not trace.get_current_span().get_span_context().is_valid  # nothing left current
            await store.unlock("held")
    [span] = invoke_agent_spans(spans)
    assert span.end_time is not None
    assert span.attributes is not None and span.attributes["tether.execution_id"] == "held"
    assert span.status.status_code is StatusCode.ERROR
    assert span.status.description == f"RunExists: {refused.value}"
    assert span.attributes["error.type"] == "RunExists"


async def test_a_traced_spawn_whose_first_row_times_out_ends_its_span_with_the_error(
    spans: InMemorySpanExporter,  # noqa: F811
    store_backend: Backend,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(run_actor_module, "_OPEN_TIMEOUT", OPEN_BOUND)
    agent = answering_agent()
    async with store_backend.open() as store, ActorSystem(store, runners=[agent]) as system:
        with anyio.fail_after(LIMIT):
            first_row_hangs(store)
            with pytest.raises(TimeoutError) as timed_out:
                await system.spawn(agent, "hi", execution_id="slow")
            assert not trace.get_current_span().get_span_context().is_valid  # nothing left current
    [span] = invoke_agent_spans(spans)
    assert span.end_time is not None
    assert span.attributes is not None and span.attributes["tether.execution_id"] == "slow"
    assert span.status.status_code is StatusCode.ERROR
    assert span.status.description == f"TimeoutError: {timed_out.value}"
    assert span.attributes["error.type"] == "TimeoutError"
