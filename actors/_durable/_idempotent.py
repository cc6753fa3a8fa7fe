"""``@idempotent``: run a side effect once per call of a run, even when a resume or a recovery re-runs its step.

Inside a run, the result is cached in the run's store per ``(execution_id, key)``. The default key is
the call's occurrence: a digest of the ``execution_id``, the step it runs in (its row's ``seq``; for a
re-entered tool its original tool row, so a resume or a recovery in any process finds it), the
function's module and qualified name (the module's importable name, also when it runs as a script:
see :func:`module_name`), its arguments as canonical JSON (bound to the signature with
defaults applied: ``f(1)``, ``f(x=1)`` and, for a default ``x=1``, ``f()`` are one call), and ``k``
for the k-th such call in that execution of the step. A re-run of a step counts again from 0, so it
gets each earlier result in order and runs no body twice; two intentional identical calls (in one
step or in two) are two occurrences and run twice, as without durability. ``key=fn`` gives an
explicit key scoped to the whole run (prefixed with the function's name, so two functions never
share an entry). A fork has a new ``execution_id``, so a new cache. Outside a run the body runs
every time. Arguments that are not JSON need ``key=``.

Entries written before keys counted occurrences (a digest of the name and the arguments alone) stay
readable: a miss under the occurrence key reads the entry of that older form, so a run in flight
across the upgrade does not run a body again. For a function of a script run as ``__main__``, the
entries written while its keys named the module ``__main__`` are read the same way.

A crash after the body's side effect and before its result commits re-runs the body on recovery:
at-least-once across a crash. Inside the body :func:`idempotency_key` returns a key that is the same
on every re-run of that call, for an external API that deduplicates (exactly-once end to end);
``at_most_once=True`` records an intent before the body and, when a re-run finds an intent and no
result, raises :class:`~actors.SideEffectInDoubt` instead of running the body again.

Every call returns the result's JSON form (``stores.normalize_json``), the first call included, so a
hit and a miss give equal values. A result that is not JSON raises :class:`~stores.IdempotencyError`
(after the body ran; nothing is cached). Concurrent calls of one key in one process (an explicit key)
run the body once: the first caller leads, the others get its value or exception (a cancelled leader
lets the next waiter lead). Across processes the store's insert-if-absent ``cache_put`` makes the
first stored value win.

A store error never reaches the body's caller: a lookup or a put that finds the store unusable is
retried with backoff for up to the system's ``store_outage_grace``, then the step is abandoned as on
lock loss (the run stops without writing; a sweep recovers it), by an exception no tool catches
(:class:`~._runlog.StepAbandoned`). A body that ran before an abandoned put is inside the
at-least-once window above: its re-run has the same :func:`idempotency_key`.

Sync functions work in a run when called from a worker thread (a sync tool runs in one); on the
event-loop thread a sync ``@idempotent`` function cannot wait for the store and raises ``RuntimeError``.
"""

from __future__ import annotations

import functools
import hashlib
import inspect
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path
from typing import Any, ParamSpec, TypeVar, cast, overload

import anyio.from_thread

from stores import (
    IdempotencyError,
    OwnershipLost,
    Store,
    StoreError,
    WriteConflict,
    canonical_json,
    new_id,
)
from stores import normalize_json as normalize

from .._core import LazyEvent
from ._context import RunContext, RunStop, check_owner, current_context
from ._errors import SideEffectInDoubt
from ._runlog import StepAbandoned, cancelled_elsewhere, outage_abandoned, outlast, refusal_abandoned

__all__ = ["after_bodies", "idempotency_key", "idempotent", "module_name"]

P = ParamSpec("P")
R = TypeVar("R")

KeyFn = Callable[..., str]
_FlightKey = tuple[int, str, str]
#: Tags the digest of an occurrence key (and of an idempotency key), so no other form collides.
_OCCURRENCE = "tether.idempotent/occurrence"
_EXTERNAL = "tether.idempotency_key"

