"""A model turn overlaps the commit of its own ``llm_call`` row, and nothing else does.

The decision is written down in ``actors/_engine.py``. These tests hold appends of chosen rows at a
gate in a thin wrapper around a real :class:`SQLiteStore` and check: the model is called while its
turn's row is still being written, but nothing that depends on the turn (a tool, the next row, the
result) happens before that row is down; a failed ``llm_call`` append discards the reply and ends the
run exactly as the strict order (append, then call) does; a ``tool_call`` row is always down before
its tool starts; a cancel or a shutdown while an overlapped append is in flight leaves no task behind
and a run that can be resumed; a process that dies inside an overlapped model call before the
turn's row is down re-enters at the tool's row (the tool runs again), where the strict order has the
row down first. A ``FunctionModel`` over a plain function is not overlapped (its Python holds the
loop until it answers), so it serves as the strict reference. Every test is bounded.
"""

from __future__ import annotations

import asyncio
import os
import sys
import textwrap
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest

from actors import ActorSystem, Agent, RunResult, SerializationError, WriteConflict, tool
from actors._engine import _overlaps
from actors.models import FunctionModel, Message, ModelReply, ToolCall
from stores import Checkpoint, SQLiteStore
from stores._errors import StoreUnavailable

pytestmark = pytest.mark.anyio

#: Bound on one test's body (seconds).
LIMIT = 20.0
#: How long a test lets a wrongly ordered step show itself before it opens a gate.
SETTLE = 0.1
#: Bound on a child process.
CHILD_LIMIT = 60.0


class Gate:
    """Holds one append: ``reached`` is set when the append arrives, ``release`` lets it go on.

    ``after=False`` holds it before the row is written; ``after=True`` writes the row, then holds
    the confirmation. ``fail`` raises that error instead of writing (once ``fail_when`` is set).
    """

    def __init__(
        self,
        *,
        after: bool = False,
        fail: Callable[[], Exception] | None = None,
        fail_when: anyio.Event | None = None,
    ) -> None:
        self.after = after
        self.fail = fail
        self.fail_when = fail_when
        self.reached = anyio.Event()
        self.release = anyio.Event()
        self.cancelled = False


class GatedStore:
    """A real store whose ``append`` of chosen rows (by ``node_id``) waits at a :class:`Gate`.

    Everything else is delegated unchanged. ``attempted`` lists every append as it arrives and
    ``done`` every append that returned, both by ``node_id``.
    """

    def __init__(self, inner: SQLiteStore) -> None:
        self.inner = inner
        self.gates: dict[str, Gate] = {}
        self.attempted: list[str] = []
        self.done: list[str] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    async def append(self, row: Checkpoint) -> None:
        self.attempted.append(row.node_id)
        gate = self.gates.get(row.node_id)
        if gate is not None:
            gate.reached.set()
            try:
                if gate.fail is not None:
                    if gate.fail_when is not None:
                        await gate.fail_when.wait()
                    raise gate.fail()
                if gate.after:
                    await self.inner.append(row)
                await gate.release.wait()
            except anyio.get_cancelled_exc_class():
                gate.cancelled = True
                raise
            if not gate.after:
                await self.inner.append(row)
        else:
            await self.inner.append(row)
        self.done.append(row.node_id)


class Calls:
    """What the model and the tool saw: the model's calls (with the appends done at that moment)."""

    def __init__(self, store: GatedStore) -> None:
        self.store = store
        self.model: list[list[str]] = []
        self.called = [anyio.Event() for _ in range(4)]  # called[n]: the model was called n+1 times
        self.tool = 0
        self.model_cancelled = False
        self.hold_model: anyio.Event | None = None  # if given: turn 1's model call waits for it


def refund_model(calls: Calls, *, overlap: bool) -> FunctionModel:
    """The refund conversation: a tool call on the first turn, then the answer.

    ``overlap=True`` makes it async (overlapped); ``False`` a plain function (the strict order).
    """

    def answer(messages: list[Message]) -> str | ModelReply:
        calls.model.append(list(calls.store.done))
        calls.called[len(calls.model) - 1].set()
        if messages[-1].role == "tool":
            return f"Done: {messages[-1].content}"
        return ModelReply(tool_calls=[ToolCall("refund", {"order": "1042"}, id="call-1")])

    async def answer_async(messages: list[Message]) -> str | ModelReply:
        reply = answer(messages)
        if calls.hold_model is not None and len(calls.model) == 2:
            try:
                await calls.hold_model.wait()
            except anyio.get_cancelled_exc_class():
                calls.model_cancelled = True
                raise
        return reply

    return FunctionModel(answer_async if overlap else answer)


