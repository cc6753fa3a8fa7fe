"""The instruction-count benchmark runs at its tiny size under callgrind (tether alone), per backend."""

from __future__ import annotations

import contextlib
import io
import re

import pytest
from conftest import run_benchmark


def _tether_count(out: str) -> int:
    line = re.search(r"^tether\s+([\d,]+)\s+-$", out, re.MULTILINE)
    assert line is not None, out
    assert out.rstrip().endswith("every contender's runs hold their 4 rows in order"), out
    return int(line.group(1).replace(",", ""))


def test_instructions_benchmark_tiny() -> None:
    out = run_benchmark("instructions", "--tiny", timeout=900)
    assert out.startswith("instructions per run under callgrind, SQLite (WAL, synchronous=FULL): 2 runs"), out
    # A run of the small refund is millions of instructions (its 4 rows, a model, a tool), never 0.
    assert _tether_count(out) > 100_000, out


@pytest.mark.postgres
def test_instructions_benchmark_tiny_postgres(pg_schema: object) -> None:
    """On PostgreSQL the header says that only the client process is counted."""
    out = run_benchmark("instructions", "--tiny", "--backend", "postgres", timeout=900)
    assert out.startswith(
        "instructions per run under callgrind, PostgreSQL (synchronous_commit=on), the client process "
        "only (the server is not counted): 2 runs"
    ), out
    assert _tether_count(out) > 100_000, out


def test_instructions_spawns_child_runs_its_batches() -> None:
    """``--spawns``' counted work, without valgrind (the children are what callgrind counts): each
    way of starting a batch runs its warm-up batch and its batches, and checks every run."""
    for name in ("awaited-spawns", "spawns-at-once"):
        run_benchmark("instructions", "--child", name, "--runs", "8", "--batch", "4", "--verified", "8")


def test_instructions_spawns_report() -> None:
    """The ``--spawns`` report: both counts and their ratio."""
    from benchmarks.instructions import report_spawns

    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        report_spawns({"awaited-spawns": 2_100_000.0, "spawns-at-once": 2_000_000.0}, 128, 64)
    out = buffer.getvalue()
    assert out.startswith(
        "instructions per tether run under callgrind, SQLite (WAL, synchronous=FULL): 128 runs in batches of 64"
    ), out
    assert re.search(r"^awaited-spawns\s+2,100,000$", out, re.MULTILINE), out
    assert "awaited spawns over spawns at once: 1.05x the instructions per run" in out, out
