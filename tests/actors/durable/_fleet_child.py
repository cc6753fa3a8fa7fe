"""A child process for the ownership and fleet tests.

Usage: ``python _fleet_child.py MODE BACKEND TARGET SCHEMA WORKDIR [ARG]``.

The runner ``fleet-refund`` makes one sync tool call, ``refund``, then answers. The tool writes
``WORKDIR/entered-<pid>``, waits (at most 60 s) until ``WORKDIR/go`` exists when ``WORKDIR/hold``
exists, then charges through a sync ``@idempotent`` function that appends ``<order> <its
idempotency_key()> <pid>`` to ``WORKDIR/charges``. A runner made with ``free_calls`` holds every
call of its process after the first ``free_calls``: the call writes ``WORKDIR/held-<pid>-<order>``
and waits there, charging nothing, until the process is killed (at most 60 s).

Modes: ``own ID`` spawns run ID and prints ``{"lock_pid": ...}`` (the PostgreSQL backend pid of its
lock connection, or null), then the outcome of the run; ``recover ID`` resumes run ID (retrying
while a live owner holds it) and prints the outcome; ``hold N PREFIX`` spawns runs PREFIX-0..N-1,
prints ``{"holding": N}`` once every one is inside its tool, and waits; ``sweep`` waits for
``WORKDIR/start``, sweeps once and prints how many it took; ``worker SECONDS [FREE]`` serves
(concurrency 8, polling every 50 ms) with a tool that sleeps SECONDS before charging, and holds every
call after the first FREE, if given.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any

import anyio

from actors import ActorSystem, Agent, idempotency_key, idempotent, tool
from actors.models import FunctionModel, Message, ModelReply, ToolCall
from stores import AlreadyResumed, PostgresStore, SQLiteStore, Store

NAME = "fleet-refund"


def agent(workdir: Path, pause: float = 0.0, free_calls: int | None = None) -> Agent:
    """One ``refund`` tool call, then an answer quoting it; with ``free_calls``, the calls after the
    first ``free_calls`` are held (so a test can kill the process while it owns a run mid-tool)."""
    entered = 0
    counting = threading.Lock()  # sync tools run in worker threads

    @idempotent
    def charge(order: str) -> str:
        with (workdir / "charges").open("a") as out:
            out.write(f"{order} {idempotency_key()} {os.getpid()}\n")
        return f"charged {order}"

    @tool
    def refund(order: str) -> str:
        """Refund an order (waits for WORKDIR/go while WORKDIR/hold exists; a held call, until killed)."""
        (workdir / f"entered-{os.getpid()}").touch()
        (workdir / f"entered-{os.getpid()}-{order}").touch()
        nonlocal entered
        with counting:
            entered += 1
            held = free_calls is not None and entered > free_calls
        if held:
            (workdir / f"held-{os.getpid()}-{order}").touch()
        deadline = time.monotonic() + 60
        while held or ((workdir / "hold").exists() and not (workdir / "go").exists()):
            if time.monotonic() > deadline:
                raise TimeoutError("still held after 60 s")
            time.sleep(0.005)
        time.sleep(pause)
        return charge(order)

    def model(messages: list[Message]) -> str | ModelReply:
        if messages[-1].role == "tool":
            return f"done: {messages[-1].content}"
        return ModelReply(tool_calls=[ToolCall("refund", {"order": messages[-1].content})])

    return Agent(NAME, FunctionModel(model), tools=[refund])


def open_store(backend: str, target: str, schema: str) -> Store:
    return SQLiteStore(target) if backend == "sqlite" else PostgresStore(target, schema=schema)


def say(**fields: Any) -> None:
    print(json.dumps(fields), flush=True)


async def main(mode: str, backend: str, target: str, schema: str, workdir: str, *rest: str) -> None:
    logging.basicConfig(level=logging.ERROR, stream=sys.stderr)
    store = open_store(backend, target, schema)
    if mode == "worker":
        runner = agent(Path(workdir), float(rest[0]), int(rest[1]) if len(rest) > 1 else None)
    else:
        runner = agent(Path(workdir))
    async with store, ActorSystem(store, runners=[runner]) as system:
        if mode == "own":
            ref = await system.spawn(runner, rest[0], execution_id=rest[0])
            conn = getattr(store, "_lock_conn", None)
            say(lock_pid=None if conn is None else conn.get_server_pid())
            try:
                result = await ref.result(timeout=90)
            except Exception as error:
                say(outcome=type(error).__name__, error=str(error))
            else:
                say(outcome=result.status)
            await anyio.sleep(0.5)  # time for a zombie write, if the run were not stopped
        elif mode == "recover":
            with anyio.fail_after(60):
                while True:
                    try:
                        result = await system.resume(rest[0], timeout=60)
                    except AlreadyResumed:
                        await anyio.sleep(0.02)
                        continue
                    break
            say(outcome=result.status, output=result.output)
        elif mode == "hold":
            count, prefix = int(rest[0]), rest[1]
            for i in range(count):
                await system.spawn(runner, f"{prefix}-{i}", execution_id=f"{prefix}-{i}")
            with anyio.fail_after(60):
                while len(list(Path(workdir).glob(f"entered-{os.getpid()}-*"))) < count:  # noqa: ASYNC110, ASYNC240
                    await anyio.sleep(0.01)
            await anyio.sleep(0.2)
            say(holding=count)
            await anyio.sleep(600)
        elif mode == "sweep":
            with anyio.fail_after(60):
                while not (Path(workdir) / "start").exists():  # noqa: ASYNC110
                    await anyio.sleep(0.002)
            say(took=await system.sweep(limit=1000))
        elif mode == "worker":
            say(serving=os.getpid())
            await system.serve(concurrency=8, poll=0.05)


def cli_agent() -> Agent:
    """The runner for ``--runner _fleet_child:cli_agent`` (its WORKDIR from ``$FLEET_WORKDIR``)."""
    return agent(Path(os.environ["FLEET_WORKDIR"]))


if __name__ == "__main__":
    anyio.run(main, *sys.argv[1:], backend=os.environ.get("TETHER_TEST_LOOP", "asyncio"))
