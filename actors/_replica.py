"""What an :class:`ActorSystem` needs of a replicator, and the store view that kicks it.

``actors`` never imports ``replication``: ``ActorSystem(replicator=...)`` takes any actor with the
small protocol :class:`ReplicatorLike` (bind to the system's store, be kicked after a commit,
restore a run the store lacks). The durable layer writes through :func:`kicking`'s view of the
store, which kicks the replicator after each committed write; a kick never waits (the run never
waits on the network). The view forwards each method of the store's protocols by name (no
attribute falls through), so mypy checks it against them like a backend.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from stores import OwnedStore

from ._core import Restart

if TYPE_CHECKING:
    from stores import (
        Admission,
        Cached,
        Checkpoint,
        PendingInterrupt,
        Queue,
        ReEntry,
        RowWatch,
        RunHead,
        Store,
        StoredSchedule,
        StoredSignal,
    )

__all__ = ["KickingOwnedStore", "KickingStore", "ReplicatorLike", "kicking"]


@runtime_checkable
class ReplicatorLike(Protocol):
    """The replicator protocol: an actor (the system starts it supervised, with ``restart``, and
    stops it within ``stop_timeout`` when it closes) with three calls."""

    restart: Restart
    stop_timeout: float

    def attach(self, store: Store) -> None:
        """Bind to the system's store (before the actor starts)."""

    def kick(self) -> None:
        """A commit happened (must not block or raise)."""

    async def restore(self, execution_id: str) -> bool:
        """Import the run from the plane if the store lacks it; whether it did."""


def kicking(store: Store, kick: Callable[[], None]) -> Store:
    """``store`` as the durable layer sees it when a replicator is attached: each write kicks it once
    committed. An :class:`~stores.OwnedStore` stays one (:class:`KickingOwnedStore`)."""
    if isinstance(store, OwnedStore):
        return KickingOwnedStore(store, kick)
    return KickingStore(store, kick)


class KickingStore:
    """A :class:`~stores.Store` whose writes kick the replicator once they committed; every other
    method is the store's own."""

    __slots__ = ("_kick", "_store")

    def __init__(self, store: Store, kick: Callable[[], None]) -> None:
        self._store = store
        self._kick = kick

    def __repr__(self) -> str:
        return repr(self._store)

    # -- the writes a replicator ships: each kicks it -----------------------------------------------

    async def append(self, row: Checkpoint) -> None:
        await self._store.append(row)
        self._kick()

    async def append_pause(self, row: Checkpoint, pending: PendingInterrupt) -> None:
        await self._store.append_pause(row, pending)
        self._kick()

    async def claim(self, row: Checkpoint) -> PendingInterrupt:
        found = await self._store.claim(row)
        self._kick()
        return found

    async def cache_put(self, execution_id: str, key: str, value: Any) -> Any:
        stored = await self._store.cache_put(execution_id, key, value)
        self._kick()
        return stored

    async def cache_intend(self, execution_id: str, key: str) -> Cached | bool:
        found = await self._store.cache_intend(execution_id, key)
        self._kick()
        return found

    # -- the rest of Store, the store's own -----------------------------------------------------------

    async def setup(self) -> None:
        await self._store.setup()

    async def close(self) -> None:
        await self._store.close()

    async def latest(self, execution_id: str) -> Checkpoint | None:
        return await self._store.latest(execution_id)

    async def reentry(self, execution_id: str) -> ReEntry:
        return await self._store.reentry(execution_id)

    async def forkable(self, execution_id: str, checkpoint_id: str | None = None) -> Checkpoint:
        return await self._store.forkable(execution_id, checkpoint_id)

    async def get(self, execution_id: str, checkpoint_id: str) -> Checkpoint | None:
        return await self._store.get(execution_id, checkpoint_id)

    async def history(
        self, execution_id: str, *, since: int = 0, limit: int | None = None
    ) -> list[Checkpoint]:
        return await self._store.history(execution_id, since=since, limit=limit)

    def watch(self, execution_id: str) -> RowWatch:
        return self._store.watch(execution_id)

    async def pending(
        self,
        execution_id: str | None = None,
        *,
        limit: int | None = None,
        after: PendingInterrupt | None = None,
    ) -> list[PendingInterrupt]:
        return await self._store.pending(execution_id, limit=limit, after=after)

    async def heads(
        self,
        *,
        execution_id: str | None = None,
        runner: str | None = None,
        state: str | None = None,
        before: tuple[datetime, str] | None = None,
        limit: int = 100,
    ) -> list[RunHead]:
        return await self._store.heads(
            execution_id=execution_id, runner=runner, state=state, before=before, limit=limit
        )

    async def owned(self, execution_ids: Sequence[str]) -> set[str]:
        return await self._store.owned(execution_ids)

    async def delete_run(self, execution_id: str) -> int:
        return await self._store.delete_run(execution_id)

    async def prune(self, older_than: timedelta) -> int:
        return await self._store.prune(older_than)

    async def cache_get(self, execution_id: str, key: str) -> Cached | None:
        return await self._store.cache_get(execution_id, key)

    async def signal(self, execution_id: str, name: str, payload: Any = None) -> int:
        found = await self._store.signal(execution_id, name, payload)
        self._kick()  # the inbox entry is shipped like a row
        return found

    async def signals(
        self, execution_id: str, *, name: str | None = None, consumed_by: int | None = None
    ) -> list[StoredSignal]:
        return await self._store.signals(execution_id, name=name, consumed_by=consumed_by)

    async def append_wait(self, row: Checkpoint, name: str | None, wake_at: datetime | None) -> None:
        await self._store.append_wait(row, name, wake_at)
        self._kick()

    async def due_waits(self, limit: int) -> list[tuple[str, int]]:
        return await self._store.due_waits(limit)

    async def next_wake(self, after: datetime | None = None) -> datetime | None:
        return await self._store.next_wake(after)

    async def settle_wait(self, execution_id: str, seq: int) -> None:
        await self._store.settle_wait(execution_id, seq)

    def watch_waits(self) -> RowWatch:
        return self._store.watch_waits()

    async def put_schedule(self, schedule: StoredSchedule) -> None:
        await self._store.put_schedule(schedule)

    async def delete_schedule(self, name: str) -> bool:
        return await self._store.delete_schedule(name)

    async def list_schedules(self) -> list[StoredSchedule]:
        return await self._store.list_schedules()

    async def due_schedules(self, now: datetime, limit: int) -> list[StoredSchedule]:
        return await self._store.due_schedules(now, limit)

    async def advance_schedule(self, name: str, seen: datetime, next_at: datetime, last_run: str) -> bool:
        return await self._store.advance_schedule(name, seen, next_at, last_run)

    async def try_lock(self, execution_id: str) -> bool:
        return await self._store.try_lock(execution_id)

    async def unlock(self, execution_id: str) -> None:
        await self._store.unlock(execution_id)


