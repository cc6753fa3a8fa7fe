"""Signals into a run: the inbox, steering a conversation with a ``"message"`` signal, refusals.

A signal is committed before ``signal()`` returns, from any process, without the runner; a
``"message"`` signal is a user message at the run's next model turn, consumed by that turn's row
in the same transaction, exactly once.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import pytest
from conftest import Backend

from actors import (
    ActorSystem,
    Agent,
    AlreadyResumed,
    RunNotFound,
    SerializationError,
    Signal,
    tool,
)
from actors.models import FunctionModel, Message, ModelReply, ToolCall
from stores import CONSUMES, LLM_CALL

pytestmark = pytest.mark.anyio

ROOT = Path(__file__).resolve().parents[3]
CHILD = Path(__file__).with_name("_signal_child.py")
ENV = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "tests"), str(CHILD.parent)])}


class Sender:
    """A child process that sends signals (``_signal_child.py``), started before it is needed."""

    def __init__(self, process: anyio.abc.Process) -> None:
        self.process = process
        self._buffer = b""

    async def _line(self) -> dict[str, Any]:
        assert self.process.stdout is not None
        with anyio.fail_after(60):
            while b"\n" not in self._buffer:
                self._buffer += await self.process.stdout.receive()
        line, self._buffer = self._buffer.split(b"\n", 1)
        return dict(json.loads(line))

    async def send(self, execution_id: str, name: str, payload: Any) -> str:
        """Send one signal from the child; its outcome (``sent`` or the error's type)."""
        assert self.process.stdin is not None
        await self.process.stdin.send(f"{execution_id} {name} {json.dumps(payload)}\n".encode())
        outcome = await self._line()
        return "sent" if outcome.get("sent") else str(outcome["error"])


@contextlib.asynccontextmanager
async def sender(backend: Backend) -> AsyncIterator[Sender]:
    """A ready :class:`Sender` on ``backend``'s database (closed, and waited for, on exit)."""
    process = await anyio.open_process([sys.executable, str(CHILD), *backend.child_args()], env=ENV)
    child = Sender(process)
    try:
        assert (await child._line()).get("ready")
        yield child
    finally:
        with anyio.CancelScope(shield=True), anyio.move_on_after(30):
            assert process.stdin is not None
            await process.stdin.aclose()
            await process.wait()
        if process.returncode is None:
            process.kill()


def _steered_agent(calls: list[list[Message]], entered: anyio.Event) -> Agent:
    @tool
    async def slow_lookup(order: str) -> str:
        """Look an order up (it takes a second)."""
        entered.set()
        await anyio.sleep(1.0)
        return f"order {order}: shipped"

    def model(messages: list[Message]) -> str | ModelReply:
        calls.append(list(messages))
        if len(calls) == 1:
            return ModelReply(tool_calls=[ToolCall("slow_lookup", {"order": "A1"})])
        return f"answered after {len(calls)} calls"

    return Agent("steered", FunctionModel(model), tools=[slow_lookup])


async def test_a_message_signal_sent_from_another_process_during_a_tool_steers_the_next_turn_once(
    store_backend: Backend,
) -> None:
    calls: list[list[Message]] = []
    entered = anyio.Event()
    agent = _steered_agent(calls, entered)
    async with (
        store_backend.open() as store,
        ActorSystem(store, runners=[agent]) as system,
        sender(store_backend) as child,
    ):
        ref = await system.spawn(agent, "where is A1?")
        with anyio.fail_after(30):
            await entered.wait()
        assert await child.send(ref.execution_id, "message", "in euros") == "sent"
        with anyio.fail_after(30):
            result = await ref.result()
        assert result.status == "completed"
        assert len(calls) == 2
        first, second = ([m.content for m in call if m.role == "user"] for call in calls)
        assert first == ["where is A1?"]
        assert second == ["where is A1?", "in euros"]  # exactly once, after the tool's result
        assert [m.role for m in calls[1]][-2:] == ["tool", "user"]
        rows = await system.history(ref.execution_id)
        turns = [row for row in rows if row.step_type == LLM_CALL]
        assert turns[0].node_input.get(CONSUMES) is None
        assert len(turns[1].node_input[CONSUMES]) == 1  # the turn's row consumed it
        assert turns[1].state_snapshot["messages"][-1] == {"role": "user", "content": "in euros"}
        assert await store.signals(ref.execution_id) == []
        consumed = await store.signals(ref.execution_id, consumed_by=turns[1].seq)
        assert [(s.name, s.payload) for s in consumed] == [("message", "in euros")]


async def test_signals_to_a_finished_or_unknown_run_or_with_a_bad_payload_are_refused_writing_nothing(
    store_backend: Backend,
) -> None:
    agent = Agent("plain", FunctionModel(lambda messages: "done"))
    async with store_backend.open() as store, ActorSystem(store, runners=[agent]) as system:
        ref = await system.spawn(agent, "hi")
        assert (await ref.result()).status == "completed"
        with pytest.raises(AlreadyResumed):
            await system.signal(ref.execution_id, "message", "too late")
        with pytest.raises(AlreadyResumed):
            await system.send(ref.execution_id, Signal("message", "too late"))
        with pytest.raises(RunNotFound):
            await system.signal("no-such-run", "go")
        bad_id = await system.enqueue(agent, "queued")
        with pytest.raises(SerializationError) as caught:
            await system.signal(bad_id, "go", {"when": float("nan")})
        assert caught.value.path == "$.payload.when"
        with pytest.raises(SerializationError):
            await system.send(bad_id, Signal("go", b"bytes"))
        assert await store.signals(bad_id) == []  # nothing written
        assert await store.signals(ref.execution_id) == []
        # The same refusals from another process.
        async with sender(store_backend) as child:
            assert await child.send(ref.execution_id, "x", 1) == "AlreadyResumed"
            assert await child.send("no-such-run", "x", 1) == "RunNotFound"
            assert await child.send(bad_id, "go", 0) == "sent"
        # A queued run keeps its signals, in order, until consumed.
        await system.signal(bad_id, "go", {"n": 1})
        await system.send(bad_id, Signal("go", [2]))
        assert [s.payload for s in await store.signals(bad_id, name="go")] == [0, {"n": 1}, [2]]


def test_signal_is_a_frozen_struct_that_refuses_unknown_fields() -> None:
    signal = Signal("message", "hi")
    assert (signal.name, signal.payload) == ("message", "hi")
    assert Signal("go").payload is None
    with pytest.raises(TypeError):
        Signal("go", data=1)  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        Signal("")
    with pytest.raises(AttributeError):
        signal.name = "other"  # type: ignore[misc]
