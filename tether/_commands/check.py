"""``tether check``: run SQLite's integrity check on the store's file and report what it found.

Exit 0 when the file is sound, 1 when it is damaged (each problem SQLite names on its own line)
or cannot be checked. It opens the file read-only and creates nothing; it reads every page.
"""

from __future__ import annotations

import argparse

from stores import SQLiteStore, StoreCorrupt, StoreError, open_store

from .._store_url import close_store
from ._command import Command

__all__ = ["COMMAND"]


async def _run(args: argparse.Namespace) -> int:
    store = open_store(args.store)
    try:
        if not isinstance(store, SQLiteStore):
            raise StoreError(
                f"{store!r}: check runs SQLite's integrity check; PostgreSQL checks its own pages "
                "(see its amcheck extension)"
            )
        problems = await store.integrity_check()
    finally:
        await close_store(store)
    if problems:
        for line in problems:
            print(line)
        raise StoreCorrupt(
            f"{store!r} is damaged ({len(problems)} problem(s) above): restore it from a backup "
            "(docs/durability.md, 'The SQLite file')"
        )
    print(f"{store!r}: integrity check ok")
    return 0


COMMAND = Command(name="check", help="run SQLite's integrity check on the store's file", run=_run)
