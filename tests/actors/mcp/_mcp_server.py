"""A small MCP server for the tests, written with the ``mcp`` SDK and run over stdio.

Every tool call appends a line ``<tool> <argument>`` to the file named by ``MCP_TEST_LOG`` (the
tests count calls by it), and the server's pid as ``pid <n>`` when it starts.

- ``lookup(key)``: read-only; returns ``value of <key>``.
- ``delete_record(key)``: destructive and not idempotent; logs ``entered``, then waits while the
  file ``MCP_TEST_LOG + ".hold"`` exists (at most 60 s) and returns ``deleted <key>``.
- ``reindex(key)``: destructive but idempotent.
- ``ask_name()``: elicits a name from the user (a form with one field ``name``) and returns
  ``<action>: <name>``.
- ``echo(text)``: plain; a name the agent's own tool has too in the name-clash test.

- ``whoami()``: the ``x-caller`` header of the HTTP request that called it (``-`` over stdio).

``MCP_TEST_HIDE`` (comma-separated tool names) leaves those tools out. ``python _mcp_server.py``
serves over stdio; ``python _mcp_server.py http PORT`` over streamable HTTP on 127.0.0.1:PORT
(path ``/mcp``).
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Annotated

from mcp.server.mcpserver import Context, Elicit, ElicitationResult, MCPServer, Resolve
from mcp.types import ToolAnnotations
from pydantic import BaseModel

LOG = Path(os.environ["MCP_TEST_LOG"])
app = MCPServer("test-records", log_level="WARNING")


def log(line: str) -> None:
    with LOG.open("a") as out:
        out.write(line + "\n")
        out.flush()
        os.fsync(out.fileno())


@app.tool(annotations=ToolAnnotations(readOnlyHint=True))
def lookup(key: str) -> str:
    """Look a record up by its key.

    Args:
        key: the record's key
    """
    log(f"lookup {key}")
    return f"value of {key}"


@app.tool(annotations=ToolAnnotations(destructiveHint=True, idempotentHint=False))
def delete_record(key: str) -> str:
    """Delete a record for good."""
    log(f"delete_record {key}")
    hold = Path(f"{LOG}.hold")
    deadline = time.monotonic() + 60
    while hold.exists() and time.monotonic() < deadline:
        time.sleep(0.01)
    return f"deleted {key}"


@app.tool(annotations=ToolAnnotations(destructiveHint=True, idempotentHint=True))
def reindex(key: str) -> str:
    """Rebuild a record's index (safe to repeat)."""
    log(f"reindex {key}")
    return f"reindexed {key}"


class Name(BaseModel):
    name: str


def _ask() -> Elicit[Name]:
    return Elicit("What name goes on the record?", Name)


@app.tool()
def ask_name(answer: Annotated[ElicitationResult[Name], Resolve(_ask)]) -> str:
    """Ask the user which name goes on the record."""
    data = getattr(answer, "data", None)
    log(f"ask_name {answer.action}")
    return f"{answer.action}: {data.name if data is not None else '-'}"


@app.tool()
def echo(text: str) -> str:
    """Say the text back."""
    log(f"echo {text}")
    return f"server says {text}"


@app.tool(annotations=ToolAnnotations(readOnlyHint=True))
def whoami(ctx: Context) -> str:
    """Who calls (the x-caller header)."""
    headers = ctx.headers or {}
    return headers.get("x-caller", "-")


for hidden in filter(None, os.environ.get("MCP_TEST_HIDE", "").split(",")):
    app.remove_tool(hidden)

if __name__ == "__main__":
    log(f"pid {os.getpid()}")
    if sys.argv[1:2] == ["http"]:
        app.run("streamable-http", host="127.0.0.1", port=int(sys.argv[2]))
    else:
        app.run()
