"""Connecting to PostgreSQL: the pool's settings, the lock connection, and errors that never leak a password.

* JSON columns are PostgreSQL ``json`` (not ``jsonb``) with a binary pass-through codec: the server
  keeps msgspec's bytes verbatim, so ``-0.0``, ``1e308`` and key order round-trip exactly, while
  ``->``/``->>`` still work in ad-hoc queries.
* Sessions use ``plan_cache_mode=force_generic_plan`` so the write CTEs are not re-planned per call.
* The pool's reset-on-release is a no-op (asyncpg still rolls back a connection left in a
  transaction): our statements leave no session state, and session settings live in
  ``server_settings``, so a release costs no round trip.
"""

from __future__ import annotations

import getpass
import hashlib
import os
from types import TracebackType
from typing import Final
from urllib.parse import parse_qs, urlsplit

import anyio
import asyncpg

from .._dsn import keyword_dsn
from .._errors import (
    InvalidStoreURL,
    StoreUnavailable,
    connect_timed_out,
    invalid_dsn,
    login_refused,
    no_database,
    no_permission,
    unreachable,
    unusable,
)

__all__ = [
    "CONNECT_ERRORS",
    "LOST_ERRORS",
    "LOST_OR_REFUSED",
    "Lost",
    "advisory_key",
    "connect_lock_connection",
    "connect_pool",
    "describe",
    "read_dsn",
    "unavailable",
]

CONNECT_ERRORS: Final = (OSError, asyncpg.PostgresError, asyncpg.InterfaceError)
LOST_ERRORS: Final = (
    OSError,
    asyncpg.PostgresConnectionError,
    asyncpg.exceptions.OperatorInterventionError,
    asyncpg.exceptions.ConnectionDoesNotExistError,
    asyncpg.InternalClientError,  # a connection whose server went away mid-protocol
)
# A connection the pool took back or the server closed under a statement (InterfaceError) is lost too.
LOST_OR_REFUSED: Final = (*LOST_ERRORS, asyncpg.InterfaceError, asyncpg.InsufficientPrivilegeError)


class Lost:
    """A context turning a lost connection (or a missing permission) into ``StoreUnavailable``
    naming the host (:func:`unavailable`). Stateless: the store makes one and enters it around
    every statement (an append's statement, the hot path, catches :data:`LOST_OR_REFUSED` itself
    the same way, without the context's two calls)."""

    __slots__ = ("_dsn",)

    def __init__(self, dsn: str) -> None:
        self._dsn = dsn

    def __enter__(self) -> None:
        return None

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if exc is not None and isinstance(exc, LOST_OR_REFUSED):
            raise unavailable(self._dsn, exc) from None


async def _init_connection(conn: asyncpg.Connection) -> None:
    """JSON columns travel as the exact bytes msgspec wrote (binary ``json`` is plain text):
    ``bytes`` is the identity on them, a C call where a Python function would be one frame per
    JSON value (five a row). Anything but bytes is refused, by ``bytes`` or by the server's
    JSON check."""
    await conn.set_type_codec("json", encoder=bytes, decoder=bytes, schema="pg_catalog", format="binary")


async def _no_reset(conn: asyncpg.Connection) -> None:
    """Skip the pool's ``RESET ALL`` round trip: we keep no session state (asyncpg still rolls back)."""


async def connect_pool(dsn: str, *, min_size: int, max_size: int, timeout: float) -> asyncpg.Pool:
    """The store's pool (``StoreUnavailable`` naming the host when it cannot connect)."""
    try:
        with anyio.fail_after(timeout + 1):
            pool = await asyncpg.create_pool(
                dsn,
                min_size=min_size,
                max_size=max_size,
                init=_init_connection,
                reset=_no_reset,
                timeout=timeout,
                server_settings={
                    "synchronous_commit": "on",
                    "application_name": "tether",
                    "plan_cache_mode": "force_generic_plan",
                },
            )
    except CONNECT_ERRORS as exc:
        raise unavailable(dsn, exc) from None
    return pool


