"""What the MCP tests share: the test server's command and its call log."""

from __future__ import annotations

import sys
from pathlib import Path

from actors.mcp import MCPServer

SERVER = Path(__file__).with_name("_mcp_server.py")


def records(log: Path, name: str = "records", *, hide: str = "") -> MCPServer:
    """The test server (``_mcp_server.py``) over stdio, logging its calls to ``log``, without the
    tools named in ``hide`` (comma-separated)."""
    env = {"MCP_TEST_LOG": str(log), "MCP_TEST_HIDE": hide}
    return MCPServer(name, command=[sys.executable, str(SERVER)], env=env)


def calls(log: Path) -> list[str]:
    """The tool calls the server logged, in order (its ``pid`` lines left out)."""
    if not log.exists():
        return []
    return [line for line in log.read_text().splitlines() if not line.startswith("pid ")]
