"""``tether demo``: the refund example end to end, on the embedded SQLite store by default.

A small refund completes in this process. A large one needs a manager's approval: a child process
starts it, it pauses, and the child exits. This process then finds the pause, approves it, and the
run finishes here, with exactly one charge. The timeline of rows is printed for both runs.
"""

from __future__ import annotations

import os
import sys

import anyio

from actors import ActorSystem, Agent, Resume, RunResult
from stores import SQLiteStore, new_id

from ._refund import RefundBot
from ._store_url import opened_store

__all__ = ["DemoBot", "demo_agent", "run_demo"]

#: Bound on the child process that starts the large refund.
_CHILD_TIMEOUT = 60.0
#: Bound on each run's leg (to its pause or its end).
_RUN_TIMEOUT = 30.0


class DemoBot(RefundBot):
    """The refund example, printing each charge with the process that made it."""

    def charge(self, order: str, amount: int, approver: str | None) -> None:
        print(f"  [pid {os.getpid()}] charged a refund of {amount} cents on order {order}", flush=True)


def demo_agent() -> Agent:
    """The demo's runner, for ``--runner tether._demo:demo_agent`` (approve, resume, fork, inspect)."""
    return DemoBot().agent()


async def run_demo(url: str) -> None:
    """The demo on the store at ``url`` (``sqlite:///tether.db`` by default, the embedded store)."""
    agent = DemoBot().agent()
    async with opened_store(url) as store, ActorSystem(store, runners=[agent]) as system:
        small = f"small-{new_id()[-8:]}"
        print(f"1. a small refund ({small}) runs to the end in this process (pid {os.getpid()})")
        ref = await system.spawn(agent, "Refund order 1042, amount 20", execution_id=small)
        _report(await ref.result(timeout=_RUN_TIMEOUT))
        await _timeline(system, small)

        large = f"large-{new_id()[-8:]}"
        print(f"\n2. a large refund ({large}) starts in a child process and pauses for approval")
        with anyio.fail_after(_CHILD_TIMEOUT):
            child = await anyio.run_process([sys.executable, "-m", "tether._demo", url, large])
        print(child.stdout.decode().rstrip())
        waiting = [p for p in await system.pending() if p.execution_id == large]
        print(f"   pending in the store: {[(p.execution_id, p.reason, p.context) for p in waiting]}")

        print(f"\n3. this process (pid {os.getpid()}) approves it; the run resumes here")
        decision = Resume(approved=True, metadata={"approver": "demo"})
        _report(await system.resume(large, decision, timeout=_RUN_TIMEOUT))
        await _timeline(system, large)
        where = await anyio.Path(store.path).absolute() if isinstance(store, SQLiteStore) else url
        print(f"\nrows are in {where}")


async def _child(url: str, execution_id: str) -> None:
    """The child's part: start the large refund; it pauses, and the process exits."""
    agent = DemoBot().agent()
    async with opened_store(url) as store, ActorSystem(store, runners=[agent]) as system:
        ref = await system.spawn(agent, "Refund order 1042, amount 50000", execution_id=execution_id)
        result = await ref.result(timeout=_RUN_TIMEOUT)
        print(f"   child pid {os.getpid()}: status={result.status}, exiting")


def _report(result: RunResult) -> None:
    detail = result.output if result.status == "completed" else result.error or result.pending
    print(f"   status: {result.status} · {detail}")


async def _timeline(system: ActorSystem, execution_id: str) -> None:
    for row in await system.history(execution_id):
        print(f"   #{row.seq} {row.node_id:<20} {row.step_type:<10} {row.status:<11} {row.agent_path}")


if __name__ == "__main__":  # the child process of the demo
    anyio.run(_child, sys.argv[1], sys.argv[2])
