"""``tether demo``: the console script runs the refund example end to end on a fresh SQLite file.

A small refund completes in the demo's process; a large one pauses in a child process that exits, and
the demo's process resumes it: one charge per refund, and the printed timelines follow the row grammar.
Without ``--store`` (and without ``$TETHER_STORE``) the demo uses ``tether.db`` in the working directory.
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

import anyio
import pytest
from conftest import PgSchema

from stores import PostgresStore

pytestmark = pytest.mark.anyio

TETHER = Path(sys.executable).parent / "tether"
LIMIT = 90.0

SMALL_TIMELINE = [
    ("turn:0", "llm_call", "completed", "agent:refund-bot"),
    ("turn:0/tool:refund", "tool_call", "completed", "agent:refund-bot/tool:refund"),
    ("turn:1", "llm_call", "completed", "agent:refund-bot"),
    ("run_end", "run_end", "completed", "agent:refund-bot"),
]
LARGE_TIMELINE = [
    ("turn:0", "llm_call", "completed", "agent:refund-bot"),
    ("turn:0/tool:refund", "tool_call", "completed", "agent:refund-bot/tool:refund"),
    ("turn:0/tool:refund", "hitl_pause", "interrupted", "agent:refund-bot/tool:refund"),
    ("turn:0/tool:refund", "resume", "completed", "agent:refund-bot/tool:refund"),
    ("turn:1", "llm_call", "completed", "agent:refund-bot"),
    ("run_end", "run_end", "completed", "agent:refund-bot"),
]
ROW = re.compile(r"^\s+#(\d+) (\S+)\s+(\S+)\s+(\S+)\s+(\S+)$")
CHARGE = re.compile(r"^\s+\[pid (\d+)\] charged a refund of (\d+) cents on order 1042$")


def timelines(lines: list[str]) -> list[list[tuple[str, str, str, str]]]:
    """The printed timelines: runs of consecutive ``#seq node step status path`` lines."""
    found: list[list[tuple[str, str, str, str]]] = []
    previous = -1
    for line in lines:
        match = ROW.match(line)
        if match is None:
            previous = -1
            continue
        seq = int(match[1])
        if seq == 0 or previous == -1:
            found.append([])
        assert seq == previous + 1 or seq == 0, line
        previous = seq
        found[-1].append((match[2], match[3], match[4], match[5]))
    return found


async def demo(url: str, cwd: Path) -> str:
    """``tether demo --store URL``'s output, after checking it exits 0."""
    assert TETHER.exists(), f"the console script is not installed at {TETHER}"
    with anyio.fail_after(LIMIT):
        done = await anyio.run_process([str(TETHER), "demo", "--store", url], cwd=cwd, check=False)
    out, err = done.stdout.decode(), done.stderr.decode()
    assert done.returncode == 0, f"stdout:\n{out}\nstderr:\n{err}"
    return out


async def test_tether_demo(tmp_path: Path) -> None:
    db = tmp_path / "d.db"
    out = await demo(f"sqlite:///{db}", tmp_path)
    assert db.exists()
    check_demo_output(out)
    assert out.rstrip().endswith(f"rows are in {db}"), out


@pytest.mark.postgres
async def test_tether_demo_on_postgresql(pg_schema: PgSchema, tmp_path: Path) -> None:
    url = f"{pg_schema.dsn}?schema={pg_schema.schema}"
    out = await demo(url, tmp_path)
    check_demo_output(out)
    assert out.rstrip().endswith(f"rows are in {url}"), out
    assert not [p async for p in anyio.Path(tmp_path).iterdir()], "the PostgreSQL demo wrote a local file"
    async with PostgresStore(pg_schema.dsn, schema=pg_schema.schema) as store:
        assert await store.pending() == []  # the large refund was approved: nothing is left pending
        large = re.search(r"a large refund \((large-\w+)\)", out)
        assert large is not None, out
        assert [row.step_type for row in await store.history(large[1])][-2:] == ["llm_call", "run_end"]


def check_demo_output(out: str) -> None:
    """One charge per refund, both timelines by the row grammar, the pause and the approval."""
    lines = out.splitlines()

    charges = [(int(m[1]), int(m[2])) for line in lines if (m := CHARGE.match(line))]
    assert [amount for _, amount in charges] == [20, 50000], out  # exactly one charge per refund

    assert timelines(lines) == [SMALL_TIMELINE, LARGE_TIMELINE], out

    child = re.search(r"child pid (\d+): status=paused, exiting", out)
    resumer = re.search(r"this process \(pid (\d+)\) approves it", out)
    assert child is not None and resumer is not None, out
    child_pid, resumer_pid = int(child[1]), int(resumer[1])
    assert child_pid != resumer_pid
    # Both charges happened in the resuming process; the child paused before charging.
    assert {pid for pid, _ in charges} == {resumer_pid}
    assert re.search(
        r"pending in the store: \[\('large-\w+', 'manager_approval', \{'order': '1042', 'amount': 50000\}\)\]",
        out,
    )
    assert out.count("status: completed") == 2


async def test_python_m_tether_demo_uses_tether_db_in_the_working_directory(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "TETHER_STORE"}
    with anyio.fail_after(LIMIT):
        done = await anyio.run_process(
            [sys.executable, "-m", "tether", "demo"], cwd=tmp_path, env=env, check=False
        )
    out = done.stdout.decode()
    assert done.returncode == 0, out + done.stderr.decode()
    assert (tmp_path / "tether.db").exists()
    assert timelines(out.splitlines()) == [SMALL_TIMELINE, LARGE_TIMELINE], out
    assert out.rstrip().endswith(f"rows are in {tmp_path / 'tether.db'}"), out