class KickingOwnedStore(KickingStore):
    """:class:`KickingStore` over an :class:`~stores.OwnedStore`: its ownership surface is the
    store's own (nothing there is shipped, so nothing kicks)."""

    __slots__ = ("_owner",)

    def __init__(self, store: OwnedStore, kick: Callable[[], None]) -> None:
        super().__init__(store, kick)
        self._owner = store

    async def try_lock_with_first_row(self, execution_id: str) -> bool:
        return await self._owner.try_lock_with_first_row(execution_id)

    async def orphans(
        self, limit: int = 100, *, full: Sequence[str] = (), full_keys: Sequence[tuple[str, str]] = ()
    ) -> list[str]:
        return await self._owner.orphans(limit, full=full, full_keys=full_keys)

    async def expired(self, limit: int = 100) -> list[str]:
        return await self._owner.expired(limit)

    async def take_queued(self, execution_id: str) -> Admission:
        return await self._owner.take_queued(execution_id)

    async def untake(self, execution_id: str) -> None:
        await self._owner.untake(execution_id)

    async def hand_off(
        self, execution_id: str, queue: str, key: str | None = None, priority: int = 0
    ) -> None:
        await self._owner.hand_off(execution_id, queue, key, priority)

    async def declare_queues(self, queues: Sequence[Queue]) -> list[Queue]:
        return await self._owner.declare_queues(queues)

    async def queues_of(self, execution_ids: Sequence[str]) -> dict[str, tuple[str, str | None]]:
        return await self._owner.queues_of(execution_ids)

    async def unowned(self, execution_ids: Sequence[str]) -> set[str]:
        return await self._owner.unowned(execution_ids)

    async def ownership(self, execution_ids: Sequence[str]) -> tuple[set[str], set[str]]:
        return await self._owner.ownership(execution_ids)

    def check_owner(self, execution_id: str) -> None:
        self._owner.check_owner(execution_id)

    def on_ownership_lost(self, listener: Callable[[list[str]], object]) -> None:
        self._owner.on_ownership_lost(listener)

    async def listen_for_work(self, wake: Callable[[], object]) -> Callable[[], Awaitable[None]] | None:
        return await self._owner.listen_for_work(wake)


if TYPE_CHECKING:  # mypy checks each view against the protocol it stands for
    _STORE: type[Store] = KickingStore
    _OWNED: type[OwnedStore] = KickingOwnedStore
