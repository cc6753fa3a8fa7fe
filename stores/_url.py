""":func:`open_store`: a store from a URL, as the CLI's ``--store`` and ``TETHER_STORE`` give it.

Accepted, and nothing else (anything else raises :class:`InvalidStoreURL` naming what was wrong,
a NUL byte, a ``port`` that is not a number or a repeated ``schema`` included; nothing is ever
guessed):

* ``sqlite:///relative/path.db`` and ``sqlite:////absolute/path.db`` (no host, no query);
* ``postgresql://user@host:port/db?schema=name`` (also ``postgres://``): ``schema`` is the store's
  schema (default ``tether``); the other query parameters must be ones asyncpg reads from a URI
  (``sslmode``, ``host``, ``passfile``...);
* a libpq keyword string, ``host=127.0.0.1 port=5432 dbname=test user=postgres`` (values may be
  single-quoted, with ``\\'`` and ``\\\\`` escapes), with the same keywords, ``schema`` included.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final
from urllib.parse import parse_qsl, unquote, urlencode, urlsplit, urlunsplit

from ._dsn import PG_KEYWORDS, check_text, check_value, keyword_dsn, unknown_keyword
from ._errors import InvalidStoreURL

if TYPE_CHECKING:
    from .postgres import PostgresStore
    from .sqlite import SQLiteStore

__all__ = ["open_store"]

_SQLITE: Final = "sqlite://"
_POSTGRES_SCHEMES: Final = frozenset({"postgresql", "postgres"})
_FORMS: Final = (
    "use sqlite:///relative/path.db, sqlite:////absolute/path.db, "
    "postgresql://user@host:port/db?schema=name, or a libpq keyword string (host=... dbname=...)"
)


def open_store(url: str, **options: Any) -> SQLiteStore | PostgresStore:
    """The store ``url`` names, constructed but not yet set up (call ``await store.setup()``, or use
    it as ``async with``; its first operation sets it up too). ``options`` go to the store's
    constructor (``max_row_bytes=...``, ``synchronous=...`` for SQLite, ``max_size=...`` for PostgreSQL).
    """
    if not isinstance(url, str) or not url.strip():
        raise InvalidStoreURL(f"a store URL must be a non-empty string, not {url!r}: {_FORMS}")
    text = url.strip()
    check_text(text)
    scheme, sep, _ = text.partition("://")
    if sep:
        scheme = scheme.lower()
        if scheme == "sqlite":
            return _sqlite(text, options)
        if scheme in _POSTGRES_SCHEMES:
            dsn, schema = _postgres_uri(text)
            return _postgres(dsn, schema, options)
        raise InvalidStoreURL(f"unknown store URL scheme {scheme!r}: {_FORMS}")
    if "=" in text:
        dsn, schema = keyword_dsn(text)
        return _postgres(dsn, schema, options)
    raise InvalidStoreURL(f"{text!r} is not a store URL (it has no scheme): {_FORMS}")


def _sqlite(url: str, options: dict[str, Any]) -> SQLiteStore:
    from .sqlite import SQLiteStore

    rest = url[len(_SQLITE) :]
    if not rest.startswith("/"):
        raise InvalidStoreURL(
            f"a sqlite URL names a file, not a host ({url!r}): use sqlite:///relative/path.db "
            "or sqlite:////absolute/path.db"
        )
    path, query_sep, query = rest[1:].partition("?")
    if query_sep:
        names = sorted({name for name, _ in parse_qsl(query, keep_blank_values=True)}) or [query]
        raise InvalidStoreURL(
            f"a sqlite URL takes no query parameters (got {', '.join(names)}); pass options to "
            "open_store(url, synchronous=..., busy_timeout=...) instead"
        )
    if not path or path.endswith("/"):
        raise InvalidStoreURL(f"the sqlite URL {url!r} names no file: use sqlite:///relative/path.db")
    return SQLiteStore(path, **options)


def _postgres(dsn: str, schema: str | None, options: dict[str, Any]) -> PostgresStore:
    from .postgres import PostgresStore

    if schema is not None:
        if "schema" in options:
            raise InvalidStoreURL("the schema is given twice: in the URL and as schema=...; keep one")
        options = {**options, "schema": schema}
    return PostgresStore(dsn, **options)


def _postgres_uri(url: str) -> tuple[str, str | None]:
    """The DSN asyncpg gets (the URI without ``schema``) and the schema, if given."""
    check_text(unquote(url))  # %00 is a NUL once the driver decodes it
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018  (parses the port: ValueError when it is not a number)
    except ValueError:
        raise InvalidStoreURL("the PostgreSQL URL has an invalid host or port") from None
    schema: str | None = None
    kept: list[tuple[str, str]] = []
    for name, value in parse_qsl(parts.query, keep_blank_values=True):
        if name == "schema":
            if schema is not None:
                raise InvalidStoreURL("schema= is given twice in the store URL: keep one")
            schema = value
        elif name in PG_KEYWORDS:
            check_value(name, value)
            kept.append((name, value))
        else:
            raise InvalidStoreURL(unknown_keyword(name))
    dsn = urlunsplit((parts.scheme, parts.netloc, parts.path, urlencode(kept), parts.fragment))
    return dsn, schema
