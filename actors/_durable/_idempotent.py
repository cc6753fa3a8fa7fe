"""``@idempotent``: run a side effect once per run, even when a resume or a recovery re-runs its step.

Inside a run, the result is cached in the run's store per ``(execution_id, key)``; a later call with
the same key (a re-run tool, another agent of the same topology, another process) gets the cached
value without running the body. A fork has a new ``execution_id``, so a new cache. Outside a run
(nothing bound) the body runs every time.

The key is, by default, the sha256 of the function's module and qualified name and its arguments
as canonical JSON, bound to the signature with defaults applied (so ``f(1)``, ``f(x=1)`` and, for a
default ``x=1``, ``f()`` are one call; keyword order does not matter); arguments that are not JSON need ``key=``, a
function of the same arguments returning a ``str`` (it is prefixed with the function's name, so two
functions never share an entry).

Every call returns the result's JSON form (``stores.normalize_json``: Structs and dataclasses
become dicts, tuples lists), the first call included, so a hit and a miss give equal values, in a
run or not. A result that is not JSON raises :class:`~stores.IdempotencyError` (after the
body ran; nothing is cached).

Concurrent calls of one key in one process run the body once: the first caller leads, the others
wait for it and get its value (or its exception; a cancelled leader lets the next waiter lead).
Across processes the store's insert-if-absent ``cache_put`` makes the first stored value win, and
every caller returns the stored value.

Sync functions work in a run when called from a worker thread (a sync tool runs in one); on the
event-loop thread a sync ``@idempotent`` function cannot wait for the store and raises ``RuntimeError``.
"""

from __future__ import annotations

import functools
import hashlib
import inspect
from collections.abc import Callable
from typing import Any, ParamSpec, TypeVar, cast, overload

import anyio
import anyio.from_thread

from stores import IdempotencyError, Store, canonical_json
from stores import normalize_json as normalize

from ._context import current_context

__all__ = ["idempotent"]

P = ParamSpec("P")
R = TypeVar("R")

KeyFn = Callable[..., str]
_FlightKey = tuple[int, str, str]


class _Flight:
    """One in-process call of a key in progress; waiters wait on ``done``."""

    __slots__ = ("abandoned", "done", "error", "key", "value")

    def __init__(self, key: _FlightKey) -> None:
        self.key = key
        self.done = anyio.Event()
        self.value: Any = None
        self.error: Exception | None = None
        self.abandoned = False


_flights: dict[_FlightKey, _Flight] = {}


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
    flight.done.set()


async def _begin(store: Store, execution_id: str, key: str) -> tuple[bool, Any, _Flight | None]:
    """``(True, value, None)`` on a hit, else ``(False, None, flight)``: the caller leads and must
    finish the flight with :func:`_finish` or :func:`_settle`."""
    flight_key = (id(store), execution_id, key)
    while (other := _flights.get(flight_key)) is not None:
        await other.done.wait()
        if other.error is not None:
            raise other.error
        if not other.abandoned:
            return True, other.value, None
    flight = _Flight(flight_key)
    _flights[flight_key] = flight
    try:
        hit = await store.cache_get(execution_id, key)
    except BaseException as exc:
        _settle(flight, error=exc)
        raise
    if hit is not None:
        _settle(flight, value=hit.value)
        return True, hit.value, None
    return False, None, flight


async def _finish(store: Store, execution_id: str, key: str, flight: _Flight, result: Any, name: str) -> Any:
    """Store the leader's result (insert-if-absent) and hand the stored value to the waiters."""
    try:
        stored = await store.cache_put(execution_id, key, _json_result(result, name))
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


def _default_key(
    name: str, signature: inspect.Signature | None, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> str:
    if signature is not None:
        bound = signature.bind(*args, **kwargs)
        bound.apply_defaults()
        arguments: Any = dict(bound.arguments)
        path = "$.arguments"
    else:
        arguments, path = [list(args), kwargs], "$.arguments"
    try:
        json_arguments = normalize(arguments, path=path, error=IdempotencyError)
    except IdempotencyError as exc:
        raise IdempotencyError(
            f"@idempotent function {name!r} was called with an argument that is not JSON "
            f"({_bare(exc)}); pass @idempotent(key=...) to name its cache entry",
            path=exc.path,
        ) from None
    return hashlib.sha256(canonical_json([name, json_arguments])).hexdigest()


def _make_key(
    name: str,
    signature: inspect.Signature | None,
    key_fn: KeyFn | None,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
) -> str:
    if key_fn is None:
        return _default_key(name, signature, args, kwargs)
    user_key = key_fn(*args, **kwargs)
    if not isinstance(user_key, str):
        raise TypeError(f"@idempotent key= for {name!r} must return a str, not {type(user_key).__name__}")
    return f"{name}:{user_key}"


def _wrap(fn: Callable[..., Any], key_fn: KeyFn | None) -> Callable[..., Any]:
    name = f"{fn.__module__}.{fn.__qualname__}"
    try:
        signature: inspect.Signature | None = inspect.signature(fn)
    except (TypeError, ValueError):  # some builtins have none: key on args and kwargs as given
        signature = None

    if inspect.iscoroutinefunction(fn):

        @functools.wraps(fn)
        async def async_wrapper(*args: Any, **kwargs: Any) -> Any:
            ctx = current_context()
            if ctx is None or ctx.store is None:
                return _json_result(await fn(*args, **kwargs), name)
            store, execution_id = ctx.store, ctx.execution_id
            key = _make_key(name, signature, key_fn, args, kwargs)
            hit, value, flight = await _begin(store, execution_id, key)
            if hit:
                return value
            assert flight is not None
            try:
                result = await fn(*args, **kwargs)
            except BaseException as exc:
                _settle(flight, error=exc)
                raise
            return await _finish(store, execution_id, key, flight, result, name)

        return async_wrapper

    @functools.wraps(fn)
    def sync_wrapper(*args: Any, **kwargs: Any) -> Any:
        ctx = current_context()
        if ctx is None or ctx.store is None:
            return _json_result(fn(*args, **kwargs), name)
        store, execution_id = ctx.store, ctx.execution_id
        key = _make_key(name, signature, key_fn, args, kwargs)
        entered = False

        async def begin() -> tuple[bool, Any, _Flight | None]:
            nonlocal entered
            entered = True
            return await _begin(store, execution_id, key)

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
            result = fn(*args, **kwargs)
        except BaseException as exc:
            anyio.from_thread.run_sync(functools.partial(_settle, flight, error=exc))
            raise
        return anyio.from_thread.run(_finish, store, execution_id, key, flight, result, name)

    return sync_wrapper


@overload
def idempotent(fn: Callable[P, R], /) -> Callable[P, R]: ...


@overload
def idempotent(*, key: KeyFn | None = None) -> Callable[[Callable[P, R]], Callable[P, R]]: ...


def idempotent(
    fn: Callable[P, R] | None = None, /, *, key: KeyFn | None = None
) -> Callable[P, R] | Callable[[Callable[P, R]], Callable[P, R]]:
    """Cache ``fn``'s result per ``(execution_id, key)`` in the run's store: ``@idempotent`` or
    ``@idempotent(key=lambda order_id, amount: order_id)``. Works on sync and async functions.

    The function returns its result's JSON form (a Struct result comes back as a dict).
    """
    if key is not None and not callable(key):
        raise TypeError("@idempotent(key=...) must be a callable returning a str")

    def decorate(func: Callable[P, R]) -> Callable[P, R]:
        return cast("Callable[P, R]", _wrap(func, key))

    if fn is not None:
        return decorate(fn)
    return decorate
