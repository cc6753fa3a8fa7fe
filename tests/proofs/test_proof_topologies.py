"""Proof 8 (a nested topology paused three levels down, resumed from another process) and the
runnable topology example, as real subprocesses on SQLite and PostgreSQL, under asyncio and trio."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from conftest import PgSchema

ROOT = Path(__file__).resolve().parents[2]
PROOF = ROOT / "examples" / "durability" / "proofs" / "proof_8_topologies.py"
EXAMPLE = ROOT / "examples" / "topologies" / "support_desk.py"
TIMEOUT = 150.0
DEEP = "supervisor:ops/worker:support/agent:billing/tool:refund"


@pytest.mark.parametrize("loop", ["asyncio", "trio"])
@pytest.mark.parametrize("backend", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def test_proof_8_holds(backend: str, loop: str, request: pytest.FixtureRequest, tmp_path: Path) -> None:
    argv = [sys.executable, str(PROOF), "--db", str(tmp_path / "proof8.db"), "--backend", loop]
    if backend == "postgres":
        pg: PgSchema = request.getfixturevalue("pg_schema")
        argv += ["--dsn", pg.dsn, "--schema", pg.schema]
    done = subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True, timeout=TIMEOUT, check=False)
    out = done.stdout
    assert done.returncode == 0, out + done.stderr
    assert "✗" not in out, out
    assert f"pending rows: [('{DEEP}', 'turn:0/tool:refund', 'approve refund')]" in out, out
    assert "a second resume: AlreadyResumed" in out, out
    for line in ("charge           1", "model boss       2", "tool refund      2", "model triage     1"):
        assert f"  {line}\n" in out, out
    assert out.rstrip().endswith("proof 8: every claim held"), out


@pytest.mark.parametrize("loop", ["asyncio", "trio"])
def test_the_topology_example_runs(loop: str) -> None:
    done = subprocess.run(
        [sys.executable, str(EXAMPLE), "--backend", loop],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == f"paused: approve refund at {DEEP}"
    assert (
        lines[1] == "completed: Done: Refund for order 1042: charged 20 EUR back on 1042 (approved by alice)"
    )
    assert "supervisor:ops/worker:support" in done.stdout and "handoff:0" in done.stdout
