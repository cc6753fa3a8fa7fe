"""A child process for the signal tests: sends signals from outside the run's process.

Usage: ``python _signal_child.py BACKEND TARGET SCHEMA``. Opens the store, prints ``{"ready":
true}``, then for each line ``ID NAME PAYLOAD_JSON`` read from stdin sends that signal and prints
``{"sent": true}`` or ``{"error": "<type>"}``. It has no runner (a signal needs none).
"""

from __future__ import annotations

import json
import os
import sys

import anyio

from actors import ActorSystem, TetherError
from stores import PostgresStore, SQLiteStore, Store


def open_store(backend: str, target: str, schema: str) -> Store:
    """The store a test named on the command line."""
    return SQLiteStore(target) if backend == "sqlite" else PostgresStore(target, schema=schema)


async def main(backend: str, target: str, schema: str) -> None:
    async with ActorSystem(open_store(backend, target, schema)) as system:
        print(json.dumps({"ready": True}), flush=True)
        while line := await anyio.to_thread.run_sync(sys.stdin.readline):
            execution_id, name, payload = line.rstrip("\n").split(" ", 2)
            try:
                await system.signal(execution_id, name, json.loads(payload))
            except TetherError as error:
                print(json.dumps({"error": type(error).__name__}), flush=True)
            else:
                print(json.dumps({"sent": True}), flush=True)


if __name__ == "__main__":
    anyio.run(main, *sys.argv[1:4], backend=os.environ.get("TETHER_TEST_LOOP", "asyncio"))
