"""The boundary proofs (``examples/durability/proofs``), run as real subprocesses on SQLite and PostgreSQL,
each under both of anyio's event loops (asyncio and trio).

Each script checks its own claims and exits 1 when one does not hold, so a proof passes here when its
script exits 0 and prints the key lines of its claims; then both backends must print the same outcome
lines (ids, pids, timings and the store's location normalised away): the seed's proofs, checked line by line.

The scripts run with this interpreter from a scratch directory, so they import the installed package
(``pip install -e .``), not the checkout. PostgreSQL follows tests/conftest.py: unreachable means skip,
or FAIL when ``REQUIRE_POSTGRES=1``.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import PgSchema

PROOFS_DIR = Path(__file__).resolve().parents[2] / "examples" / "durability" / "proofs"
SCRIPTS = {
    1: "proof_1_rows.py",
    2: "proof_2_pause_resume.py",
    3: "proof_3_crash.py",
    4: "proof_4_side_effects.py",
    5: "proof_5_run_end.py",
    7: "proof_7_claim_then_die.py",
    9: "proof_9_signals_and_time.py",
}
TIMEOUT = 150.0
ANSWER = "'Refund for order 1042 is on its way.'"
NOTE = "[no result: the agent was interrupted before this tool ran; it was not run on resume]"
RACE_OF_FIVE = (
    "outcomes: ['AlreadyResumed', 'AlreadyResumed', 'AlreadyResumed', 'AlreadyResumed', 'completed']"
)

#: Lines (or parts of lines) each proof must print: the outcomes its claims are about.
KEY_LINES: dict[int, list[str]] = {
    1: [
        f"status: completed · output: {ANSWER}",
        "  #0  turn:0                 step=llm_call   status=completed",
        "  #1  turn:0/tool:refund     step=tool_call  status=completed",
        "  #2  turn:1                 step=llm_call   status=completed",
        "  #3  run_end                step=run_end    status=completed",
        "status: paused · pending_interrupt: {'reason': 'manager_approval', 'node_id': 'turn:0/tool:refund', "
        "'agent_path': 'agent:refund-bot/tool:refund'}",
        "  #2  turn:0/tool:refund     step=hitl_pause status=interrupted",
        "pending rows: [('run-large', 'manager_approval', {'order': '1042', 'amount': 50000, 'balance': 100})]",
        "run_end rows for the paused run: []",
    ],
    2: [
        "hitl_pause interrupt_context: {'order': '1042', 'amount': 50000, 'balance': 100}",
        "pending row context:         {'order': '1042', 'amount': 50000, 'balance': 100}",
        f"status: completed · output: {ANSWER} · charges: [{{'order': '1042', 'amount': 50000, 'approver': 'alice'}}]",
        "AlreadyResumed: run 'refund-1'",
        RACE_OF_FIVE,
        "charges for refund-2: [{'order': '1042', 'amount': 50000, 'approver': 'alice'}]",
        "charges for refund-4: [{'order': '1042', 'amount': 50000, 'approver': 'alice'}]",
    ],
    3: [
        "child exit code: 2",
        "resume → status=completed model calls=1 tool ran with saved args {'order': '1042', 'amount': 20} "
        "→ charges=[{'order': '1042', 'amount': 20}]",
        "child exit code: 3",
        "resume → status=completed model calls=1 tool runs=0 charges=[{'order': '1042', 'amount': 20}]",
        "status: paused · notify ran during the first pass: []",
        "resume → status: completed · notify ran on resume: []",
        f"'{NOTE}']",
        "crash resume → status: paused · node: turn:0/tool:refund · pending: ['crash-then-pause']",
        "approve      → status: completed · charges: [{'order': '1042', 'amount': 50000, 'approver': 'alice'}]",
    ],
    4: [
        "plain function         paused → completed charge_card fired 2× → ['1042', '1042']",
        "@idempotent            paused → completed charge_card fired 1× → ['1042']",
        "@idempotent, new run   paused → completed charge_card fired 1× → ['1042']",
        "called twice outside any run → fired 2×",
        "the model was told: \"Tool 'refund' failed: IdempotencyError:",
        "paused → completed · the tool ran 2× · charge bodies ran 10× (10 distinct charges)",
    ],
    5: [
        "resume → AlreadyResumed: run 'done-1'",
        "and nothing was written: 4 rows → 4, every field equal",
        "run raised: status=failed · error='RuntimeError: provider returned 503'",
        "last row: #3  run_end                step=run_end    status=failed",
        "resume → status: completed · charges: [{'order': '1042', 'amount': 20}] · tool re-runs: 0",
        "with a Resume → completed · charges [{'order': '1042', 'amount': 50000, 'approver': 'alice'}]",
        "fork → new id: True status=completed · original rows: 4 → 4",
        "fork from the marker → CheckpointError",
        "status: paused · pending before: ['cancel-1'] · after cancel: []",
        "still stored: ['prune-paused', 'prune-failed', 'prune-crashed'] · pending: ['prune-paused']",
    ],
    9: [
        "  #2  turn:0/tool:deliver    step=wait       status=interrupted",
        "status: waiting · wake_at: None · pending: []",
        "  #3  turn:0/tool:deliver    step=signal     status=completed",
        "worker killed while the run sleeps: exit code -9",
        "  #5  turn:0/tool:deliver    step=wake       status=completed",
        "deliveries: 1",
        "status: completed · output: 'done: parcel 7 delivered to 12 Harbour Street'",
        "rows: llm_call tool_call wait signal wait wake llm_call run_end",
    ],
    7: [
        "  #3  turn:0/tool:refund     step=resume     status=completed  decision=approved:True {'approver': 'bob'}",
        "system.resume('claim-1') → completed · charges: [{'order': '1042', 'amount': 50000, 'approver': 'bob'}]",
        "outcomes: ['AlreadyResumed', 'completed'] · tool re-runs: 1",
        "while R lives, this process's system.resume('owned-1') → AlreadyResumed",
        "next system.resume('owned-1') → completed",
    ],
}

_runs: dict[tuple[int, str, str], subprocess.CompletedProcess[str]] = {}


def _run(
    proof: int, backend: str, cwd: Path, pg: PgSchema | None = None, loop: str = "asyncio"
) -> subprocess.CompletedProcess[str]:
    """Run one proof script on one backend under one event loop (once per session; the comparisons
    reuse it)."""
    key = (proof, backend, loop)
    if key not in _runs:
        argv = [sys.executable, str(PROOFS_DIR / SCRIPTS[proof]), "--store", backend, "--backend", loop]
        if pg is not None:
            argv += ["--dsn", pg.dsn, "--schema", pg.schema]
        _runs[key] = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=TIMEOUT)
    return _runs[key]


def _pg(request: pytest.FixtureRequest, backend: str) -> PgSchema | None:
    # pg_schema skips, or fails under REQUIRE_POSTGRES=1, when the server is unreachable.
    return request.getfixturevalue("pg_schema") if backend == "postgres" else None


def normalise(output: str) -> list[str]:
    """The outcome lines: without the store's location, ids, pids, timings, or the backend's name."""
    lines = []
    for line in output.splitlines():
        if line.startswith("store: "):
            continue
        line = re.sub(r"\b[0-9a-f]{32}\b", "<id>", line)
        line = re.sub(r"pid=\d+", "pid=<pid>", line)
        line = re.sub(r"\d+ ms\b", "<n> ms", line)
        line = re.sub(r"\b(sqlite|postgres)\b", "<backend>", line)
        lines.append(line)
    return lines


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A scratch working directory from which ``actors`` and ``stores`` must import (the installed package)."""
    cwd = tmp_path_factory.mktemp("proofs")
    probe = subprocess.run(
        [sys.executable, "-c", "import actors, stores; print(actors.__file__)"],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
    )
    if probe.returncode != 0:
        pytest.fail(
            f"the tether package is not importable by {sys.executable} outside the checkout; "
            f"install it with `pip install -e .`:\n{probe.stderr[-800:]}",
            pytrace=False,
        )
    return cwd


