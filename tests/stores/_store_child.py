"""A child process for the race tests: opens its own store and claims, migrates or holds a lock.

Usage: ``python _store_child.py MODE BACKEND TARGET SCHEMA WORKDIR INDEX [EID SEQ]``. It writes
``WORKDIR/ready-INDEX`` when set up, waits for ``WORKDIR/go``, acts, and prints one JSON line.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from pathlib import Path
from typing import Any

from stores import (
    REENTRY_SEQ,
    RESUME,
    RESUME_KEY,
    AlreadyResumed,
    Checkpoint,
    PostgresStore,
    SQLiteStore,
    Store,
    WriteConflict,
)


def open_store(backend: str, target: str, schema: str) -> Store:
    if backend == "sqlite":
        return SQLiteStore(target)
    return PostgresStore(target, schema=schema)


async def wait_for_go(workdir: Path, index: str, rnd: str = "") -> None:
    (workdir / f"ready{rnd}-{index}").touch()
    deadline = time.monotonic() + 60
    while not (workdir / f"go{rnd}").exists():
        if time.monotonic() > deadline:
            raise TimeoutError("no go signal")
        await asyncio.sleep(0.001)


async def claim(store: Store, row: Checkpoint) -> dict[str, Any]:
    try:
        pending = await store.claim(row)
    except WriteConflict as exc:
        return {"outcome": "WriteConflict", "error": repr(exc)}
    except AlreadyResumed as exc:
        return {"outcome": "AlreadyResumed", "error": repr(exc)}
    except Exception as exc:
        return {"outcome": "error", "error": f"{type(exc).__module__}.{type(exc).__name__}: {exc}"}
    return {"outcome": "won", "context": pending.context}


async def main(argv: list[str]) -> dict[str, Any]:
    mode, backend, target, schema, workdir_s, index = argv[:6]
    workdir = Path(workdir_s)
    store = open_store(backend, target, schema)
    try:
        if mode == "migrate":
            await wait_for_go(workdir, index)
            await store.setup()
            await store.setup()
            return {"outcome": "ok"}
        await store.setup()
        if mode == "claim":
            results = []
            for rnd, (eid, seq) in enumerate(zip(argv[6].split(","), argv[7].split(","), strict=True)):
                row = Checkpoint(
                    execution_id=eid,
                    seq=int(seq),
                    runner="race",
                    node_id="turn:0/tool:refund",
                    step_type=RESUME,
                    node_input={REENTRY_SEQ: 2, RESUME_KEY: {"approved": True, "metadata": {"by": index}}},
                )
                await wait_for_go(workdir, index, f"-r{rnd}")
                results.append(await claim(store, row))
            return {"outcome": "rounds", "rounds": results}
        if mode == "lock":
            eid = argv[6]
            got = await store.try_lock(eid)
            print(json.dumps({"outcome": "locked" if got else "busy"}), flush=True)
            await asyncio.sleep(120)
            return {"outcome": "timeout"}
        raise SystemExit(f"unknown mode {mode}")
    finally:
        await store.close()


if __name__ == "__main__":
    print(json.dumps(asyncio.run(main(sys.argv[1:]))), flush=True)
