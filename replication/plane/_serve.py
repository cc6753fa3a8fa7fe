"""Running the plane: one base store URL made into one store per tenant, served by uvicorn."""

from __future__ import annotations

import functools
from collections.abc import Mapping
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from stores import InvalidStoreURL, Store, open_store

from ._app import create_app
from ._uvicorn import run_server

__all__ = ["serve", "tenant_store_url"]


def tenant_store_url(base: str, tenant: str) -> str:
    """The store URL of ``tenant``: for SQLite the file ``<stem>.<tenant>.db`` beside the base file,
    for PostgreSQL the schema ``<schema>_<tenant>`` (base schema default ``tether_plane``)."""
    parts = urlsplit(base)
    if parts.scheme == "sqlite":
        head, sep, rest = base.partition("?")
        stem, dot, ext = head.rpartition(".")
        path = f"{stem}.{tenant}.{ext}" if dot and "/" not in ext else f"{head}.{tenant}"
        return path + sep + rest
    if parts.scheme in ("postgresql", "postgres"):
        query = dict(parse_qsl(parts.query))
        query["schema"] = f"{query.get('schema', 'tether_plane')}_{tenant}"
        return urlunsplit((parts.scheme, parts.netloc, parts.path, urlencode(query), parts.fragment))
    raise InvalidStoreURL(f"the plane stores into sqlite:// or postgresql:// URLs, not {base!r}")


async def serve(
    store_url: str, keys: Mapping[str, str], *, host: str = "127.0.0.1", port: int = 8787
) -> None:
    """Serve the plane until cancelled (uvicorn, under asyncio or trio; ``keys`` maps each API key to
    its tenant)."""
    import uvicorn  # the optional extra ``plane``

    tenant_store_url(store_url, "t")  # refuse a bad URL before listening

    def tenant_store(tenant: str) -> Store:
        return open_store(tenant_store_url(store_url, tenant))

    # A factory: the app (and the lock it keeps) is made on the loop that serves it.
    app = functools.partial(create_app, keys, tenant_store)
    config = uvicorn.Config(app, factory=True, host=host, port=port, log_level="warning")
    await run_server(uvicorn.Server(config))
