"""The MCP example (examples/mcp/) runs as written, under asyncio and trio, in a real process."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
EXAMPLE = ROOT / "examples" / "mcp" / "notes_agent.py"


@pytest.mark.parametrize("loop", ["asyncio", "trio"])
def test_the_mcp_example_runs(loop: str, tmp_path: Path) -> None:
    argv = [sys.executable, str(EXAMPLE), "--dir", str(tmp_path), "--backend", loop]
    done = subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.splitlines() == [
        "paused: elicitation: Delete the note 'old milk' for good?",
        "completed: Tidied(deleted=['old milk'], kept=['ideas'])",
        "steps: turn:0, turn:0/tool:list_notes, turn:1, turn:1/tool:read_note, turn:2, "
        "turn:2/tool:delete_note, turn:2/tool:delete_note, turn:2/tool:delete_note, turn:3, run_end",
        "server calls: list_notes, read_note old milk, delete_note old milk",
        "notes left: ideas",
    ]
