"""libpq connection strings: the keyword form (``host=... dbname=...``) read into the URI asyncpg takes.

Shared by :func:`stores.open_store` and :class:`stores.PostgresStore`, so a keyword string is read
the same way wherever it is given, and a keyword asyncpg would not read is refused by its name.
"""

from __future__ import annotations

from typing import Final
from urllib.parse import urlencode

from ._errors import InvalidStoreURL

__all__ = ["PG_KEYWORDS", "check_text", "check_value", "keyword_dsn", "unknown_keyword"]

#: The connection keywords asyncpg reads from a URI's query (and so from a keyword string).
PG_KEYWORDS: Final = frozenset(
    {
        "host",
        "port",
        "dbname",
        "database",
        "user",
        "password",
        "passfile",
        "service",
        "sslmode",
        "sslcert",
        "sslkey",
        "sslrootcert",
        "sslcrl",
        "sslpassword",
        "sslnegotiation",
        "ssl_min_protocol_version",
        "ssl_max_protocol_version",
        "target_session_attrs",
        "krbsrvname",
        "gsslib",
    }
)


def keyword_dsn(text: str, *, takes_schema: bool = True) -> tuple[str, str | None]:
    """A libpq keyword string as an equivalent URI (asyncpg reads its keywords from the query), and
    its ``schema`` keyword (``takes_schema``: whether the caller accepts one, for the refusal's text)."""
    check_text(text)
    pairs = _split_keywords(text)
    schema = pairs.pop("schema", None)
    for name, value in pairs.items():
        if name not in PG_KEYWORDS:
            raise InvalidStoreURL(unknown_keyword(name, takes_schema=takes_schema))
        check_value(name, value)
    return "postgresql://?" + urlencode(list(pairs.items())), schema


def check_text(text: str) -> None:
    """Refuse a store URL or DSN with a NUL byte (no driver or file name can carry one; the
    text is not quoted: it may hold a password)."""
    if "\x00" in text:
        raise InvalidStoreURL("the store URL contains a NUL byte, which no connection parameter can hold")


def check_value(name: str, value: str) -> None:
    """Refuse a connection parameter's value the driver would reject only when connecting with a
    plain ``ValueError``: a ``port`` that is not a number from 1 to 65535 (a comma-separated list
    of them for several hosts, an empty entry meaning the default)."""
    if name != "port":
        return
    for piece in value.split(","):
        piece = piece.strip()
        if piece and not (piece.isascii() and piece.isdigit() and 0 < int(piece) <= 65535):
            raise InvalidStoreURL(f"port {value!r} is not a port number (1 to 65535)")


def unknown_keyword(name: str, *, takes_schema: bool = True) -> str:
    """The refusal of a connection parameter asyncpg does not read (it would be ignored or misread)."""
    supported = ", ".join(sorted(PG_KEYWORDS))
    return (
        f"unsupported PostgreSQL connection parameter {name!r}: supported are "
        f"{'schema, ' if takes_schema else ''}{supported}"
    )


def _split_keywords(text: str) -> dict[str, str]:
    """``key=value`` pairs of a libpq keyword string (later keys win, as in libpq, except
    ``schema``: given twice, it is refused rather than guessed)."""
    pairs: dict[str, str] = {}
    i, n = 0, len(text)
    while True:
        while i < n and text[i].isspace():
            i += 1
        if i >= n:
            return pairs
        start = i
        while i < n and text[i] != "=" and not text[i].isspace():
            i += 1
        key = text[start:i]
        while i < n and text[i].isspace():
            i += 1
        if not key or i >= n or text[i] != "=":
            # Never quote the text: a misplaced word may be a password.
            where = f"after {key!r}" if key in PG_KEYWORDS or key == "schema" else f"at word {len(pairs) + 1}"
            raise InvalidStoreURL(f"malformed libpq keyword string: expected key=value {where}")
        i += 1
        while i < n and text[i].isspace():
            i += 1
        value: list[str] = []
        if i < n and text[i] == "'":
            i += 1
            while i < n and text[i] != "'":
                if text[i] == "\\" and i + 1 < n:
                    i += 1
                value.append(text[i])
                i += 1
            if i >= n:
                raise InvalidStoreURL(
                    f"malformed libpq keyword string: the value of {key!r} has no closing quote"
                )
            i += 1
        else:
            while i < n and not text[i].isspace():
                if text[i] == "\\" and i + 1 < n:
                    i += 1
                value.append(text[i])
                i += 1
        if key == "schema" and key in pairs:
            raise InvalidStoreURL("schema= is given twice in the store URL: keep one")
        pairs[key] = "".join(value)
