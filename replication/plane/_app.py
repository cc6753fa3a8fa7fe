"""The reference plane as an ASGI app (Starlette): the ingest door, the reads, the refusals.

Refusals, each with a JSON body ``{"error": ...}`` naming the problem: a missing or unknown
``X-API-Key`` 401; a body over :data:`MAX_BODY_BYTES` 413; a body that is not JSON or not the
ingest shape 422. Items and inbox entries are checked one by one (:meth:`Tenant.ingest`): an
oversized, malformed or changed one is rejected in the 2xx's ``rejections`` while the others are
stored.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
from typing import Any, Final

import anyio
import msgspec
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from stores import Store

from ._tenants import Tenant

__all__ = ["MAX_BODY_BYTES", "create_app"]

#: The largest ingest body the plane reads.
MAX_BODY_BYTES: Final = 16 * 1024 * 1024


class _TooLarge(Exception):
    pass


def _json(body: Any, status: int = 200) -> Response:
    return Response(msgspec.json.encode(body), status_code=status, media_type="application/json")


def _error(status: int, message: str) -> Response:
    return _json({"error": message}, status)


def create_app(keys: Mapping[str, str], open_store: Callable[[str], Store]) -> Starlette:
    """The plane: ``keys`` maps each API key to its tenant; ``open_store(tenant)`` gives a tenant's
    store (opened on first use, closed when the app stops)."""
    if not keys:
        raise ValueError("the plane needs at least one API key")
    tenants: dict[str, Tenant] = {}
    lock = anyio.Lock()

    async def tenant_of(request: Request) -> Tenant | Response:
        key = request.headers.get("x-api-key")
        if not key:
            return _error(401, "missing X-API-Key header")
        name = keys.get(key)
        if name is None:
            return _error(401, "unknown API key")
        tenant = tenants.get(name)
        if tenant is None:
            async with lock:
                tenant = tenants.get(name)
                if tenant is None:
                    store = open_store(name)
                    await store.setup()
                    tenant = tenants[name] = Tenant(name, store)
        return tenant

    def as_tenant(
        handler: Callable[[Request, Tenant], Awaitable[Response]],
    ) -> Callable[[Request], Awaitable[Response]]:
        """A route of ``handler``, called with the request's tenant (refused with 401 without one)."""

        async def route(request: Request) -> Response:
            tenant = await tenant_of(request)
            return tenant if isinstance(tenant, Response) else await handler(request, tenant)

        return route

    async def read_body(request: Request) -> bytes:
        declared = request.headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > MAX_BODY_BYTES:
            raise _TooLarge
        chunks: list[bytes] = []
        size = 0
        async for chunk in request.stream():
            size += len(chunk)
            if size > MAX_BODY_BYTES:
                raise _TooLarge
            chunks.append(chunk)
        return b"".join(chunks)

    @as_tenant
    async def ingest(request: Request, tenant: Tenant) -> Response:
        try:
            raw = await read_body(request)
        except _TooLarge:
            return _error(413, f"the body is over the limit of {MAX_BODY_BYTES} bytes")
        try:
            body = msgspec.json.decode(raw)
        except msgspec.DecodeError as exc:
            return _error(422, f"the body is not JSON: {exc}")
        if not isinstance(body, dict) or not isinstance(body.get("checkpoints"), list):
            return _error(
                422, 'the body is not {"checkpoints": [item, ...], "cache": [entry, ...], "signals": [...]}'
            )
        cache = body.get("cache", [])
        if not isinstance(cache, list):
            return _error(422, '"cache" must be a list of cache entries')
        signals = body.get("signals", [])
        if not isinstance(signals, list):
            return _error(422, '"signals" must be a list of inbox entries')
        return _json(await tenant.ingest(body["checkpoints"], cache, signals))

    @as_tenant
    async def latest(request: Request, tenant: Tenant) -> Response:
        item = await tenant.latest(request.path_params["execution_id"])
        return _error(404, "no checkpoint of this run") if item is None else _json(item)

    @as_tenant
    async def run(request: Request, tenant: Tenant) -> Response:
        found = await tenant.run(request.path_params["execution_id"])
        return _error(404, "no checkpoint of this run") if found is None else _json(found)

    @as_tenant
    async def runs(request: Request, tenant: Tenant) -> Response:
        status = request.query_params.get("status")
        limit = request.query_params.get("limit", "100")
        if not limit.isdigit() or not 1 <= int(limit) <= 1000:
            return _error(422, "limit must be an integer from 1 to 1000")
        try:
            return _json({"runs": await tenant.runs(status=status, limit=int(limit))})
        except ValueError as exc:
            return _error(422, str(exc))

    async def healthz(request: Request) -> Response:
        return _json({"ok": True})

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        try:
            yield
        finally:
            with anyio.CancelScope(shield=True), anyio.move_on_after(10.0):
                for tenant in list(tenants.values()):
                    await tenant.store.close()

    return Starlette(
        routes=[
            Route("/public/v1/checkpoints/ingest", ingest, methods=["POST"]),
            Route("/public/v1/checkpoints/{execution_id:path}/latest", latest, methods=["GET"]),
            Route("/public/v1/runs/{execution_id:path}", run, methods=["GET"]),
            Route("/public/v1/runs", runs, methods=["GET"]),
            Route("/healthz", healthz, methods=["GET"]),
        ],
        lifespan=lifespan,
    )
