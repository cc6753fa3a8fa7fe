"""The reference plane: a passive replica that stores what replicators send and serves it back.

An ASGI app (Starlette; optional extra ``plane``) storing each tenant (one per API key) in its own
tether store, answering the routes of docs/replication.md. :func:`create_app` builds it;
:func:`tenant_store_url` names a tenant's store from one base URL; :func:`serve` runs it with uvicorn
(``tether plane serve``). :func:`run_server` runs a uvicorn server from asyncio or trio alike (the
inspector's too).
"""

from ._app import MAX_BODY_BYTES, create_app
from ._serve import serve, tenant_store_url
from ._tenants import MAX_ITEM_BYTES, parse_keys
from ._uvicorn import run_server

__all__ = [
    "MAX_BODY_BYTES",
    "MAX_ITEM_BYTES",
    "create_app",
    "parse_keys",
    "run_server",
    "serve",
    "tenant_store_url",
]
