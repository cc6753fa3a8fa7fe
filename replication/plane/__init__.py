"""The reference plane: a passive replica that stores what replicators send and serves it back.

An ASGI app (Starlette; optional extra ``plane``) storing each tenant (one per API key) in its own
tether store, answering the routes of docs/replication.md. :func:`create_app` builds it;
:func:`tenant_store_url` names a tenant's store from one base URL; :func:`serve` runs it with uvicorn
(``tether plane serve``).
"""

from ._app import MAX_BODY_BYTES, create_app
from ._serve import serve, tenant_store_url
from ._tenants import MAX_ITEM_BYTES, parse_keys

__all__ = ["MAX_BODY_BYTES", "MAX_ITEM_BYTES", "create_app", "parse_keys", "serve", "tenant_store_url"]
