"""A registry of actors keyed by id (a run's ``execution_id``): get-or-activate and passivation.

At most one live actor per key: concurrent first messages share one activation, a new activation
waits until the previous actor for the key has fully exited, and the entry disappears on exit.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import TYPE_CHECKING

from ._actor import make_spec
from ._errors import ActorCrashed, ActorStopped
from ._event import LazyEvent
from ._supervision import ChildSpec, Restart

if TYPE_CHECKING:
    from ._actor import Actor
    from ._cell import Cell
    from ._ref import ActorRef
    from ._runtime import ActorRuntime

__all__ = ["Registry"]


class _Entry:
    __slots__ = ("cell", "error", "ready")

    def __init__(self) -> None:
        self.ready = LazyEvent()  # awaited only by a caller that finds the activation under way
        self.cell: Cell | None = None
        self.error: BaseException | None = None


class Registry:
    """Maps keys to live actors; owned by the runtime."""

    __slots__ = ("_entries", "_runtime")

    def __init__(self, runtime: ActorRuntime) -> None:
        self._runtime = runtime
        self._entries: dict[Hashable, _Entry] = {}

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, key: object) -> bool:
        return key in self._entries

    def lookup(self, key: Hashable) -> ActorRef | None:
        """The live, accepting actor for ``key``, if any (never activates)."""
        entry = self._entries.get(key)
        if entry is None or entry.cell is None or not entry.cell.accepting:
            return None
        return entry.cell.ref

    def live(self, key: Hashable) -> Actor | None:
        """The actor started for ``key`` whose task has not exited (accepting, or passivating or
        stopping), if any; ``None`` while ``key`` is only reserved. Never activates."""
        entry = self._entries.get(key)
        return entry.cell.actor if entry is not None and entry.cell is not None else None

    def live_keyed(self) -> list[tuple[Hashable, Actor]]:
        """Each key with the actor :meth:`live` gives for it (a snapshot)."""
        return [(key, entry.cell.actor) for key, entry in self._entries.items() if entry.cell is not None]

    async def get_or_activate(
        self,
        key: Hashable,
        factory: Callable[[], Actor],
        *,
        idle_timeout: float | None = None,
        mailbox_size: int = 1024,
        stop_timeout: float = 2.0,
        bindings: dict[str, object] | None = None,
    ) -> ActorRef:
        """Return the live actor for ``key``, activating it with ``factory`` on first use.

        Raises :class:`ActorCrashed` when the activation's ``on_start`` failed (for every caller that
        shared it). The waits are bounded by the activation's own ``on_start`` and by the previous
        actor's time-bounded stop.
        """
        ref = await self._settled(key, crashed=True)
        if ref is not None:
            return ref
        return await self._activate(key, factory, idle_timeout, mailbox_size, stop_timeout, bindings or {})

    async def deliver(
        self,
        key: Hashable,
        factory: Callable[[], Actor],
        message: object,
        *,
        idle_timeout: float | None = None,
        mailbox_size: int = 1024,
        stop_timeout: float = 2.0,
        bindings: dict[str, object] | None = None,
    ) -> ActorRef:
        """Send ``message`` to the actor for ``key``, activating one with ``message`` as its first
        message when there is none (so a passivation that comes first cannot refuse it).

        A live actor that passivates or stops between lookup and send refuses the message untaken;
        the key is then looked up again, a bounded number of times. Raises :class:`ActorCrashed`
        when the activation's ``on_start`` failed (a :class:`Failable` message is failed too).
        """
        for _ in range(16):
            ref = await self._settled(key, crashed=True)
            if ref is None:
                return await self._activate(
                    key, factory, idle_timeout, mailbox_size, stop_timeout, bindings or {}, first=message
                )
            try:
                await ref.send(message)
            except ActorStopped:
                continue
            return ref
        raise ActorStopped(f"could not deliver to {key!r}: its actor kept stopping")

    async def _settled(self, key: Hashable, *, crashed: bool) -> ActorRef | None:
        """Wait until ``key`` has a live, accepting actor (its ref) or no entry (``None``, and the
        caller may take the key before its next await): an activation or a reservation under way is
        waited for, an actor on its way out until its task has exited. ``crashed``: an activation
        waited for that failed raises :class:`ActorCrashed` instead of freeing the key."""
        while True:
            entry = self._entries.get(key)
            if entry is None:
                return None
            if not entry.ready.is_set():
                await entry.ready.wait()
                if crashed and entry.error is not None:
                    error = ActorCrashed(f"activation of {key!r} failed: {entry.error!r}", actor_id=str(key))
                    error.__cause__ = entry.error
                    raise error
                continue
            cell = entry.cell
            if cell is None:  # a failed activation left behind by a cancelled caller
                if self._entries.get(key) is entry:
                    del self._entries[key]
                continue
            if cell.accepting:
                return cell.ref
            await cell.exited.wait()

    async def _activate(
        self,
        key: Hashable,
        factory: Callable[[], Actor],
        idle_timeout: float | None,
        mailbox_size: int,
        stop_timeout: float,
        bindings: dict[str, object],
        *,
        first: object = None,
    ) -> ActorRef:
        entry = self._entries[key] = _Entry()
        spec = _spec(key, factory, mailbox_size, stop_timeout, bindings, idle_timeout=idle_timeout)
        try:
            ref = await self._runtime.spawn(spec, self._runtime.root, key=key, first=first)
        except BaseException as exc:
            if self._entries.get(key) is entry:
                del self._entries[key]
            entry.error = exc if isinstance(exc, Exception) else ActorStopped("activation was cancelled")
            entry.ready.set()
            raise
        entry.ready.set()
        return ref

    def reserve(self, key: Hashable) -> bool:
        """Hold ``key`` for an activation that :meth:`activate_reserved` starts later (a spawn writes
        its first row first); meanwhile others wait for it as for any activation. ``False`` when
        ``key`` has an entry (an actor live, activating, exiting, or another reservation)."""
        if key in self._entries:
            return False
        self._entries[key] = _Entry()
        return True

    async def reserve_when_free(self, key: Hashable) -> bool:
        """:meth:`reserve` ``key`` once no actor holds it: an activation under way is waited for,
        and an actor on its way out until its task has exited (bounded by its time-bounded stop).
        ``False`` when a live, accepting actor or another reservation has it by then."""
        return await self._settled(key, crashed=False) is None and self.reserve(key)

    def reserved(self, key: Hashable) -> bool:
        """Whether ``key`` is held by :meth:`reserve` and not activated yet."""
        entry = self._entries.get(key)
        return entry is not None and entry.cell is None and not entry.ready.is_set()

    def activate_reserved(
        self,
        key: Hashable,
        factory: Callable[[], Actor],
        message: object,
        *,
        mailbox_size: int = 1024,
        stop_timeout: float = 2.0,
        bindings: dict[str, object] | None = None,
    ) -> None:
        """Start the actor of the reserved ``key`` with ``message`` as its first message, without
        waiting for ``on_start``: its task runs from the next turn of the loop and handles
        ``message`` before anything else, even if a stop comes first (a failed ``on_start`` fails it,
        a :class:`Failable`). ``ActorStopped`` (the key is released) when the system is not running."""
        entry = self._entries[key]
        spec = _spec(key, factory, mailbox_size, stop_timeout, bindings or {})
        try:
            self._runtime.launch(spec, self._runtime.root, key=key, first=message)
        except BaseException:
            self.unreserve(key)
            raise
        entry.ready.set()

    def unreserve(self, key: Hashable) -> None:
        """Give up the reservation of ``key`` if it was not activated (its waiters go on)."""
        entry = self._entries.get(key)
        if entry is not None and entry.cell is None:
            del self._entries[key]
            entry.ready.set()

    def bind(self, key: Hashable, cell: Cell) -> None:
        """Attach the new ``cell`` to the pending activation of ``key`` (before its task runs)."""
        entry = self._entries.get(key)
        if entry is not None and entry.cell is None:
            entry.cell = cell

    def forget(self, key: Hashable, cell: Cell) -> None:
        """Drop ``key`` if it still names ``cell`` (called as the actor exits)."""
        entry = self._entries.get(key)
        if entry is not None and entry.cell is cell:
            del self._entries[key]

    def passivate(self, key: Hashable) -> bool:
        """Retire the actor for ``key`` once its mailbox is empty; return whether one was live."""
        entry = self._entries.get(key)
        if entry is None or entry.cell is None:
            return False
        entry.cell.passivate()
        return True


def _spec(
    key: Hashable,
    factory: Callable[[], Actor],
    mailbox_size: int,
    stop_timeout: float,
    bindings: dict[str, object],
    *,
    idle_timeout: float | None = None,
) -> ChildSpec:
    """The spec of the actor for ``key``: named by it, never restarted (a virtual actor activates
    again on its next message instead)."""
    return make_spec(
        factory,
        name=str(key),
        restart=Restart.TEMPORARY,
        mailbox_size=mailbox_size,
        stop_timeout=stop_timeout,
        idle_timeout=idle_timeout,
        bindings=bindings,
    )