#: Seconds a result's put may take past the outage grace before it is given up (shielded).
_PUT_SLACK = 10.0

#: The idempotency key of the ``@idempotent`` body running in this task or thread.
_current_key: ContextVar[str | None] = ContextVar("tether_idempotency_key", default=None)


def idempotency_key() -> str:
    """Inside an ``@idempotent`` body: a key of this call that is the same on every re-run of it (a
    resume, a recovery in any process), to hand to an external API that deduplicates (a payment
    API's ``Idempotency-Key``). Outside a run each call is its own: a fresh key. ``RuntimeError``
    outside an ``@idempotent`` body."""
    key = _current_key.get()
    if key is None:
        raise RuntimeError("idempotency_key() is called inside an @idempotent function's body, not here")
    return key


@contextmanager
def _keyed(key: str) -> Iterator[None]:
    token = _current_key.set(key)
    try:
        yield
    finally:
        _current_key.reset(token)


class _Flight:
    """One in-process call of a key in progress; waiters wait on ``done``."""

    __slots__ = ("abandoned", "done", "error", "key", "value")

    def __init__(self, key: _FlightKey) -> None:
        self.key = key
        self.done = LazyEvent()  # awaited only by a concurrent call of the same key
        self.value: Any = None
        self.error: Exception | None = None
        self.abandoned = False


_flights: dict[_FlightKey, _Flight] = {}
#: Per run (store id, execution_id): how many of its calls are in flight here, and what to call once
#: none is (see :func:`after_bodies`). Touched on the event loop's thread only.
_running: dict[tuple[int, str], int] = {}
_when_idle: dict[tuple[int, str], list[Callable[[], object]]] = {}


def after_bodies(store: Store, execution_id: str, callback: Callable[[], object]) -> bool:
    """Call ``callback()`` once no ``@idempotent`` call of the run is in flight in this process
    (a body that started finishes and stores its result first); ``False`` (and no call) when none
    is in flight now. A run abandoned on a lost lock stops this way, so a body it started is not
    cut between its side effect and its result."""
    run = (id(store), execution_id)
    if not _running.get(run):
        return False
    _when_idle.setdefault(run, []).append(callback)
    return True


class _Call:
    """One call of an ``@idempotent`` function in a run: where it caches, under which keys."""

    __slots__ = (
        "at_most_once",
        "execution_id",
        "external",
        "grace",
        "key",
        "name",
        "older",
        "stopped",
        "store",
    )

    def __init__(
        self,
        store: Store,
        execution_id: str,
        name: str,
        key: str,
        older: tuple[str, ...],
        *,
        at_most_once: bool,
        grace: float,
        stopped: RunStop | None = None,
    ) -> None:
        self.store = store
        self.grace = grace
        self.stopped = stopped
        self.execution_id = execution_id
        self.name = name
        self.key = key
        self.older = older  # the keys earlier versions wrote this call's entry under, read on a miss
        self.at_most_once = at_most_once
        self.external = hashlib.sha256(canonical_json([_EXTERNAL, execution_id, key])).hexdigest()

    async def through_outage(self, attempt: Callable[[], Any], what: str) -> Any:
        """``await attempt()`` through a store outage (retried for up to ``grace`` seconds); a store
        that stays unusable, or a lost lock, raises :class:`StepAbandoned` (never a tool's result)."""
        try:
            return await outlast(attempt, execution_id=self.execution_id, grace=self.grace, what=what)
        except StoreError as error:  # outlast raised an outage past the grace as OwnershipLost
            lost = (
                error
                if isinstance(error, OwnershipLost)
                else refusal_abandoned(self.execution_id, what, error)
            )
            raise StepAbandoned(lost) from error

    async def lookup(self) -> tuple[bool, Any]:
        """``(True, value)`` when a result is stored; ``(False, None)`` when the body must run (for
        an at-most-once call, once its intent is recorded). Raises ``SideEffectInDoubt``, or
        :class:`StepAbandoned` when the store stays unusable."""
        return await self.through_outage(self._lookup, f"@idempotent {self.name} lookup")  # type: ignore[no-any-return]

    async def _lookup(self) -> tuple[bool, Any]:
        store, eid = self.store, self.execution_id
        if not self.at_most_once:
            hit = await store.cache_get(eid, self.key)
            for older in self.older:
                if hit is not None:
                    break
                hit = await store.cache_get(eid, older)
            return (False, None) if hit is None else (True, hit.value)
        for older in self.older:
            if (old := await store.cache_get(eid, older)) is not None:
                return True, old.value
        found = await store.cache_intend(eid, self.key)
        if found is False:
            raise SideEffectInDoubt(self.name, self.external, execution_id=eid)
        return (False, None) if found is True else (True, found.value)


