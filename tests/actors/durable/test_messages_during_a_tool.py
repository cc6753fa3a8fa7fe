"""A run is spoken to while a tool runs: a status request is answered and a cancel takes effect.

While a tool works for seconds, ``system.status`` answers at once (from the store, with no lock
another process could need) and says ``running``; a ``cancel`` ends the run with a failed
``run_end`` naming it, and no model call follows. Both backends, an async and a sync tool.
"""

from __future__ import annotations

import threading
import time

import anyio
import pytest
from conftest import Backend

from actors import Actor, ActorSystem, Agent, Cancel, tool
from actors.lowlevel import Reply, Request
from actors.models import FunctionModel, Message, ModelReply, ToolCall
from stores import FAILED, RUN_END

pytestmark = pytest.mark.anyio

TOOL_SECONDS = 5.0


def slow_agent(calls: list[str], started: threading.Event, *, sync: bool) -> Agent:
    if sync:

        @tool(timeout=TOOL_SECONDS * 2)
        def work(item: str) -> str:
            """Work on an item for a while (in a thread)."""
            started.set()
            time.sleep(TOOL_SECONDS)
            return f"worked on {item}"

    else:

        @tool
        async def work(item: str) -> str:
            """Work on an item for a while."""
            started.set()
            await anyio.sleep(TOOL_SECONDS)
            return f"worked on {item}"

    def model(messages: list[Message]) -> str | ModelReply:
        calls.append(messages[-1].role)
        if messages[-1].role == "tool":
            return "finished"
        return ModelReply(tool_calls=[ToolCall("work", {"item": "1"})])

    return Agent("slow", FunctionModel(model), tools=[work])


@pytest.mark.parametrize("sync", [False, True], ids=["async-tool", "sync-tool"])
async def test_status_answers_and_cancel_ends_the_run_while_a_tool_runs(
    store_backend: Backend, sync: bool
) -> None:
    calls: list[str] = []
    started = threading.Event()
    agent = slow_agent(calls, started, sync=sync)
    with anyio.fail_after(TOOL_SECONDS * 4):
        async with store_backend.open() as store, ActorSystem(store, runners=[agent]) as system:
            began = time.monotonic()
            ref = await system.spawn(agent, "go", execution_id="slow")
            while not started.is_set():  # noqa: ASYNC110 (set by the tool, which may run in a thread)
                await anyio.sleep(0.005)
            took: list[float] = []
            for _ in range(5):
                asked = time.perf_counter()
                summary = await system.status("slow")
                took.append(time.perf_counter() - asked)
                assert summary.status == "running"
            assert min(took) < 0.05, f"status took {took}"
            assert max(took) < 1.0, f"status took {took}"
            cancelled = await system.cancel("slow", reason="operator stop")
            result = await ref.result(timeout=TOOL_SECONDS * 2)
            ended = time.monotonic() - began
            rows = await system.history("slow")
    assert (cancelled.status, result.status) == ("failed", "failed")
    assert result.error is not None and "operator stop" in result.error
    assert (rows[-1].step_type, rows[-1].status) == (RUN_END, FAILED)
    assert calls == ["user"]  # no model call after the cancel
    assert ended < TOOL_SECONDS * 2


@pytest.mark.parametrize("sync", [False, True], ids=["async-tool", "sync-tool"])
async def test_a_cancel_sent_to_the_runs_mailbox_cuts_the_tool_at_once(
    store_backend: Backend, sync: bool
) -> None:
    """The run's actor reads its mailbox while the tool runs: a Cancel delivered there (no other way
    in) ends the run within a second, not when the tool's 5 s are over."""
    calls: list[str] = []
    started = threading.Event()
    agent = slow_agent(calls, started, sync=sync)
    with anyio.fail_after(TOOL_SECONDS * 4):
        async with store_backend.open() as store, ActorSystem(store, runners=[agent]) as system:
            ref = await system.spawn(agent, "go", execution_id="cut")
            while not started.is_set():  # noqa: ASYNC110 (set by the tool, which may run in a thread)
                await anyio.sleep(0.005)
            sent = time.monotonic()
            reply = Reply()
            await system.runtime.deliver("cut", no_activation, Request(Cancel("from the mailbox"), reply))
            result = await ref.result(timeout=TOOL_SECONDS * 2)
            took = time.monotonic() - sent
            await reply.done.wait()
    assert result.status == "failed" and result.error is not None and "from the mailbox" in result.error
    assert took < 1.0, f"the cancel took {took:.2f} s"
    assert reply.result is not None and reply.result.status == "failed"  # answered once the run ended
    assert calls == ["user"]


def no_activation() -> Actor:
    raise AssertionError("the run's actor is live: the delivery must not activate another one")
