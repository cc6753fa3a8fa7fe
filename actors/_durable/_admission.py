"""A sweep's admission: which of the runs that need an owner this process takes now, one by one, in
the order the store lists them (the runs of dead owners, then the queued ones, higher priority
first, then oldest), each under its queue's fleet-wide limits (``stores._queues``).

The store's take (``take_queued``) writes the take, so a run admitted here is held by this process
before any task drives it; its activation goes on with that take. A refusal by a queue's limits
skips the queue's other runs for the rest of the pass (by ``per_key``: the key's runs); a refusal
by the rate says when to look again.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from stores import Admission, OwnedStore, StoreError

__all__ = ["admit"]


#: How many listings one pass reads at most: each after the one before found a queue or key full.
_ROUNDS = 8
#: A pass's listing: the ids of the runs needing an owner, but for the queued runs of the full
#: queues and of the full (queue, key) pairs it is given.
Listing = Callable[[list[str], list[tuple[str, str]]], Awaitable[list[str]]]


class _Pass:
    """What one pass learnt of its queues: which are full, and the soonest a rate admits a start."""

    __slots__ = ("full", "full_keys", "retry_in")

    def __init__(self) -> None:
        self.full: set[str] = set()
        self.full_keys: set[tuple[str, str]] = set()
        self.retry_in: float | None = None

    def refused(self, admission: Admission) -> bool:
        """Note a refusal; whether a limit refused it (the listing is then read again without)."""
        if admission.retry_in is not None:
            soonest = max(admission.retry_in, 0.0)
            self.retry_in = soonest if self.retry_in is None else min(self.retry_in, soonest)
        queue, key = admission.queue, admission.key
        if admission.full is None or queue is None:
            return False
        if admission.full == "key" and key is not None:
            self.full_keys.add((queue, key))
        else:
            self.full.add(queue)
        return True


async def admit(
    store: OwnedStore,
    listing: Listing,
    room: int,
    live: Callable[[str], bool],
    unsure: Callable[[str], object],
) -> tuple[list[str], float | None]:
    """Take up to ``room`` of the runs ``listing`` gives, in order (not those ``live`` here); when
    a queue's limits refuse a run, the listing is read again without that queue (or key), so the
    runs of one full queue never hide another queue's. The ids taken and the seconds until a rate
    admits another start (``None``: no rate refused).

    A store error ends the pass: raised when nothing was taken yet, else the runs taken so far are
    returned (they are held here and must be driven); a take whose outcome it left unknown is
    handed to ``unsure`` (it may name this process as its owner: this process takes it again)."""
    found = _Pass()
    taken: list[str] = []
    tried: set[str] = set()
    try:
        for _ in range(_ROUNDS):
            again = False
            for eid in await listing(sorted(found.full), sorted(found.full_keys)):
                if len(taken) >= room:
                    break
                if eid in tried or live(eid):
                    continue
                tried.add(eid)
                try:
                    admission = await store.take_queued(eid)
                except StoreError:
                    unsure(eid)
                    raise
                if admission.taken:
                    taken.append(eid)
                elif found.refused(admission):
                    tried.discard(eid)  # listed no more while its queue (or key) is full
                    again = True
                    break
            if len(taken) >= room or not again:
                break
    except StoreError:
        if not taken:
            raise
    return taken, found.retry_in
