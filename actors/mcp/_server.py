""":class:`MCPServer`: what an agent connects to for MCP tools, over stdio or streamable HTTP."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager

from .._durable._sources import SourceSession, ToolSource
from ._session import open_session

__all__ = ["MCPServer"]

_NAME = re.compile(r"^[A-Za-z0-9_-]{1,32}$")


class MCPServer(ToolSource):
    """An MCP server whose tools an :class:`~actors.Agent` offers its model: put it in ``tools``.

    ``command`` launches the server as a subprocess and speaks to it over stdio (``env`` is
    merged over the SDK's safe default environment); ``url`` connects to a streamable-HTTP
    endpoint (``headers`` go with every request). Give exactly one. A run connects once per
    activation (its start, a resume, a recovery) and closes the connection when the activation
    ends. ``name`` (letters, digits, ``_``, ``-``) prefixes a tool's name, ``<name>__<tool>``,
    when another tool of the agent has the same name; a server tool named with ``/`` or ``:``
    fails a new run (``InvalidPath``). ``timeout`` (seconds) bounds one tool call: past it the
    model reads a tool error.
    """

    def __init__(
        self,
        name: str,
        *,
        command: Sequence[str] | None = None,
        url: str | None = None,
        env: Mapping[str, str] | None = None,
        headers: Mapping[str, str] | None = None,
        timeout: float | None = None,
    ) -> None:
        if not isinstance(name, str) or not _NAME.match(name):
            raise ValueError(f"MCPServer name {name!r} must be 1-32 letters, digits, '_' or '-'")
        if (command is None) == (url is None):
            raise ValueError(f"MCPServer {name!r}: give exactly one of command= (stdio) and url= (HTTP)")
        if command is not None:
            if isinstance(command, str) or not command or not all(isinstance(c, str) for c in command):
                raise TypeError(f"MCPServer {name!r}: command must be a non-empty sequence of str")
            if headers is not None:
                raise ValueError(f"MCPServer {name!r}: headers= goes with url=, not with command=")
        if url is not None:
            if not isinstance(url, str) or not url.startswith(("http://", "https://")):
                raise ValueError(f"MCPServer {name!r}: url must be an http:// or https:// URL, not {url!r}")
            if env is not None:
                raise ValueError(f"MCPServer {name!r}: env= goes with command=, not with url=")
        if timeout is not None and not timeout > 0:
            raise ValueError(f"MCPServer {name!r}: timeout must be > 0 seconds, not {timeout!r}")
        self.name = name
        self.command = tuple(command) if command is not None else None
        self.url = url
        self.env = dict(env) if env is not None else None
        self.headers = dict(headers) if headers is not None else None
        self.timeout = timeout

    def fingerprint(self) -> str:
        return "mcp"

    @asynccontextmanager
    async def connect(self) -> AsyncIterator[SourceSession]:
        """An open connection to the server (enter and leave it in one task)."""
        async with open_session(self) as session:
            yield session

    def __repr__(self) -> str:
        where = f"command={list(self.command)!r}" if self.command is not None else f"url={self.url!r}"
        return f"MCPServer({self.name!r}, {where})"