async def connect_lock_connection(dsn: str, *, timeout: float, keepalive_idle: int) -> asyncpg.Connection:
    """The dedicated connection holding the store's advisory locks, with TCP keepalives so that a
    vanished peer frees them within about ``2 * keepalive_idle`` seconds."""
    idle = str(keepalive_idle)
    try:
        with anyio.fail_after(timeout + 1):
            conn: asyncpg.Connection = await asyncpg.connect(
                dsn,
                timeout=timeout,
                server_settings={
                    "application_name": "tether-locks",
                    "tcp_keepalives_idle": idle,
                    "tcp_keepalives_interval": "1",
                    "tcp_keepalives_count": idle,
                    # A live owner must not lose its lock to an idle timeout.
                    "idle_session_timeout": "0",
                    "idle_in_transaction_session_timeout": "0",
                },
            )
    except CONNECT_ERRORS as exc:
        raise unavailable(dsn, exc) from None
    return conn


def advisory_key(schema: str, name: str) -> int:
    """A signed 64-bit advisory-lock key: blake2b of the name, keyed by the schema."""
    digest = hashlib.blake2b(
        name.encode("utf-8", "surrogatepass"), digest_size=8, key=schema.encode()
    ).digest()
    return int.from_bytes(digest, "big", signed=True)


def read_dsn(dsn: object) -> str:
    """The DSN asyncpg is given: a ``postgresql://`` URI as it is, a libpq keyword string as the
    equivalent URI; anything else is refused by name (``TypeError`` / :class:`InvalidStoreURL`)."""
    if not isinstance(dsn, str):
        raise TypeError(f"a PostgreSQL DSN is a str, not {type(dsn).__name__}")
    text = dsn.strip()
    if text.partition("://")[0].lower() in ("postgresql", "postgres"):
        return text
    if "://" not in text and "=" in text:
        uri, schema = keyword_dsn(text, takes_schema=False)
        if schema is not None:
            raise InvalidStoreURL(
                "schema= is not a connection parameter: pass PostgresStore(dsn, schema=...), "
                "or give the whole string to open_store()"
            )
        return uri
    raise InvalidStoreURL(
        "a PostgreSQL DSN is a postgresql:// URI or a libpq keyword string (host=... dbname=...); "
        "this one is neither"
    )


def _parts(dsn: str) -> tuple[str, str, str, str]:
    """Host, port, database and user of a DSN (never its password); libpq's defaults when absent."""
    parts = urlsplit(dsn)
    query = parse_qs(parts.query)
    host = parts.hostname or query.get("host", ["localhost"])[0]
    port = str(parts.port or query.get("port", ["5432"])[0])
    database = parts.path.lstrip("/") or query.get("dbname", query.get("database", [""]))[0]
    user = parts.username or query.get("user", [""])[0] or getpass.getuser()
    return host, port, database or user, user


def describe(dsn: str) -> str:
    """Host, port and database of a DSN, never its password."""
    try:
        host, port, database, _ = _parts(dsn)
    except ValueError:
        return "PostgreSQL (unparsable DSN)"
    return f"PostgreSQL at {host}:{port}/{database}"


def unavailable(dsn: str, exc: BaseException) -> StoreUnavailable:
    """``StoreUnavailable`` for a connection that failed or a statement the server refused, naming
    where and the cause (unreachable, login refused, no such database, a missing permission),
    never the password."""
    where = describe(dsn)
    try:
        _, _, database, user = _parts(dsn)
    except ValueError:
        database = user = "?"
    if isinstance(exc, ValueError):  # a DSN error may quote the DSN: say only what kind it was
        return invalid_dsn(where, type(exc).__name__)
    if isinstance(exc, TimeoutError):
        return connect_timed_out(where)
    if isinstance(exc, asyncpg.InvalidCatalogNameError):
        return no_database(database, where)
    if isinstance(exc, asyncpg.InvalidAuthorizationSpecificationError):  # also InvalidPasswordError
        return login_refused(where, user, _first_line(exc))
    if isinstance(exc, asyncpg.InsufficientPrivilegeError):
        return no_permission(user, where, _first_line(exc))
    if isinstance(exc, OSError):
        reason = os.strerror(exc.errno).lower() if exc.errno else str(exc) or type(exc).__name__
        return unreachable(where, reason)
    return unusable(where, f"{type(exc).__name__}: {_first_line(exc)}")


def _first_line(exc: BaseException) -> str:
    return str(exc).splitlines()[0] if str(exc) else type(exc).__name__
