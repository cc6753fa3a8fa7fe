"""``ActorSystem``: the public entry point, a thin async context manager over :class:`ActorRuntime`.

It holds the durable-run configuration (``store``, ``runners``, ``replicator``) for the durable layer
and delegates plain actors to the runtime. The store is opened only on first durable use.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable, Mapping
from types import TracebackType
from typing import TYPE_CHECKING, Any

import anyio

from ._actor import make_spec
from ._runtime import ActorRuntime
from ._supervision import ChildSpec, Restart, Supervision

if TYPE_CHECKING:
    from typing import Self

    from ._actor import Actor
    from ._errors import RestartIntensityExceeded
    from ._ref import ActorRef

__all__ = ["ActorSystem"]


class ActorSystem:
    """Owns the supervision root, the registry and (lazily) the store; use it as ``async with``.

    Leaving the block stops every actor (children first, ``on_stop`` shielded and time-bounded) and
    leaves no task behind; so does cancelling the block. When a failure escalates to the root (a
    restart intensity was exceeded there), it is logged, appended to :attr:`escalations`, every actor
    is stopped, the block is cancelled and it raises :class:`RestartIntensityExceeded`.
    """

    def __init__(
        self,
        store: Any = None,
        *,
        runners: Iterable[Any] = (),
        replicator: Any = None,
        supervision: Supervision | None = None,
    ) -> None:
        self.store = store
        self.runners = tuple(runners)
        self.replicator = replicator
        self._runtime = ActorRuntime(self, supervision=supervision)
        self._owns_store = False
        self._store_lock: anyio.Lock | None = None

    @property
    def runtime(self) -> ActorRuntime:
        """The runtime core: registry (``get_or_activate``, ``deliver``, ``passivate``) and root."""
        return self._runtime

    @property
    def escalations(self) -> list[RestartIntensityExceeded]:
        """Failures that reached the root of the supervision tree, oldest first."""
        return self._runtime.escalations

    async def __aenter__(self) -> Self:
        await self._runtime.__aenter__()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool | None:
        try:
            return await self._runtime.__aexit__(exc_type, exc, tb)
        finally:
            if self._owns_store and self.store is not None:
                await self._close_store()

    async def start(
        self,
        actor: Actor | Callable[[], Actor] | ChildSpec,
        *,
        name: str | None = None,
        restart: Restart = Restart.PERMANENT,
        mailbox_size: int = 1024,
        stop_timeout: float = 2.0,
        bindings: Mapping[str, object] | None = None,
    ) -> ActorRef:
        """Start a plain actor supervised by the system root; return its ref after ``on_start`` ran.

        ``actor`` is an instance (a restart re-runs its hooks on the same object), a zero-argument
        factory (a restart builds a fresh one) or a :class:`ChildSpec`. Raises ``ActorCrashed`` if
        ``on_start`` fails.
        """
        spec = make_spec(
            actor,
            name=name,
            restart=restart,
            mailbox_size=mailbox_size,
            stop_timeout=stop_timeout,
            bindings=bindings,
        )
        return await self._runtime.start(spec)

    async def _durable_store(self) -> Any:
        """The store, opening the default ``SQLiteStore("tether.db")`` on first durable use."""
        if self.store is not None:
            return self.store
        if self._store_lock is None:
            self._store_lock = anyio.Lock()
        async with self._store_lock:
            if self.store is None:
                # Lazy: plain actors never import or open the database.
                stores: Any = importlib.import_module("stores")
                store = stores.SQLiteStore("tether.db")
                await store.setup()
                self.store = store
                self._owns_store = True
        return self.store

    async def _close_store(self) -> None:
        """Close a store this system opened itself (shielded, bounded)."""
        with anyio.CancelScope(shield=True), anyio.move_on_after(5.0):
            await self.store.close()