def _settle(flight: _Flight, *, value: Any = None, error: BaseException | None = None) -> None:
    """Finish a flight (on the event-loop thread): share its value or exception, or let a waiter lead."""
    if isinstance(error, Exception):
        flight.error = error
    elif error is not None:
        flight.abandoned = True
    else:
        flight.value = value
    if _flights.get(flight.key) is flight:
        del _flights[flight.key]
    run = flight.key[:2]
    left = _running.get(run, 1) - 1
    if left > 0:
        _running[run] = left
    else:
        _running.pop(run, None)
        for callback in _when_idle.pop(run, ()):
            callback()
    flight.done.set()


async def _begin(call: _Call) -> tuple[bool, Any, _Flight | None]:
    """``(True, value, None)`` on a hit, else ``(False, None, flight)``: the caller leads and must
    finish the flight with :func:`_finish` or :func:`_settle`."""
    flight_key = (id(call.store), call.execution_id, call.key)
    while (other := _flights.get(flight_key)) is not None:
        await other.done.wait()
        if other.error is not None:
            raise other.error
        if not other.abandoned:
            return True, other.value, None
    flight = _Flight(flight_key)
    _flights[flight_key] = flight
    run = (id(call.store), call.execution_id)
    _running[run] = _running.get(run, 0) + 1
    try:
        hit, value = await call.lookup()
    except BaseException as exc:
        _settle(flight, error=exc)
        raise
    try:
        # The body runs, and a stored result is handed on, only while the run is ours: a process
        # that lost the run stops here whether or not its recoverer stored the result first.
        check_owner(call.store, call.execution_id)
        if hit:
            _settle(flight, value=value)
            return True, value, None
        if call.stopped is not None and call.stopped.is_set():
            raise cancelled_elsewhere(call.execution_id)
    except (StoreError, WriteConflict) as exc:  # never the tool's result: the run stops without writing
        lost = exc
        if not isinstance(exc, (OwnershipLost, WriteConflict)):  # the check itself could not be made
            lost = refusal_abandoned(call.execution_id, f"ownership check of @idempotent {call.name}", exc)
        abandoned = StepAbandoned(lost)
        _settle(flight, error=abandoned)  # each waiter checks for itself
        raise abandoned from None
    except BaseException as exc:
        _settle(flight, error=exc)
        raise
    return False, None, flight


async def _finish(call: _Call, flight: _Flight, result: Any) -> Any:
    """Store the leader's result (insert-if-absent) and hand the stored value to the waiters.

    The body has run: its result is stored even if the run is cancelled or abandoned meanwhile
    (shielded, bounded by the outage grace), so a recovery finds it instead of running it again."""
    try:
        value = _json_result(result, call.name)
        deadline = anyio.current_time() + call.grace + _PUT_SLACK
        with anyio.CancelScope(shield=True, deadline=deadline) as scope:
            stored = await call.through_outage(
                lambda: call.store.cache_put(call.execution_id, call.key, value),
                f"@idempotent {call.name} put",
            )
        if scope.cancelled_caught:
            error = TimeoutError(f"the put took over {call.grace + _PUT_SLACK:g} s")
            raise StepAbandoned(outage_abandoned(call.execution_id, call.grace, error))
    except BaseException as exc:
        _settle(flight, error=exc)
        raise
    _settle(flight, value=stored)
    return stored