BACKENDS = ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
#: anyio's event loops: every proof holds under each.
LOOPS = ["asyncio", "trio"]


@pytest.mark.parametrize("loop", LOOPS)
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("proof", sorted(SCRIPTS))
def test_proof_holds(
    proof: int, backend: str, loop: str, installed: Path, request: pytest.FixtureRequest
) -> None:
    done = _run(proof, backend, installed, _pg(request, backend), loop)
    where = f"proof {proof} on {backend} under {loop}"
    report = f"--- stdout\n{done.stdout}\n--- stderr\n{done.stderr[-3000:]}"
    assert done.returncode == 0, f"{where} exited {done.returncode}\n{report}"
    assert f"PROOF {proof} HOLDS" in done.stdout, report
    assert "✗" not in done.stdout, report
    missing = [line for line in KEY_LINES[proof] if line not in done.stdout]
    assert not missing, f"{where} did not print {missing}\n{report}"


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("proof", sorted(SCRIPTS))
def test_loops_agree(proof: int, backend: str, installed: Path, request: pytest.FixtureRequest) -> None:
    """Under trio a proof prints the same outcome lines as under asyncio, line for line."""
    pg = _pg(request, backend)
    on_asyncio = _run(proof, backend, installed, pg, "asyncio")
    on_trio = _run(proof, backend, installed, pg, "trio")
    assert on_asyncio.returncode == 0 and on_trio.returncode == 0, (on_asyncio.stdout, on_trio.stdout)
    assert normalise(on_asyncio.stdout) == normalise(on_trio.stdout)


@pytest.mark.postgres
@pytest.mark.parametrize("proof", sorted(SCRIPTS))
def test_backends_agree(proof: int, installed: Path, request: pytest.FixtureRequest) -> None:
    """SQLite and PostgreSQL print the same outcome lines, line for line."""
    sqlite = _run(proof, "sqlite", installed)
    postgres = _run(proof, "postgres", installed, _pg(request, "postgres"))
    assert sqlite.returncode == 0 and postgres.returncode == 0, (sqlite.stdout, postgres.stdout)
    assert normalise(sqlite.stdout) == normalise(postgres.stdout)
