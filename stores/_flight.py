"""One claim per pause per process: racing claimers of one process wait for the first one.

Rule 4 of docs/durability.md (exactly one of many racing resumers wins) rests on the database.
This only spares the losers in one process the database work of finding out: while a claim of a
run is in flight, a second claim of that run (from any store instance on the same database) waits for its outcome. If
the first won, the second lost: it raises what the database would have said (``AlreadyResumed``)
without a statement. If the first failed, the second makes its own attempt. Any anyio backend.
"""

from __future__ import annotations

import threading
from collections.abc import Awaitable, Callable, Hashable
from typing import TypeVar

import anyio
import anyio.lowlevel

__all__ = ["single_claim"]

T = TypeVar("T")


class _Flight:
    """A claim in flight: the loop it runs on, and its outcome once it is over."""

    __slots__ = ("done", "loop", "won")

    def __init__(self, loop: object) -> None:
        self.loop = loop
        self.won = False
        self.done = anyio.Event()


_flights: dict[Hashable, _Flight] = {}
_guard = threading.Lock()


async def single_claim(key: Hashable, claim: Callable[[], Awaitable[T]], lost: Callable[[], Exception]) -> T:
    """Run ``claim()`` unless a claim of ``key`` is in flight here; if that one wins, raise ``lost()``."""
    loop = anyio.lowlevel.current_token().native_token
    while True:
        with _guard:
            current = _flights.get(key)
            if current is None:
                mine = _flights[key] = _Flight(loop)
                break
        if current.loop is not loop:  # a claimer on another event loop: let the database decide
            return await claim()
        await current.done.wait()  # cancelling this wait leaves the first claim alone
        if current.won:
            raise lost()
    try:
        result = await claim()
        mine.won = True
        return result
    finally:
        with _guard:
            del _flights[key]
        mine.done.set()
