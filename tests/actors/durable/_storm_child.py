"""One process of the storm: complete orders ``first``..``last - 1``, spawning or recovering each.

``python _storm_child.py BACKEND TARGET SCHEMA FIRST LAST``; prints ``ready`` once its store is open,
then works; exit 0 when every order's run completed. The parent kills it with SIGKILL at random.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import anyio

sys.path[:0] = [str(Path(__file__).resolve().parents[2]), str(Path(__file__).resolve().parent)]

from _payments import AGENT  # noqa: E402
from conftest import Backend  # noqa: E402

from actors import ActorSystem, AlreadyResumed, Recover, RunResult  # noqa: E402
from stores import COMPLETED, RUN_END  # noqa: E402


def order_id(n: int) -> str:
    return f"order-{n:05d}"


async def complete(system: ActorSystem, n: int) -> None:
    eid = order_id(n)
    assert system.store is not None
    for _ in range(500):  # a dead owner's PostgreSQL lock goes within milliseconds of its death
        newest = await system.store.latest(eid)
        try:
            result: RunResult
            if newest is None:
                result = await (await system.spawn(AGENT, eid, execution_id=eid)).result(timeout=60)
            elif newest.step_type == RUN_END and newest.status == COMPLETED:
                return
            else:
                result = await (await system.send(eid, Recover())).result(timeout=60)
        except AlreadyResumed:
            await anyio.sleep(0.01)
            continue
        if result.status != "completed":
            raise SystemExit(f"run {eid} ended {result.status}: {result.error}")
        return
    raise SystemExit(f"run {eid} stayed owned by someone else")


async def main(backend: Backend, first: int, last: int) -> None:
    store = backend.open()
    await store.setup()
    try:
        async with ActorSystem(store, runners=[AGENT]) as system:
            print("ready", flush=True)
            async with anyio.create_task_group() as tg:
                for n in range(first, last):
                    tg.start_soon(complete, system, n)
    finally:
        await store.close()


if __name__ == "__main__":
    name, target, schema, first, last = sys.argv[1:6]
    anyio.run(
        main,
        Backend(name, target, "" if schema == "-" else schema),
        int(first),
        int(last),
        backend=os.environ.get("TETHER_TEST_LOOP", "asyncio"),
    )
