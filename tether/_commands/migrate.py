"""``tether migrate``: bring the store's schema to this version (safe while other processes run)."""

from __future__ import annotations

import argparse

from stores import open_store

from .._progress import Progress
from .._store_url import close_store
from ._command import Command

__all__ = ["COMMAND"]


async def _run(args: argparse.Namespace) -> int:
    store = open_store(args.store)
    try:
        async with Progress(f"migrating {store!r}"):
            await store.setup()
    finally:
        await close_store(store)
    print(f"{store!r} is at the current schema")
    return 0


COMMAND = Command(name="migrate", help="create or migrate the store's schema to this version", run=_run)
