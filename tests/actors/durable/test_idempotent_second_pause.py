"""``@idempotent`` across a second pause: a charge made before a pause runs once, whatever comes after.

A tool charges through ``@idempotent`` and then pauses. The run is then cancelled (and resumed like
any failed run) or its process dies before the pause is written; the recovery re-runs the tool,
which finds its charge, pauses again, and the second pause is approved: the tool re-runs once more
and finds its charge again. The charge body runs once across the whole sequence, on both backends;
the count is kept in a file, so a charge in a child process that died counts too.
"""

from __future__ import annotations

import os
import sys
import textwrap
from pathlib import Path

import anyio
import pytest
from conftest import Backend

from actors import ActorSystem, Agent, AlreadyResumed, Resume, RunResult, idempotent, interrupt, tool
from actors.models import FunctionModel, Message, ModelReply, ToolCall

pytestmark = pytest.mark.anyio

HERE = Path(__file__).resolve().parent
LIMIT = 60.0


def charging_agent(ledger: Path, *, die_before_the_pause: bool = False) -> Agent:
    """``settle`` charges once through ``@idempotent``, then waits for a manager's approval."""

    @idempotent
    def charge(order: str) -> str:
        with ledger.open("a") as out:
            out.write(f"charge {order} {os.getpid()}\n")
            out.flush()
            os.fsync(out.fileno())
        return f"charged {order}"

    @tool
    def settle(order: str) -> str:
        """Charge the order, then ask a manager."""
        receipt = charge(order)
        if die_before_the_pause:
            os._exit(9)  # the charge's cache entry is committed, the pause is not
        decision = interrupt("manager", {"order": order})
        return f"{receipt}, approved={decision.approved}"

    def model(messages: list[Message]) -> str | ModelReply:
        if messages[-1].role == "tool":
            return str(messages[-1].content)
        return ModelReply(tool_calls=[ToolCall("settle", {"order": "77"})])

    return Agent("settler", FunctionModel(model), tools=[settle])


def charges(ledger: Path) -> list[str]:
    return [line for line in ledger.read_text().splitlines() if line.startswith("charge")]


async def recover(system: ActorSystem, execution_id: str) -> RunResult:
    """Crash recovery, retried while a dead owner's lock is still going away."""
    for _ in range(500):
        try:
            return await system.resume(execution_id, timeout=20)
        except AlreadyResumed:
            await anyio.sleep(0.01)
    raise AssertionError("the run never became recoverable")


async def test_a_cancelled_pause_recovered_and_paused_again_charges_once(
    store_backend: Backend, tmp_path: Path
) -> None:
    ledger = tmp_path / "ledger"
    agent = charging_agent(ledger)
    with anyio.fail_after(LIMIT):
        async with store_backend.open() as store, ActorSystem(store, runners=[agent]) as system:
            first = await (await system.spawn(agent, "settle 77", execution_id="twice")).result(timeout=20)
            assert first.status == "paused"
            cancelled = await system.cancel("twice", reason="operator stopped it")
            assert cancelled.status == "failed"
            again = await recover(system, "twice")
            assert again.status == "paused"  # the tool re-ran, found its charge, and paused anew
            assert again.pending is not None and again.pending.context == {"order": "77"}
            done = await system.resume("twice", Resume(approved=True), timeout=20)
            rows = await system.history("twice")
    assert (done.status, done.output) == ("completed", "charged 77, approved=True")
    assert len(charges(ledger)) == 1
    assert [r.step_type for r in rows if r.step_type in ("hitl_pause", "resume", "recover")] == [
        "hitl_pause",
        "recover",
        "hitl_pause",
        "resume",
    ]


CHILD = textwrap.dedent(
    """
    import os
    import sys
    from pathlib import Path

    import anyio

    sys.path[:0] = [{tests!r}, {here!r}]
    from conftest import Backend
    from test_idempotent_second_pause import child

    anyio.run(child, Backend(*sys.argv[1:3], sys.argv[3] if sys.argv[3] != "-" else ""), Path(sys.argv[4]), backend=os.environ.get("TETHER_TEST_LOOP", "asyncio"))
    """
)


async def child(backend: Backend, ledger: Path) -> None:
    """The child's part: spawn the run; its tool charges and kills this process before the pause."""
    agent = charging_agent(ledger, die_before_the_pause=True)
    async with backend.open() as store, ActorSystem(store, runners=[agent]) as system:
        await (await system.spawn(agent, "settle 77", execution_id="crashed")).result(timeout=30)
    raise SystemExit("the tool was supposed to kill this process")


async def test_a_crash_after_the_charge_then_a_pause_and_an_approval_charge_once(
    store_backend: Backend, tmp_path: Path
) -> None:
    ledger = tmp_path / "ledger"
    code = CHILD.format(tests=str(HERE.parents[1]), here=str(HERE))
    with anyio.fail_after(LIMIT):
        died = await anyio.run_process(
            [sys.executable, "-c", code, *store_backend.child_args(), str(ledger)], check=False
        )
        assert died.returncode == 9, died.stderr.decode()
        assert len(charges(ledger)) == 1
        agent = charging_agent(ledger)
        async with store_backend.open() as store, ActorSystem(store, runners=[agent]) as system:
            paused = await recover(system, "crashed")
            assert paused.status == "paused"
        # Another process approves the second pause (a fresh system and store instance).
        async with store_backend.open() as store, ActorSystem(store, runners=[agent]) as system:
            done = await system.resume("crashed", Resume(approved=True), timeout=20)
    assert (done.status, done.output) == ("completed", "charged 77, approved=True")
    assert len(charges(ledger)) == 1
