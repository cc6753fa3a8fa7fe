"""The sweep never resumes a failed run: a failed ``run_end`` is a resting row (rules 11 and 12).

A cancelled run can be resumed by a person like any failed run, but a worker must not take it: an
enqueued run cancelled before any worker took it, and a running run cancelled from another process
whose owner then died (so its ownership is stale and the store lists it as needing an owner), stay
failed through ``sweep`` and ``serve``, with no row added and no model call or tool run. Both
backends; the dead owner is a real process killed with SIGKILL.
"""

from __future__ import annotations

import os
import signal
import sys
import textwrap
from pathlib import Path

import anyio
import pytest
from conftest import Backend

from actors import ActorSystem, Agent, tool
from actors.models import FunctionModel, Message, ModelReply, ToolCall
from stores import FAILED, RUN_END, Checkpoint

pytestmark = pytest.mark.anyio

HERE = Path(__file__).resolve().parent
LIMIT = 60.0


def worker_agent(ledger: Path) -> Agent:
    """Each model call and tool run appends a line to ``ledger``; the tool waits a long time."""

    def note(line: str) -> None:
        with ledger.open("a") as out:
            out.write(f"{line} {os.getpid()}\n")
            out.flush()
            os.fsync(out.fileno())

    @tool
    async def work(item: str) -> str:
        """Work on an item for a long while."""
        note("tool")
        await anyio.sleep(float(os.environ.get("SWEEP_TOOL_SECONDS", "0")))
        return f"worked on {item}"

    def model(messages: list[Message]) -> str | ModelReply:
        note("model")
        if messages[-1].role == "tool":
            return f"done: {messages[-1].content}"
        return ModelReply(tool_calls=[ToolCall("work", {"item": str(messages[-1].content)})])

    return Agent("sweep-failed", FunctionModel(model), tools=[work])


def lines(ledger: Path) -> list[str]:
    return ledger.read_text().split("\n")[:-1] if ledger.exists() else []


def assert_still_failed(rows: list[Checkpoint], before: list[Checkpoint]) -> None:
    assert rows == before, "the sweep wrote to a failed run"
    assert (rows[-1].step_type, rows[-1].status) == (RUN_END, FAILED)


async def serve_briefly(system: ActorSystem, seconds: float = 1.0) -> None:
    with anyio.move_on_after(seconds):
        await system.serve(poll=0.05, concurrency=4)


async def test_an_enqueued_run_cancelled_before_any_worker_took_it_stays_failed(
    store_backend: Backend, tmp_path: Path
) -> None:
    ledger = tmp_path / "ledger"
    agent = worker_agent(ledger)
    with anyio.fail_after(LIMIT):
        async with store_backend.open() as store, ActorSystem(store, runners=[agent]) as system:
            eid = await system.enqueue(agent, "order 5")
            cancelled = await system.cancel(eid, reason="withdrawn")
            assert cancelled.status == "failed"
            before = await system.history(eid)
            assert await system.sweep() == 0
            await serve_briefly(system)
            assert await system.sweep() == 0
            assert_still_failed(await system.history(eid), before)
            assert (await system.status(eid)).status == "failed"
    assert lines(ledger) == []


CHILD = textwrap.dedent(
    """
    import os
    import sys
    from pathlib import Path

    import anyio

    sys.path[:0] = [{tests!r}, {here!r}]
    from conftest import Backend
    from test_sweep_failed_runs import child

    anyio.run(child, Backend(*sys.argv[1:3], sys.argv[3] if sys.argv[3] != "-" else ""), Path(sys.argv[4]), backend=os.environ.get("TETHER_TEST_LOOP", "asyncio"))
    """
)


async def child(backend: Backend, ledger: Path) -> None:
    """The owner: spawn the run; its tool works for a minute (the parent kills this process)."""
    agent = worker_agent(ledger)
    async with backend.open() as store, ActorSystem(store, runners=[agent]) as system:
        await (await system.spawn(agent, "order 6", execution_id="owned")).result(timeout=120)


async def test_a_run_cancelled_from_another_process_whose_owner_died_stays_failed(
    store_backend: Backend, tmp_path: Path
) -> None:
    ledger = tmp_path / "ledger"
    agent = worker_agent(ledger)
    code = CHILD.format(tests=str(HERE.parents[1]), here=str(HERE))
    with anyio.fail_after(LIMIT):
        async with store_backend.open() as store, ActorSystem(store, runners=[agent]) as system:
            async with await anyio.open_process(
                [sys.executable, "-c", code, *store_backend.child_args(), str(ledger)],
                env={**os.environ, "SWEEP_TOOL_SECONDS": "60"},
            ) as owner:
                while not any(line.startswith("tool") for line in lines(ledger)):  # noqa: ASYNC110 (another process writes it)
                    await anyio.sleep(0.02)  # the owner's tool runs: the run is mid-step
                cancelled = await system.cancel("owned", reason="stopped by an operator")
                assert cancelled.status == "failed"
                owner.send_signal(signal.SIGKILL)
                await owner.wait()
            before = await system.history("owned")
            calls = lines(ledger)
            assert await system.sweep() == 0
            await serve_briefly(system)
            assert await system.sweep() == 0
            assert_still_failed(await system.history("owned"), before)
            summary = await system.status("owned")
    assert (summary.status, summary.error) == ("failed", "cancelled: stopped by an operator")
    assert lines(ledger) == calls  # no model call and no tool run after the cancel