def _json_result(result: Any, name: str) -> Any:
    try:
        return normalize(result, error=IdempotencyError)
    except IdempotencyError as exc:
        raise IdempotencyError(
            f"@idempotent function {name!r} returned a value that is not JSON: {_bare(exc)}", path=exc.path
        ) from None


def _bare(exc: IdempotencyError) -> str:
    text, suffix = str(exc), f" (at {exc.path})"
    return text[: -len(suffix)] if text.endswith(suffix) else text


def _json_arguments(
    name: str, signature: inspect.Signature | None, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> Any:
    if signature is not None:
        bound = signature.bind(*args, **kwargs)
        bound.apply_defaults()
        arguments: Any = dict(bound.arguments)
    else:
        arguments = [list(args), kwargs]
    try:
        return normalize(arguments, path="$.arguments", error=IdempotencyError)
    except IdempotencyError as exc:
        raise IdempotencyError(
            f"@idempotent function {name!r} was called with an argument that is not JSON "
            f"({_bare(exc)}); pass @idempotent(key=...) to name its cache entry",
            path=exc.path,
        ) from None


def _make_call(
    ctx: RunContext,
    store: Store,
    name: str,
    loaded_as: str | None,
    signature: inspect.Signature | None,
    key_fn: KeyFn | None,
    at_most_once: bool,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
) -> _Call:
    """The call's key, and the keys earlier versions wrote its entry under (``loaded_as``: a
    script's function, whose entries of earlier versions name the module ``__main__``)."""
    eid = ctx.execution_id
    older: tuple[str, ...]
    if key_fn is not None:
        user_key = key_fn(*args, **kwargs)
        if not isinstance(user_key, str):
            raise TypeError(f"@idempotent key= for {name!r} must return a str, not {type(user_key).__name__}")
        key = f"{name}:{user_key}"
        older = () if loaded_as is None else (f"{loaded_as}:{user_key}",)
    else:
        arguments = _json_arguments(name, signature, args, kwargs)
        legacy = _legacy_key(name, arguments)
        step = ctx.step if ctx.step is not None else ctx.node_id
        k = ctx.occurrences.next(legacy)
        key = _occurrence_key(eid, step, name, arguments, k)
        older = (
            (legacy,)
            if loaded_as is None
            else (_occurrence_key(eid, step, loaded_as, arguments, k), _legacy_key(loaded_as, arguments))
        )
    return _Call(
        store, eid, name, key, older, at_most_once=at_most_once, grace=ctx.outage_grace, stopped=ctx.stopped
    )


def _legacy_key(name: str, arguments: Any) -> str:
    """The key of entries written before keys counted occurrences."""
    return hashlib.sha256(canonical_json([name, arguments])).hexdigest()


def _occurrence_key(eid: str, step: int | str | None, name: str, arguments: Any, k: int) -> str:
    return hashlib.sha256(canonical_json([_OCCURRENCE, eid, step, name, arguments, k])).hexdigest()


def module_name(module: str) -> str:
    """The name a module is imported by, also when it runs as a script (``__main__``).

    A key built from it is the same in a process that runs ``app.py`` (or ``python -m app``) and in
    one that imports ``app``: ``python -m`` gives the name; a script's file gives its stem, prefixed
    by the packages it sits in (each directory up with an ``__init__.py``), as ``import pkg.app``
    names it from the directory above ``pkg``. Code with no file (a REPL, ``python -c``) stays
    ``__main__``.
    """
    if module != "__main__":
        return module
    main = sys.modules.get("__main__")
    spec = getattr(main, "__spec__", None)
    if spec is not None and spec.name:  # python -m
        return str(spec.name)
    file = getattr(main, "__file__", None)
    if not file:
        return module
    path = Path(file).resolve()
    parts = [path.stem]
    folder = path.parent
    while (folder / "__init__.py").is_file() and folder != folder.parent:
        parts.append(folder.name)
        folder = folder.parent
    return ".".join(reversed(parts))


def _wrap(fn: Callable[..., Any], key_fn: KeyFn | None, at_most_once: bool) -> Callable[..., Any]:
    module = module_name(fn.__module__)
    name = f"{module}.{fn.__qualname__}"
    loaded_as = f"{fn.__module__}.{fn.__qualname__}" if module != fn.__module__ else None
    try:
        signature: inspect.Signature | None = inspect.signature(fn)
    except (TypeError, ValueError):  # some builtins have none: key on args and kwargs as given
        signature = None

    if inspect.iscoroutinefunction(fn):

        @functools.wraps(fn)
        async def async_wrapper(*args: Any, **kwargs: Any) -> Any:
            ctx = current_context()
            if ctx is None or ctx.store is None:
                with _keyed(new_id()):
                    return _json_result(await fn(*args, **kwargs), name)
            call = _make_call(ctx, ctx.store, name, loaded_as, signature, key_fn, at_most_once, args, kwargs)
            hit, value, flight = await _begin(call)
            if hit:
                return value
            assert flight is not None
            try:
                with _keyed(call.external):
                    result = await fn(*args, **kwargs)
            except BaseException as exc:
                _settle(flight, error=exc)
                raise
            return await _finish(call, flight, result)

        return async_wrapper

    @functools.wraps(fn)
    def sync_wrapper(*args: Any, **kwargs: Any) -> Any:
        ctx = current_context()
        if ctx is None or ctx.store is None:
            with _keyed(new_id()):
                return _json_result(fn(*args, **kwargs), name)
        call = _make_call(ctx, ctx.store, name, loaded_as, signature, key_fn, at_most_once, args, kwargs)
        entered = False

        async def begin() -> tuple[bool, Any, _Flight | None]:
            nonlocal entered
            entered = True
            return await _begin(call)

        try:
            hit, value, flight = anyio.from_thread.run(begin)
        except RuntimeError as exc:
            if entered:
                raise
            raise RuntimeError(
                f"sync @idempotent function {name!r} was called inside a run but not from a worker "
                f"thread, so it cannot wait for the store; make it async, or call it from a sync tool "
                f"or through anyio.to_thread.run_sync"
            ) from exc
        if hit:
            return value
        assert flight is not None
        try:
            with _keyed(call.external):
                result = fn(*args, **kwargs)
        except BaseException as exc:
            anyio.from_thread.run_sync(functools.partial(_settle, flight, error=exc))
            raise
        return anyio.from_thread.run(_finish, call, flight, result)

    return sync_wrapper


@overload
def idempotent(fn: Callable[P, R], /) -> Callable[P, R]: ...


@overload
def idempotent(
    *, key: KeyFn | None = None, at_most_once: bool = False
) -> Callable[[Callable[P, R]], Callable[P, R]]: ...


def idempotent(
    fn: Callable[P, R] | None = None, /, *, key: KeyFn | None = None, at_most_once: bool = False
) -> Callable[P, R] | Callable[[Callable[P, R]], Callable[P, R]]:
    """Cache ``fn``'s result per call in the run's store: ``@idempotent``,
    ``@idempotent(key=lambda order_id, amount: order_id)`` (once per run for that key) or
    ``@idempotent(at_most_once=True)`` (never run twice: a re-run that finds an intent and no result
    raises ``SideEffectInDoubt``). Works on sync and async functions.

    The function returns its result's JSON form (a Struct result comes back as a dict).
    """
    if key is not None and not callable(key):
        raise TypeError("@idempotent(key=...) must be a callable returning a str")
    if not isinstance(at_most_once, bool):
        raise TypeError(f"@idempotent(at_most_once=...) must be a bool, not {type(at_most_once).__name__}")

    def decorate(func: Callable[P, R]) -> Callable[P, R]:
        return cast("Callable[P, R]", _wrap(func, key, at_most_once))

    if fn is not None:
        return decorate(fn)
    return decorate
