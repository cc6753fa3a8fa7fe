"""A child process for the version tests: builds of the runner ``refund`` that differ by version.

Usage: ``python _versions_child.py MODE BACKEND TARGET SCHEMA WORKDIR BUILDS [ARG]``.

``BUILDS`` is a comma-separated list of the builds this process registers, each ``VERSION`` or
``VERSION:VARIANT`` (``-`` for no version; variants below). Every build's ``refund(order)`` tool
touches ``WORKDIR/entered-<order>``, waits while ``WORKDIR/hold`` exists (at most 60 s), pauses for
an approval when the order starts with ``ask``, then answers ``<version> refunded <order>``; the
model calls it once with the user's message, then answers ``done: <the tool's result>``.

Variants: ``same`` (the default), ``schema`` (``refund(order, amount)``), ``removed`` (the tool is
called ``reimburse``), ``instructions`` (other instructions).

Modes: ``resume ID`` resumes run ID with an approval and prints the outcome or the error; ``spawn
ID`` spawns run ID with the first build and prints the outcome (it never ends while ``hold``
exists: the test kills it); ``serve SECONDS`` serves (polling every 50 ms) for SECONDS, then prints
``{"served": true}``.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time
from pathlib import Path
from typing import Any

import anyio

from actors import ActorSystem, Agent, Resume, RunnerNotFound, interrupt, tool
from actors.models import FunctionModel, Message, ModelReply, ToolCall
from stores import PostgresStore, SQLiteStore, Store

NAME = "refund"


def build(workdir: Path, version: str | None, variant: str = "same") -> Agent:
    """One build of ``refund`` (see the module's docstring)."""
    tag = version or "unversioned"

    def wait(order: str) -> None:
        (workdir / f"entered-{order}").touch()
        deadline = time.monotonic() + 60
        while (workdir / "hold").exists() and time.monotonic() < deadline:
            time.sleep(0.005)

    @tool
    def refund(order: str) -> str:
        """Refund an order once a human approves."""
        wait(order)
        if order.startswith("ask"):
            interrupt("approve the refund?", {"order": order})
        return f"{tag} refunded {order}"

    @tool(name="refund")
    def refund_amount(order: str, amount: int = 1) -> str:
        """Refund an amount of an order once a human approves."""
        wait(order)
        if order.startswith("ask"):
            interrupt("approve the refund?", {"order": order})
        return f"{tag} refunded {amount} of {order}"

    @tool
    def reimburse(order: str) -> str:
        """Reimburse an order."""
        return f"{tag} reimbursed {order}"

    tools = {"same": refund, "schema": refund_amount, "removed": reimburse, "instructions": refund}[variant]
    name = tools.name

    def model(messages: list[Message]) -> str | ModelReply:
        if messages[-1].role == "tool":
            return f"done: {messages[-1].content}"
        return ModelReply(tool_calls=[ToolCall(name, {"order": messages[-1].content})])

    instructions = "Refund orders politely." if variant == "instructions" else "Refund orders."
    return Agent(NAME, FunctionModel(model), tools=[tools], instructions=instructions, version=version)


def builds(workdir: Path, spec: str) -> list[Agent]:
    """The builds ``spec`` names (see the module's docstring)."""
    found = []
    for item in spec.split(","):
        version, _, variant = item.partition(":")
        found.append(build(workdir, None if version == "-" else version, variant or "same"))
    return found


def open_store(backend: str, target: str, schema: str) -> Store:
    return SQLiteStore(target) if backend == "sqlite" else PostgresStore(target, schema=schema)


def say(**fields: Any) -> None:
    print(json.dumps(fields), flush=True)


async def main(
    mode: str, backend: str, target: str, schema: str, workdir: str, spec: str, *rest: str
) -> None:
    logging.basicConfig(level=logging.ERROR, stream=sys.stderr)
    runners = builds(Path(workdir), spec)
    async with open_store(backend, target, schema) as store, ActorSystem(store, runners=runners) as system:
        if mode == "resume":
            try:
                result = await system.resume(rest[0], Resume(approved=True), timeout=30)
            except RunnerNotFound as error:
                say(
                    error=type(error).__name__,
                    message=str(error),
                    version=getattr(error, "version", None),
                    available=list(getattr(error, "available", ())),
                    tool=getattr(error, "tool", None),
                )
                return
            say(status=result.status, output=result.output, error=result.error)
        elif mode == "spawn":
            result = await (await system.spawn(runners[0], rest[1], execution_id=rest[0])).result()
            say(status=result.status)
        elif mode == "serve":
            say(serving=True)
            with anyio.move_on_after(float(rest[0])):
                await system.serve(concurrency=4, poll=0.05)
            say(served=True)


if __name__ == "__main__":
    anyio.run(main, *sys.argv[1:], backend=os.environ.get("TETHER_TEST_LOOP", "asyncio"))
