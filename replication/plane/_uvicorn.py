"""A uvicorn server run from either of anyio's event loops (the plane's and the inspector's).

uvicorn speaks only asyncio. Under asyncio :func:`run_server` runs the server on the caller's loop;
under any other anyio backend (trio) on an asyncio loop of its own in a worker thread, where the
app's lifespan opens its stores. Either way a cancel of the caller asks the server to exit, as a
signal would, so the app's lifespan ends and closes what it opened; the wait for that is bounded.
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

#: How long a cancelled server may take to stop before it is made to (``force_exit``: open
#: connections and running requests are no longer waited for).
SHUTDOWN_GRACE: Final = 5.0


async def run_server(server: uvicorn.Server, sockets: list[socket.socket] | None = None) -> None:
    """Serve until the server exits or this call is cancelled, on asyncio or trio alike.

    A cancel sets ``should_exit`` (uvicorn looks at it every 0.1 s), waits up to
    :data:`SHUTDOWN_GRACE` seconds for the server to stop, then sets ``force_exit`` and waits for it
    (forced, uvicorn no longer waits for connections or requests, only for the app's lifespan to
    end; a thread cannot be cancelled). The server's own error (``SystemExit`` when it cannot
    start) is raised here as it is, not in a group.
    """
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        on_asyncio = False
    else:
        on_asyncio = True
    stopped = anyio.Event()
    failed: list[BaseException] = []

    async def serve() -> None:
        try:
            if on_asyncio:
                with anyio.CancelScope(shield=True):  # stopped through should_exit, below
                    await server.serve(sockets)
            else:
                await anyio.to_thread.run_sync(lambda: asyncio.run(server.serve(sockets)))
        except (Exception, SystemExit) as error:  # raised below, by the caller's own task
            failed.append(error)
        finally:
            stopped.set()

    async with anyio.create_task_group() as group:
        group.start_soon(serve)
        try:
            await stopped.wait()
        finally:
            server.should_exit = True
            with anyio.CancelScope(shield=True), anyio.move_on_after(SHUTDOWN_GRACE):
                await stopped.wait()
            server.force_exit = True
    if failed:
        raise failed[0]
