"""One claim per pause per process: racing claimers of one process wait for the first one.

Rule 4 of docs/durability.md (exactly one of many racing resumers wins) rests on the database.
This only spares the losers in one process the database work of finding out: while a claim of a
run is in flight, a second claim of that run (from any store instance on the same database) waits for its outcome. If
the first won, the second lost: it raises what the database would have said (``AlreadyResumed``)
without a statement. If the first failed, the second makes its own attempt.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable, Hashable
from typing import TypeVar

__all__ = ["single_claim"]

T = TypeVar("T")

_flights: dict[Hashable, tuple[asyncio.AbstractEventLoop, asyncio.Future[bool]]] = {}
_guard = threading.Lock()


async def single_claim(key: Hashable, claim: Callable[[], Awaitable[T]], lost: Callable[[], Exception]) -> T:
    """Run ``claim()`` unless a claim of ``key`` is in flight here; if that one wins, raise ``lost()``."""
    loop = asyncio.get_running_loop()
    while True:
        with _guard:
            current = _flights.get(key)
            if current is None:
                mine: asyncio.Future[bool] = loop.create_future()
                _flights[key] = (loop, mine)
                break
        if current[0] is not loop:  # a claimer on another event loop: let the database decide
            return await claim()
        if await asyncio.shield(current[1]):
            raise lost()
    won = False
    try:
        result = await claim()
        won = True
        return result
    finally:
        with _guard:
            del _flights[key]
        mine.set_result(won)
