"""The instruction-count benchmark runs at its tiny size under callgrind (tether alone), per backend."""

from __future__ import annotations

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