def refund_agent(calls: Calls, *, overlap: bool) -> Agent:
    @tool
    async def refund(order: str) -> str:
        """Refund an order."""
        calls.tool += 1
        return f"refunded {order}"

    agent = Agent("refunder", refund_model(calls, overlap=overlap), tools=[refund])
    assert _overlaps(agent.model) is overlap
    return agent


ROWS = ["turn:0", "turn:0/tool:refund", "turn:1", "run_end"]


@asynccontextmanager
async def gated(tmp_path: Path, name: str = "tether.db") -> AsyncIterator[tuple[GatedStore, SQLiteStore]]:
    inner = SQLiteStore(tmp_path / name)
    await inner.setup()
    try:
        yield GatedStore(inner), inner
    finally:
        await inner.close()


async def node_ids(store: SQLiteStore, execution_id: str) -> list[str]:
    return [row.node_id for row in await store.history(execution_id)]


async def in_background(tg: Any, work: Callable[[], Awaitable[Any]]) -> dict[str, Any]:
    """Run ``work`` in ``tg``; the returned dict gets its ``result`` or ``error`` when it ends."""
    out: dict[str, Any] = {}

    async def run() -> None:
        try:
            out["result"] = await work()
        except Exception as exc:
            out["error"] = exc

    tg.start_soon(run)
    return out


# -- (1) the model runs while its row commits; nothing that depends on the turn does --------------------


@pytest.mark.parametrize("row", ["turn:0", "turn:1"])
async def test_the_model_is_called_while_its_row_is_written_and_nothing_follows_it(
    tmp_path: Path, row: str
) -> None:
    with anyio.fail_after(LIMIT):
        async with gated(tmp_path) as (store, inner), ActorSystem(store) as system:
            calls = Calls(store)
            agent = refund_agent(calls, overlap=True)
            gate = store.gates[row] = Gate()
            async with anyio.create_task_group() as tg:
                out = await in_background(tg, lambda: _spawn_and_wait(system, agent, "run-1"))
                await gate.reached.wait()
                turn = int(row.split(":")[1])
                await calls.called[turn].wait()
                # The model of this turn was called before its row was written ...
                assert row not in store.done
                assert row not in await node_ids(inner, "run-1")
                # ... and nothing that depends on the turn happens until the row is down.
                await anyio.sleep(SETTLE)
                assert store.attempted[-1] == row
                assert calls.tool == (0 if row == "turn:0" else 1)
                assert "result" not in out and "error" not in out
                gate.release.set()
            result = out["result"]
            assert result.status == "completed" and result.output == "Done: refunded 1042", result
            assert calls.tool == 1
            assert await node_ids(inner, "run-1") == ROWS
            # What each model call saw written: the turn's own row was never among them.
            assert calls.model == [[], ["turn:0", "turn:0/tool:refund"]]


async def test_a_plain_function_model_is_called_only_after_its_row_is_written(tmp_path: Path) -> None:
    """The strict order, kept for a FunctionModel over a plain function (nothing could run beside it)."""
    with anyio.fail_after(LIMIT):
        async with gated(tmp_path) as (store, inner), ActorSystem(store) as system:
            calls = Calls(store)
            agent = refund_agent(calls, overlap=False)
            gate = store.gates["turn:1"] = Gate()
            async with anyio.create_task_group() as tg:
                out = await in_background(tg, lambda: _spawn_and_wait(system, agent, "run-1"))
                await gate.reached.wait()
                await anyio.sleep(SETTLE)
                assert len(calls.model) == 1  # turn 1's model waits for its row
                gate.release.set()
            assert out["result"].status == "completed"
            assert calls.model == [["turn:0"], ["turn:0", "turn:0/tool:refund", "turn:1"]]
            assert await node_ids(inner, "run-1") == ROWS


# -- (2) a failed llm_call append: the reply is discarded, the run ends as in the strict order -----------


def _write_conflict() -> Exception:
    return WriteConflict("seq 2 is already taken (simulated): a stale writer lost")


def _unavailable() -> Exception:
    return StoreUnavailable("the database went away (simulated)")


