"""MCP tools for agents: :class:`MCPServer`, a Model Context Protocol server as a source of tools.

Needs the extra ``mcp`` (``pip install 'tether[mcp]'``, the official ``mcp`` SDK). Layout:
``_server`` holds :class:`MCPServer` (what to connect to, over stdio or streamable HTTP) and
``_session`` one open connection: its tool list, its calls (a destructive tool at most once, an
elicitation as a pause). See ``docs/mcp.md``.
"""

from stores import fixup_module_metadata as _fixup_module_metadata

from ._server import MCPServer

__all__ = ["MCPServer"]

_fixup_module_metadata(__name__, globals())
del _fixup_module_metadata
