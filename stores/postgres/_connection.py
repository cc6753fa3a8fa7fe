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

import hashlib
from typing import Final
from urllib.parse import parse_qs, urlsplit

import anyio
import asyncpg

from .._errors import StoreUnavailable

__all__ = [
    "CONNECT_ERRORS",
    "LOST_ERRORS",
    "advisory_key",
    "connect_lock_connection",
    "connect_pool",
    "describe",
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


async def _init_connection(conn: asyncpg.Connection) -> None:
    """JSON columns travel as the exact bytes msgspec wrote (binary ``json`` is plain text)."""
    await conn.set_type_codec(
        "json", encoder=_identity, decoder=_identity, schema="pg_catalog", format="binary"
    )


def _identity(data: bytes) -> bytes:
    return data


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


def describe(dsn: str) -> str:
    """Host, port and database of a DSN, never its password."""
    try:
        parts = urlsplit(dsn)
        query = parse_qs(parts.query)
        host = parts.hostname or query.get("host", ["localhost"])[0]
        port = parts.port or query.get("port", ["5432"])[0]
    except ValueError:
        return "PostgreSQL (unparsable DSN)"
    database = parts.path.lstrip("/") or query.get("dbname", ["(default database)"])[0]
    return f"PostgreSQL at {host}:{port}/{database}"


def unavailable(dsn: str, exc: BaseException) -> StoreUnavailable:
    """``StoreUnavailable`` for a failed connection, naming where and what, never the password."""
    if isinstance(exc, ValueError):  # a DSN error may quote the DSN: say only what kind it was
        detail = f"invalid DSN ({type(exc).__name__})"
    elif isinstance(exc, TimeoutError):
        detail = "connection timed out"
    else:
        detail = f"{type(exc).__name__}: {exc}"
    return StoreUnavailable(f"cannot reach {describe(dsn)}: {detail}")