@pytest.mark.parametrize("error", [_write_conflict, _unavailable], ids=["WriteConflict", "StoreUnavailable"])
@pytest.mark.parametrize("row", ["turn:0", "turn:1"])
async def test_a_failed_llm_call_append_discards_the_reply_as_the_strict_order_would(
    tmp_path: Path, row: str, error: Callable[[], Exception]
) -> None:
    outcomes = []
    for overlap in (True, False):
        with anyio.fail_after(LIMIT):
            async with gated(tmp_path, f"{overlap}.db") as (store, inner), ActorSystem(store) as system:
                calls = Calls(store)
                agent = refund_agent(calls, overlap=overlap)
                turn = int(row.split(":")[1])
                # Overlapped, the append fails once the model has answered (its reply exists and
                # must be dropped); the strict order never calls the model before the row is down.
                store.gates[row] = Gate(fail=error, fail_when=calls.called[turn] if overlap else None)
                outcome = await _outcome(system, agent)
                tool_before = 0 if row == "turn:0" else 1
                assert calls.tool == tool_before  # no tool ran after the failed row
                rows = await node_ids(inner, "run-1")
                attempted = list(store.attempted)
                outcomes.append((outcome, rows, attempted))
                if overlap:
                    # The overlapped model was called for the failed turn; its reply went nowhere.
                    assert len(calls.model) == (1 if row == "turn:0" else 2)
    (overlapped, strict) = outcomes
    assert overlapped == strict
    outcome, rows, attempted = overlapped
    before = ROWS[: ROWS.index(row)]
    if error is _write_conflict:
        # A lost race: this writer stops and writes nothing more (no run_end).
        assert outcome == ("raised", "WriteConflict")
        assert rows == before
        assert attempted == [*before, row]
    else:
        # Any other store error fails the run: it tries its failed marker next (which lands here).
        assert outcome[0] == "failed" and outcome[1].startswith("StoreUnavailable:"), outcome
        assert rows == [*before, "run_end"]
        assert attempted == [*before, row, "run_end"]


async def test_a_real_write_conflict_on_the_llm_call_row_stops_the_run(tmp_path: Path) -> None:
    """Another writer takes turn 1's seq while the model answers: no run_end, WriteConflict raised."""
    with anyio.fail_after(LIMIT):
        async with gated(tmp_path) as (store, inner), ActorSystem(store) as system:
            calls = Calls(store)
            calls.hold_model = anyio.Event()
            agent = refund_agent(calls, overlap=True)
            gate = store.gates["turn:1"] = Gate()
            async with anyio.create_task_group() as tg:
                out = await in_background(tg, lambda: _spawn_and_wait(system, agent, "run-1"))
                await gate.reached.wait()
                await calls.called[1].wait()
                # A stale-writer race: someone else (e.g. a cancel elsewhere) takes seq 2 first.
                newest = await inner.latest("run-1")
                assert newest is not None and newest.seq == 1
                marker = Checkpoint(
                    execution_id="run-1",
                    seq=2,
                    runner=agent.name,
                    node_id="run_end",
                    step_index=1,
                    step_type="run_end",
                    status="failed",
                    state_snapshot={"run_error": "cancelled: elsewhere"},
                    agent_path=agent.label,
                )
                await inner.append(marker)
                gate.release.set()
            assert isinstance(out.get("error"), WriteConflict), out
            assert calls.model_cancelled  # the model call in flight was stopped, its reply dropped
            assert calls.tool == 1
            assert await node_ids(inner, "run-1") == ["turn:0", "turn:0/tool:refund", "run_end"]
            assert store.attempted == ["turn:0", "turn:0/tool:refund", "turn:1"]


@pytest.mark.parametrize("overlap", [True, False], ids=["overlapped", "strict"])
async def test_a_row_the_store_refuses_to_plan_is_refused_before_the_model_is_called(
    tmp_path: Path, overlap: bool
) -> None:
    with anyio.fail_after(LIMIT):
        async with gated(tmp_path) as (store, inner), ActorSystem(store) as system:
            calls = Calls(store)
            agent = refund_agent(calls, overlap=overlap)
            with pytest.raises(SerializationError, match="NUL"):
                await system.spawn(agent, "bad\x00input", execution_id="run-1")
            assert calls.model == []
            assert await inner.history("run-1") == []


# -- (3) a tool never starts before its row is down ------------------------------------------------------


@pytest.mark.parametrize("overlap", [True, False], ids=["overlapped", "strict"])
async def test_a_tool_does_not_start_before_its_row_is_written(tmp_path: Path, overlap: bool) -> None:
    with anyio.fail_after(LIMIT):
        async with gated(tmp_path) as (store, inner), ActorSystem(store) as system:
            calls = Calls(store)
            agent = refund_agent(calls, overlap=overlap)
            gate = store.gates["turn:0/tool:refund"] = Gate(after=True)  # written, not yet confirmed
            async with anyio.create_task_group() as tg:
                out = await in_background(tg, lambda: _spawn_and_wait(system, agent, "run-1"))
                await gate.reached.wait()
                await anyio.sleep(SETTLE)
                assert calls.tool == 0
                assert store.attempted == ["turn:0", "turn:0/tool:refund"]
                gate.release.set()
            assert out["result"].status == "completed"
            assert calls.tool == 1
            assert await node_ids(inner, "run-1") == ROWS


