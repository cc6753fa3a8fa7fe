"""Events across processes, both backends, real child processes.

A run pauses in one process and is resumed in another: the two legs' live iterators together yield
exactly the durable events that one replay with ``since=0`` yields, in order; a third process
that never drives the run follows the second leg live. A streamed model call killed mid-stream
(SIGKILL) is re-issued by crash recovery in another process with a higher ``attempt``.
"""

from __future__ import annotations

import sys
from pathlib import Path

import anyio
import anyio.abc
import pytest
from conftest import Backend

from actors import ActorSystem
from actors.events import Event, StepStarted, TextDelta, ToolFinished, decode_event, encode_event

pytestmark = pytest.mark.anyio

LIMIT = 120.0
CHILD = Path(__file__).with_name("_events_child.py")


class Child:
    """A child process of ``_events_child.py``, its stdout read line by line."""

    def __init__(self, process: anyio.abc.Process) -> None:
        self.process = process
        assert process.stdout is not None
        self._stdout = process.stdout
        self._buffer = b""

    @classmethod
    async def start(cls, mode: str, backend: Backend, execution_id: str, *extra: str) -> Child:
        process = await anyio.open_process(
            [sys.executable, str(CHILD), mode, *backend.child_args(), execution_id, *extra]
        )
        return cls(process)

    async def line(self) -> str:
        while b"\n" not in self._buffer:
            chunk = await self._stdout.receive()
            self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\n", 1)
        return line.decode()

    async def events(self) -> list[str]:
        """The NDJSON lines up to ``END``, then the exit status (must be 0)."""
        lines = []
        while (line := await self.line()) != "END":
            lines.append(line)
        assert await self.process.wait() == 0
        return lines


async def replay(backend: Backend, execution_id: str) -> list[str]:
    store = backend.open()
    async with store, ActorSystem(store) as system:
        return [encode_event(e).decode() async for e in system.ref(execution_id).events(since=0)]


def kinds(lines: list[str]) -> list[tuple[str, str, str | None]]:
    found = []
    for line in lines:
        event = decode_event(line)
        found.append((type(event).__name__, getattr(event, "node_id", "-"), event.agent_path))
    return found


async def test_two_legs_in_two_processes_are_one_replay_and_a_third_follows(store_backend: Backend) -> None:
    eid = "events-legs"
    with anyio.fail_after(LIMIT):
        first = await (await Child.start("leg1", store_backend, eid)).events()
        follower = await Child.start("follow", store_backend, eid)
        assert await follower.line() == "READY"
        second = await (await Child.start("leg2", store_backend, eid)).events()
        followed = await follower.events()
        whole = await replay(store_backend, eid)

    assert first + second == whole
    assert followed == second  # the third process saw the second leg live, every event once
    path, lookup, flaky, refund = "agent:approver", ".../tool:lookup", ".../tool:flaky", ".../tool:refund"
    expected = [
        ("StepStarted", "turn:0", path),
        ("StepStarted", "turn:0/tool:lookup", lookup),
        ("ToolFinished", "turn:0/tool:lookup", lookup),
        ("StepStarted", "turn:0/tool:flaky", flaky),
        ("ToolFinished", "turn:0/tool:flaky", flaky),
        ("StepStarted", "turn:1", path),
        ("StepStarted", "turn:1/tool:refund", refund),
        ("Paused", "turn:1/tool:refund", refund),
        ("Resumed", "turn:1/tool:refund", refund),
        ("ToolFinished", "turn:1/tool:refund", refund),
        ("StepStarted", "turn:2", path),
        ("RunEnded", "run_end", path),
    ]
    got = [(kind, node, (p or "").replace(path + "/", ".../")) for kind, node, p in kinds(whole)]
    assert got == expected
    assert len(first) == 8  # leg 1 ends at its pause
    events = [decode_event(line) for line in whole]
    finished = [e for e in events if isinstance(e, ToolFinished)]
    assert [(e.tool, e.ok) for e in finished] == [("lookup", True), ("flaky", False), ("refund", True)]
    assert finished[0].output == "order A-1: 30 EUR"
    assert "the inventory service is down" in (finished[1].error or "")
    assert finished[2].output == "approved=True" and finished[2].tool_seq < finished[2].seq
    assert [e.seq for e in events] == sorted(e.seq for e in events)


async def test_a_killed_streamed_call_is_reissued_with_a_higher_attempt(store_backend: Backend) -> None:
    eid = "events-stream"
    with anyio.fail_after(LIMIT):
        streamer = await Child.start("stream", store_backend, eid)
        seen: list[Event] = []
        while sum(isinstance(e, TextDelta) for e in seen) < 3:
            seen.append(decode_event(await streamer.line()))
        streamer.process.kill()  # SIGKILL in the middle of the streamed model call
        await streamer.process.wait()
        recovered = [
            decode_event(line) for line in await (await Child.start("recover", store_backend, eid)).events()
        ]
        whole = [decode_event(line) for line in await replay(store_backend, eid)]

    first = [e for e in seen if isinstance(e, TextDelta)]
    assert [d.text for d in first] == ["The ", "refund ", "is "]
    assert {d.attempt for d in first} == {1}
    again = [e for e in recovered if isinstance(e, TextDelta)]
    assert "".join(d.text for d in again) == "The refund is on its way."
    assert {d.attempt for d in again} == {2}
    # The re-issued call has its own row, with its attempt; its deltas follow that row.
    calls = [e for e in whole if isinstance(e, StepStarted) and e.step_type == "llm_call"]
    assert [(c.node_id, c.attempt) for c in calls] == [("turn:0", 1), ("turn:0", 2)]
    assert {d.seq for d in again} == {calls[1].seq}
    position = recovered.index(next(e for e in recovered if isinstance(e, StepStarted) and e.attempt == 2))
    assert all(isinstance(e, TextDelta) for e in recovered[position + 1 : position + 1 + len(again)])
    assert type(recovered[-1]).__name__ == "RunEnded" and recovered[-1].output == "The refund is on its way."  # type: ignore[union-attr]
