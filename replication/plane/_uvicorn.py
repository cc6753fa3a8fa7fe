"""A uvicorn server run from either of anyio's event loops (the plane's and the inspector's).

uvicorn speaks only asyncio. Under asyncio :func:`run_server` runs the server on the caller's loop,
as ``await server.serve()`` does. Under any other anyio backend (trio) it runs the server on an
asyncio loop of its own in a worker thread, where the app's lifespan opens its stores; a cancel of
the caller asks the server to exit and waits, bounded, until it has.
"""

from __future__ import annotations

import asyncio
import socket
from typing import TYPE_CHECKING, Final

import anyio
import anyio.to_thread

if TYPE_CHECKING:
    import uvicorn

__all__ = ["run_server"]

#: How long a cancelled server on its own loop may take to stop before it is made to
#: (``force_exit``: open connections and running requests are no longer waited for).
SHUTDOWN_GRACE: Final = 5.0


async def run_server(server: uvicorn.Server, sockets: list[socket.socket] | None = None) -> None:
    """Serve until the server exits or this call is cancelled, on asyncio or trio alike."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        await _serve_on_own_loop(server, sockets)
    else:
        await server.serve(sockets)


async def _serve_on_own_loop(server: uvicorn.Server, sockets: list[socket.socket] | None) -> None:
    """The server on an asyncio loop in a worker thread. A cancel sets ``should_exit`` (uvicorn
    looks at it every 0.1 s), waits up to :data:`SHUTDOWN_GRACE` seconds for the server to stop,
    then sets ``force_exit`` and waits for the thread, which cannot be cancelled (forced, uvicorn no
    longer waits for connections or requests, only for the app's lifespan to end): the thread has
    ended when this returns. The server's own error (``SystemExit`` when it cannot start) is raised
    here as it is, not in a group."""
    stopped = anyio.Event()
    failed: list[BaseException] = []

    async def serve_in_thread() -> None:
        try:
            await anyio.to_thread.run_sync(lambda: asyncio.run(server.serve(sockets)))
        except (Exception, SystemExit) as error:  # raised below, by the caller's own task
            failed.append(error)
        finally:
            stopped.set()

    async with anyio.create_task_group() as group:
        group.start_soon(serve_in_thread)
        try:
            await stopped.wait()
        finally:
            server.should_exit = True
            with anyio.CancelScope(shield=True), anyio.move_on_after(SHUTDOWN_GRACE):
                await stopped.wait()
            server.force_exit = True
    if failed:
        raise failed[0]
