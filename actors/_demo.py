"""``tether demo``: the refund example end to end, on the embedded SQLite store.

A small refund completes in this process. A large one needs a manager's approval: a child process
starts it, it pauses, and the child exits. This process then finds the pause, approves it, and the
run finishes here, with exactly one charge. The timeline of rows is printed for both runs.
"""

from __future__ import annotations

import os
import sys
from typing import Any

import anyio

from stores import SQLiteStore, new_id

from ._agent import Agent
from ._interrupt import Resume, interrupt
from ._result import RunResult
from ._system import ActorSystem
from ._tools import tool
from .models import FunctionModel, Message, ModelReply, ToolCall

__all__ = ["refund_agent", "run_demo"]

#: Refunds above this many cents wait for a manager.
APPROVAL_LIMIT = 1000
#: Bound on the child process that starts the large refund.
_CHILD_TIMEOUT = 60.0


@tool
def refund(order: str, amount: int) -> dict[str, Any]:
    """Refund ``amount`` cents on ``order``; large refunds wait for a manager's approval.

    Args:
        order: the order number.
        amount: the amount in cents.
    """
    if amount > APPROVAL_LIMIT:
        decision = interrupt("manager_approval", {"order": order, "amount": amount})
        if not decision.approved:
            return {"refunded": False, "reason": "declined by a manager"}
    print(f"  [pid {os.getpid()}] charged a refund of {amount} cents on order {order}", flush=True)
    return {"refunded": True, "order": order, "amount": amount}


def _refund_model(messages: list[Message]) -> str | ModelReply:
    """An offline model: ask for the refund on the first turn, answer once the tool replied."""
    last = messages[-1]
    if last.role == "tool":
        return f"Done: {last.content}"
    words = last.content.split()
    amount = int(words[-1]) if words and words[-1].isdigit() else 20
    return ModelReply(tool_calls=[ToolCall("refund", {"order": "1042", "amount": amount})])


def refund_agent() -> Agent:
    """The demo's agent: one model, one tool."""
    return Agent("refund-bot", FunctionModel(_refund_model), tools=[refund])


async def run_demo(db: str) -> None:
    """The demo; ``db`` is the SQLite file (``tether.db`` by default, the embedded store)."""
    agent = refund_agent()
    async with SQLiteStore(db) as store, ActorSystem(store, runners=[agent]) as system:
        small = f"small-{new_id()[-8:]}"
        print(f"1. a small refund ({small}) runs to the end in this process (pid {os.getpid()})")
        result = await (await system.spawn(agent, "Refund order 1042, amount 20", execution_id=small)).result(
            timeout=30
        )
        _report(result)
        await _timeline(system, small)

        large = f"large-{new_id()[-8:]}"
        print(f"\n2. a large refund ({large}) starts in a child process and pauses for approval")
        with anyio.fail_after(_CHILD_TIMEOUT):
            child = await anyio.run_process([sys.executable, "-m", "actors._demo", db, large])
        print(child.stdout.decode().rstrip())
        waiting = [p for p in await system.pending() if p.execution_id == large]
        print(f"   pending in the store: {[(p.execution_id, p.reason, p.context) for p in waiting]}")

        print(f"\n3. this process (pid {os.getpid()}) approves it; the run resumes here")
        result = await system.resume(large, Resume(approved=True, metadata={"approver": "demo"}), timeout=30)
        _report(result)
        await _timeline(system, large)
        print(f"\nrows are in {await anyio.Path(db).absolute()}")


async def _child(db: str, execution_id: str) -> None:
    """The child's part: start the large refund; it pauses, and the process exits."""
    agent = refund_agent()
    async with SQLiteStore(db) as store, ActorSystem(store, runners=[agent]) as system:
        ref = await system.spawn(agent, "Refund order 1042, amount 50000", execution_id=execution_id)
        result = await ref.result(timeout=30)
        print(f"   child pid {os.getpid()}: status={result.status}, exiting")


def _report(result: RunResult) -> None:
    detail = result.output if result.status == "completed" else result.error or result.pending
    print(f"   status: {result.status} · {detail}")


async def _timeline(system: ActorSystem, execution_id: str) -> None:
    for row in await system.history(execution_id):
        print(f"   #{row.seq} {row.node_id:<20} {row.step_type:<10} {row.status:<11} {row.agent_path}")


if __name__ == "__main__":  # the child process of the demo
    anyio.run(_child, sys.argv[1], sys.argv[2])
