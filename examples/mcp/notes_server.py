"""A small MCP server, written with the official ``mcp`` SDK: notes kept in a JSON file.

Tools: ``list_notes`` and ``read_note`` are read-only; ``delete_note`` is destructive (and not
idempotent) and asks the user to confirm first, through an MCP elicitation. Every call is logged,
one line each, to ``NOTES_LOG`` when it is set. Run by the agent of ``notes_agent.py`` over stdio:
``python examples/mcp/notes_server.py`` with ``NOTES_FILE`` naming the notes file.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Annotated

from mcp.server.mcpserver import Elicit, ElicitationResult, MCPServer, Resolve
from mcp.types import ToolAnnotations
from pydantic import BaseModel

NOTES = Path(os.environ.get("NOTES_FILE", "notes.json"))
app = MCPServer("notes", log_level="WARNING")


def _log(line: str) -> None:
    if "NOTES_LOG" in os.environ:
        with open(os.environ["NOTES_LOG"], "a") as out:
            out.write(line + "\n")


def _notes() -> dict[str, str]:
    return json.loads(NOTES.read_text()) if NOTES.exists() else {}


@app.tool(annotations=ToolAnnotations(readOnlyHint=True))
def list_notes() -> list[str]:
    """The titles of all notes."""
    _log("list_notes")
    return sorted(_notes())


@app.tool(annotations=ToolAnnotations(readOnlyHint=True))
def read_note(title: str) -> str:
    """Read one note.

    Args:
        title: the note's title
    """
    _log(f"read_note {title}")
    return _notes().get(title, f"no note titled {title!r}")


class Confirm(BaseModel):
    confirm: bool


def _confirm(title: str) -> Elicit[Confirm]:
    return Elicit(f"Delete the note {title!r} for good?", Confirm)


@app.tool(annotations=ToolAnnotations(destructiveHint=True, idempotentHint=False))
def delete_note(title: str, answer: Annotated[ElicitationResult[Confirm], Resolve(_confirm)]) -> str:
    """Delete a note for good, once the user confirms."""
    data = getattr(answer, "data", None)
    if data is None or not data.confirm:
        return f"kept {title!r}: the user did not confirm"
    notes = _notes()
    notes.pop(title, None)
    NOTES.write_text(json.dumps(notes))
    _log(f"delete_note {title}")
    return f"deleted {title!r}"


if __name__ == "__main__":
    app.run()
