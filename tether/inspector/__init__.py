"""The inspector: a small web page over a store, for operators (``tether inspect``; extra ``inspect``).

Layout: ``_app`` holds the pages (runs with status filters, one run's timeline with its agent paths
as a tree and each row's replication state, a diff of any two rows, the pending approvals with
Approve / Reject) as Starlette routes rendering the Jinja2 templates of ``templates/``; ``_guard``
the protections (the ``Host`` header, the optional access token, the CSRF token of every form).
:func:`serve` binds 127.0.0.1 only and runs the app on uvicorn (under asyncio or trio). No JavaScript.
"""

from __future__ import annotations

import socket
from collections.abc import Callable, Sequence

import anyio
import uvicorn

from replication.plane import run_server
from stores import open_store

from .._commands._common import Runner
from .._store_url import require_existing
from ._app import build_app
from ._guard import Guard, new_csrf_token

__all__ = ["create_app", "serve"]

#: The only address the inspector listens on.
HOST = "127.0.0.1"


def create_app(url: str, *, port: int, runners: Sequence[Runner] = (), token: str | None = None) -> Guard:
    """The inspector's ASGI app for the store at ``url``, answering only as ``127.0.0.1:port`` or
    ``localhost:port``; ``runners`` let its decisions drive runs; ``token`` is required when given."""
    app = build_app(url, runners=runners, csrf=new_csrf_token())
    return Guard(app, hosts=[f"{HOST}:{port}", f"localhost:{port}"], token=token)


async def serve(
    url: str,
    *,
    port: int = 8765,
    runners: Sequence[Runner] = (),
    token: str | None = None,
    ready: Callable[[str], None] = print,
) -> None:
    """Serve the inspector on ``127.0.0.1:port`` (0: any free port) until cancelled; ``ready`` gets
    the address to open once the server has started (with ``?token=`` when a token is set).
    A SQLite store whose file is not there is refused first (``StoreUnavailable``), creating nothing."""
    require_existing(open_store(url))
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((HOST, port))
    bound = sock.getsockname()[1]
    app = create_app(url, port=bound, runners=runners, token=token)
    config = uvicorn.Config(app, log_level="warning", lifespan="on")
    server = uvicorn.Server(config)
    address = f"http://{HOST}:{bound}/" + (f"?token={token}" if token else "")
    async with anyio.create_task_group() as group:
        group.start_soon(run_server, server, [sock])
        while not server.started:
            if server.should_exit:
                return
            await anyio.sleep(0.02)
        ready(f"tether inspector on {address}")
