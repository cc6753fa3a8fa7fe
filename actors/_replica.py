"""What an :class:`ActorSystem` needs of a replicator, and the store view that kicks it.

``actors`` never imports ``replication``: ``ActorSystem(replicator=...)`` takes any actor with the
small protocol :class:`ReplicatorLike` (bind to the system's store, be kicked after a commit,
restore a run the store lacks). The durable layer writes through :class:`KickingStore`, which
kicks the replicator after each committed write; a kick never waits (the run never waits on the
network).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from ._core import Restart

if TYPE_CHECKING:
    from stores import Checkpoint, PendingInterrupt, Store

__all__ = ["KickingStore", "ReplicatorLike"]


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


class KickingStore:
    """``store`` as the durable layer sees it: each write kicks the replicator once it committed.

    Everything else is the store's own (attribute access falls through to it).
    """

    __slots__ = ("_kick", "_store")

    def __init__(self, store: Store, kick: Callable[[], None]) -> None:
        self._store = store
        self._kick = kick

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    def __repr__(self) -> str:
        return repr(self._store)

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

    async def cache_intend(self, execution_id: str, key: str) -> Any:
        found = await self._store.cache_intend(execution_id, key)
        self._kick()
        return found