# -- (4) cancel or shutdown while an overlapped append is in flight ---------------------------------------


@pytest.mark.parametrize("after", [False, True], ids=["row-not-written", "row-written"])
async def test_cancel_while_an_overlapped_append_is_in_flight(tmp_path: Path, after: bool) -> None:
    with anyio.fail_after(LIMIT):
        async with gated(tmp_path) as (store, inner), ActorSystem(store, runners=()) as system:
            calls = Calls(store)
            calls.hold_model = anyio.Event()  # the model call is in flight too
            agent = refund_agent(calls, overlap=True)
            gate = store.gates["turn:1"] = Gate(after=after)
            before = set(asyncio.all_tasks())
            ref = await system.spawn(agent, "refund", execution_id="run-1")
            await gate.reached.wait()
            await calls.called[1].wait()
            result = await system.cancel("run-1")
            assert result.status == "failed" and result.error == "cancelled: cancelled", result
            assert (await ref.result(timeout=5)).status == "failed"
            assert gate.cancelled and calls.model_cancelled
            await _passivated(system, "run-1")
            assert set(asyncio.all_tasks()) <= before  # no task of the run is left
            written = ["turn:0", "turn:0/tool:refund"] + (["turn:1"] if after else [])
            assert await node_ids(inner, "run-1") == [*written, "run_end"]

            # The cancelled run resumes like any failed run, from its newest real row.
            calls.hold_model.set()
            store.gates.clear()
            resumed = await system.resume("run-1", timeout=5)
            assert resumed.status == "completed" and resumed.output == "Done: refunded 1042", resumed
            # With turn:1 down, the model is re-issued and the tool is not re-run; without it, the
            # newest real row is the tool's, so the tool re-runs (its row was down, the next not).
            assert calls.tool == (1 if after else 2)
            rows = await node_ids(inner, "run-1")
            assert rows[: len(written) + 1] == [*written, "run_end"]
            assert rows[-1] == "run_end"


async def test_shutdown_while_an_overlapped_append_is_in_flight_leaves_a_recoverable_run(
    tmp_path: Path,
) -> None:
    with anyio.fail_after(LIMIT):
        async with gated(tmp_path) as (store, inner):
            calls = Calls(store)
            calls.hold_model = anyio.Event()
            agent = refund_agent(calls, overlap=True)
            gate = store.gates["turn:1"] = Gate(after=True)
            before = set(asyncio.all_tasks())
            async with ActorSystem(store) as system:
                ref = await system.spawn(agent, "refund", execution_id="run-1")
                await gate.reached.wait()
                await calls.called[1].wait()
            # Leaving the system stopped the run's actor mid-append: its result says so.
            with pytest.raises(Exception, match="stays recoverable"):
                await ref.result(timeout=5)
            assert gate.cancelled and calls.model_cancelled
            assert set(asyncio.all_tasks()) <= before
            assert await node_ids(inner, "run-1") == ["turn:0", "turn:0/tool:refund", "turn:1"]

            calls.hold_model.set()
            store.gates.clear()
            async with ActorSystem(store, runners=[agent]) as system:
                resumed = await system.resume("run-1", timeout=5)
            assert resumed.status == "completed" and resumed.output == "Done: refunded 1042", resumed
            assert calls.tool == 1  # turn 1 was down: its model is re-issued, the tool is not re-run
            assert [(r.node_id, r.step_type) for r in await inner.history("run-1")] == [
                ("turn:0", "llm_call"),
                ("turn:0/tool:refund", "tool_call"),
                ("turn:1", "llm_call"),
                ("turn:1", "recover"),
                ("turn:1", "llm_call"),
                ("run_end", "run_end"),
            ]


# -- (5) what overlapping means for a crash inside the model call ---------------------------------------
#
# The crash window for re-running a tool is what it was: from the tool's start until the row after it
# is committed. What changes for an overlapped model is what can run inside that window: the model
# call itself. A process that dies inside an overlapped model call before the turn's row is down
# re-enters at the tool's row, so the tool runs again (``@idempotent`` absorbs that); a process that
# dies inside a strict model call (a plain function) always has the turn's row down already.

