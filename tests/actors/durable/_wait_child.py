"""A child process for the wait and sleep tests: a run that rests, and a worker that wakes it.

Usage: ``python _wait_child.py MODE BACKEND TARGET SCHEMA WORKDIR [ARG]``.

The runner ``rester`` calls its tool ``rest`` with ``{"kind": ARG}``, then answers with the tool's
result. The tool appends ``enter``, then (after its wait) ``after <payload>`` lines to
``WORKDIR/ledger`` (``<execution_id> <event> <unix time> <pid>``, each fsynced). ``kind``:
``sleep`` sleeps 2 s; ``wait`` waits for the signal ``go``; ``three`` waits for ``go`` three times
in turn; ``tick`` returns at once (a scheduled run).

Modes: ``rest KIND`` spawns a run, prints ``{"id": ..., "status": ...}`` once it rests, then waits
to be killed; ``worker`` serves (polling every 0.2 s), printing ``{"ready": true}`` first.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import anyio

from actors import ActorSystem, Agent, current_run, sleep, tool, wait_signal
from actors.models import FunctionModel, Message, ModelReply, ToolCall
from stores import PostgresStore, SQLiteStore, Store


def open_store(backend: str, target: str, schema: str) -> Store:
    """The store a test named on the command line."""
    return SQLiteStore(target) if backend == "sqlite" else PostgresStore(target, schema=schema)


def record(workdir: Path, event: str) -> None:
    """Append one fsynced ledger line for the current run."""
    info = current_run()
    assert info is not None
    line = f"{info.execution_id} {event} {time.time():.6f} {os.getpid()}\n"
    fd = os.open(workdir / "ledger", os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())
        os.fsync(fd)
    finally:
        os.close(fd)


def agent(workdir: Path) -> Agent:
    """The ``rester`` runner: one ``rest`` tool call, then an answer quoting it."""

    @tool
    async def rest(kind: str) -> str:
        """Rest: sleep 2 s, or wait for the signal go (once, or three times)."""
        record(workdir, "enter")
        if kind == "tick":  # a scheduled run: nothing to wait for
            record(workdir, "after tick")
            return "ticked"
        if kind == "sleep":
            await sleep(2.0)
            record(workdir, "after -")
            return "slept"
        got = []
        for _ in range(3 if kind == "three" else 1):
            signal = await wait_signal("go")
            assert signal is not None
            got.append(signal.payload)
        record(workdir, "after " + ",".join(str(p) for p in got))
        return json.dumps(got)

    def model(messages: list[Message]) -> str | ModelReply:
        if messages[-1].role == "tool":
            return f"done: {messages[-1].content}"
        return ModelReply(tool_calls=[ToolCall("rest", {"kind": messages[-1].content})])

    return Agent("rester", FunctionModel(model), tools=[rest])


async def main(mode: str, backend: str, target: str, schema: str, workdir: str, *rest: Any) -> None:
    work = Path(workdir)
    runner = agent(work)
    async with ActorSystem(open_store(backend, target, schema), runners=[runner]) as system:
        if mode == "rest":
            ref = await system.spawn(runner, rest[0])
            result = await ref.result()
            print(json.dumps({"id": ref.execution_id, "status": result.status}), flush=True)
            await anyio.sleep_forever()
        elif mode == "worker":
            print(json.dumps({"ready": True}), flush=True)
            await system.serve(poll=0.2)
        else:
            raise SystemExit(f"unknown mode {mode!r}")


if __name__ == "__main__":
    anyio.run(main, *sys.argv[1:], backend=os.environ.get("TETHER_TEST_LOOP", "asyncio"))
