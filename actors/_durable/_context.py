"""What a run binds while it executes a step: the run's id, the writer's ``agent_path``, the store
(for ``@idempotent``), the step (its row's ``seq``, and the count of ``@idempotent`` calls made in
it so far), and the :class:`~actors.Resume` of a tool call being resumed.

One context variable holds a :class:`RunContext`. The run actor binds it around each step with
:func:`bind_run` / :func:`bind`; tasks and worker threads started inside inherit it (anyio copies
the context into ``to_thread.run_sync`` and ``from_thread.run``). :func:`current_run` is the public view.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable
from contextvars import ContextVar, Token
from typing import TYPE_CHECKING, Any, TypeVar

import anyio
import anyio.to_thread
import msgspec

from ._owned import owned

if TYPE_CHECKING:
    from stores import Store

    from ._messages import Resume
    from ._waits import StepWaits

__all__ = [
    "Occurrences",
    "RunContext",
    "RunInfo",
    "RunStop",
    "bind",
    "bind_run",
    "check_owner",
    "current_context",
    "current_resume",
    "current_run",
]


class Occurrences:
    """How many ``@idempotent`` calls of each (function, arguments) one execution of a step has made:
    the k-th identical call is occurrence k, so a re-run of the step, counting again from 0, finds each
    earlier result in order. Thread-safe (a sync tool's calls come from a worker thread)."""

    __slots__ = ("_counts", "_lock")

    def __init__(self) -> None:
        self._counts: dict[str, int] = {}
        self._lock = threading.Lock()

    def next(self, call: str) -> int:
        """The occurrence number of this call of ``call`` (0 for the first)."""
        with self._lock:
            k = self._counts.get(call, 0)
            self._counts[call] = k + 1
            return k


T = TypeVar("T")


class RunStop:
    """Set when another process cancelled the run while a step ran. From then on no ``@idempotent``
    body starts for the run, and a sync tool's thread waited for with :meth:`in_thread` is abandoned
    (it runs on, and what it returns is ignored). Set on the event loop's thread; read from any.

    A flag rather than a ``threading.Event`` (nothing waits on it): one is made per tool call."""

    __slots__ = ("_set", "_waiting")

    def __init__(self) -> None:
        self._set = False
        self._waiting: anyio.CancelScope | None = None

    def is_set(self) -> bool:
        """Whether the run was cancelled from another process."""
        return self._set

    def set(self) -> None:
        self._set = True
        if self._waiting is not None:
            self._waiting.cancel()

    async def in_thread(self, call: Callable[[], T]) -> tuple[bool, T | None]:
        """Run ``call`` in a worker thread and wait for it whatever cancels the caller (a stopping
        system waits for a sync tool to return, so that its step ends with its row), unless this is
        set meanwhile: then the thread is abandoned. Returns whether it finished, and its result."""
        with anyio.CancelScope(shield=True) as scope:
            self._waiting = scope
            try:
                if self.is_set():
                    scope.cancel()
                return True, await anyio.to_thread.run_sync(call, abandon_on_cancel=True)
            finally:
                self._waiting = None
        return False, None


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class RunContext:
    """The binding of one step of a run. ``store`` is where ``@idempotent`` caches (``None``: no
    caching); ``step`` the ``seq`` of the step's row (for a re-entered tool, its original tool
    row), which with ``occurrences`` makes ``@idempotent``'s default key; ``resume`` is set only
    while the tool call that paused runs again. Derive the binding of a nested step with
    ``dataclasses.replace(ctx, agent_path=..., node_id=..., step=..., occurrences=Occurrences())``."""

    execution_id: str
    agent_path: str | None = None
    store: Store | None = None
    node_id: str | None = None
    resume: Resume | None = None
    shared: dict[str, Any] | None = None
    step: int | None = None
    occurrences: Occurrences = dataclasses.field(default_factory=Occurrences)
    #: How long an ``@idempotent`` lookup or put rides out a store outage (the system's
    #: ``store_outage_grace``) before the step is abandoned.
    outage_grace: float = 60.0
    #: Set when the run was cancelled from another process while the step ran: no ``@idempotent``
    #: body starts from then on, and a sync tool's thread is abandoned.
    stopped: RunStop | None = None
    #: The waits of a tool step (``wait_signal``, ``sleep``); ``None`` outside one.
    waits: StepWaits | None = None


class RunInfo(msgspec.Struct, frozen=True):
    """What a tool may know of the run it runs in. ``shared`` is the run's one JSON dict, shared by
    every agent of a topology: mutate it in place; the rows written after carry it."""

    execution_id: str
    agent_path: str | None = None
    node_id: str | None = None
    shared: dict[str, Any] = {}


_current: ContextVar[RunContext | None] = ContextVar("tether_run", default=None)


def current_context() -> RunContext | None:
    """The bound :class:`RunContext`, or ``None`` outside a run (internal)."""
    return _current.get()


def current_run() -> RunInfo | None:
    """The run this code executes in: its ``execution_id`` and ``agent_path``; ``None`` outside a run."""
    ctx = _current.get()
    if ctx is None:
        return None
    shared = ctx.shared if ctx.shared is not None else {}
    return RunInfo(ctx.execution_id, ctx.agent_path, ctx.node_id, shared)


def current_resume() -> Resume | None:
    """The decision bound for the tool call being resumed, if any."""
    ctx = _current.get()
    return None if ctx is None else ctx.resume


class bind:
    """Bind ``ctx`` for the ``with`` block (in this task and what it starts), then restore.

    A small class rather than a ``@contextmanager`` generator: it is entered on every tool call."""

    __slots__ = ("_ctx", "_token")

    _token: Token[RunContext | None]

    def __init__(self, ctx: RunContext) -> None:
        self._ctx = ctx

    def __enter__(self) -> RunContext:
        self._token = _current.set(self._ctx)
        return self._ctx

    def __exit__(self, *exc_info: object) -> None:
        _current.reset(self._token)


def bind_run(
    execution_id: str,
    *,
    agent_path: str | None = None,
    store: Store | None = None,
    node_id: str | None = None,
    resume: Resume | None = None,
    shared: dict[str, Any] | None = None,
    step: int | None = None,
    outage_grace: float = 60.0,
    stopped: RunStop | None = None,
    waits: StepWaits | None = None,
) -> bind:
    """Bind a new :class:`RunContext` for the ``with`` block (an execution of the step ``step``,
    counting its ``@idempotent`` calls from 0)."""
    return bind(
        RunContext(
            execution_id=execution_id,
            agent_path=agent_path,
            store=store,
            node_id=node_id,
            resume=resume,
            shared=shared,
            step=step,
            outage_grace=outage_grace,
            stopped=stopped,
            waits=waits,
        )
    )


def check_owner(store: Store | None, execution_id: str) -> None:
    """Refuse to start a tool or an ``@idempotent`` body for a run this process no longer owns
    (``OwnershipLost``: its liveness lock was lost); a store without ownership has nothing to say."""
    found = owned(store)
    if found is not None:
        found.check_owner(execution_id)