CRASH_CHILD = textwrap.dedent(
    """
    import sys
    sys.path[:0] = [{tests!r}, {here!r}]
    import anyio
    from test_overlap import crash_child
    anyio.run(crash_child, sys.argv[1], sys.argv[2], sys.argv[3] == "overlap")
    """
)


def crash_agent(marks: Path, *, overlap: bool, held: anyio.Event | None = None) -> Agent:
    """The refund agent whose turn-1 model call kills the process (``os._exit(23)``) in a child.

    Overlapped, it dies while its turn's row is held unwritten (``held`` is set by the gate).
    """

    @tool
    async def refund(order: str) -> str:
        """Refund an order (each run is marked in a file)."""
        with (marks / "refund-ran").open("a") as out:
            out.write(f"{os.getpid()}\n")
        return f"refunded {order}"

    def answer(messages: list[Message]) -> str | ModelReply:
        if messages[-1].role == "tool":
            if os.environ.get("TETHER_TEST_CRASH") == "1":
                os._exit(23)
            return f"Done: {messages[-1].content}"
        return ModelReply(tool_calls=[ToolCall("refund", {"order": "1042"}, id="call-1")])

    async def answer_async(messages: list[Message]) -> str | ModelReply:
        if messages[-1].role == "tool" and held is not None:
            await held.wait()  # the turn's row is at the gate, not written
        return answer(messages)

    return Agent("crasher", FunctionModel(answer_async if overlap else answer), tools=[refund])


async def crash_child(db: str, marks: str, overlap: bool) -> None:
    """The child's part: run the agent; its turn-1 model call kills this process."""
    async with gated(Path(db).parent, Path(db).name) as (store, _):
        gate = store.gates["turn:1"] = Gate()
        agent = crash_agent(Path(marks), overlap=overlap, held=gate.reached if overlap else None)
        if not overlap:
            store.gates.clear()
        async with ActorSystem(store) as system:
            await (await system.spawn(agent, "refund", execution_id="crashy")).result(timeout=30)
    raise SystemExit("the model was supposed to kill this process")


@pytest.mark.parametrize("overlap", [True, False], ids=["overlapped", "strict"])
async def test_a_crash_inside_the_model_call_re_enters_at_the_newest_committed_row(
    tmp_path: Path, overlap: bool
) -> None:
    marks = tmp_path / "marks"
    marks.mkdir()
    db = tmp_path / "tether.db"
    code = CRASH_CHILD.format(tests=str(Path(__file__).parents[1]), here=str(Path(__file__).parent))
    with anyio.fail_after(CHILD_LIMIT):
        child = await anyio.run_process(
            [sys.executable, "-c", code, str(db), str(marks), "overlap" if overlap else "strict"],
            env={**os.environ, "TETHER_TEST_CRASH": "1"},
            check=False,
        )
    assert child.returncode == 23, child.stderr.decode()
    agent = crash_agent(marks, overlap=overlap)
    with anyio.fail_after(LIMIT):
        async with gated(tmp_path) as (store, inner), ActorSystem(store, runners=[agent]) as system:
            # Overlapped, the child died with turn 1's row unwritten; strict, it was down first.
            newest = ["turn:0", "turn:0/tool:refund"] + ([] if overlap else ["turn:1"])
            assert await node_ids(inner, "crashy") == newest
            result = await system.resume("crashy", timeout=10)
            assert result.status == "completed" and result.output == "Done: refunded 1042", result
    # The tool re-ran only where its row was the newest committed one.
    assert len((marks / "refund-ran").read_text().split()) == (2 if overlap else 1)


# -- helpers ---------------------------------------------------------------------------------------------


async def _spawn_and_wait(system: ActorSystem, agent: Agent, execution_id: str) -> RunResult:
    ref = await system.spawn(agent, "refund", execution_id=execution_id)
    return await ref.result(timeout=LIMIT)


async def _outcome(system: ActorSystem, agent: Agent) -> tuple[str, str]:
    """How a run ended: ``("raised", error type)`` or ``(status, error or output)``."""
    try:
        result = await _spawn_and_wait(system, agent, "run-1")
    except Exception as exc:
        return ("raised", type(exc).__name__)
    return (result.status, result.error or result.output or "")


async def _passivated(system: ActorSystem, execution_id: str) -> None:
    """Wait (at most 5 s) until the run's actor has exited."""
    for _ in range(5000):
        if execution_id not in system.runtime.registry:
            return
        await anyio.sleep(0.001)
    pytest.fail(f"the actor of run {execution_id!r} is still live after 5 s")
