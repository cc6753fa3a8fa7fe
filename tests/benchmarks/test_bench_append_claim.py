"""The append and claim benchmarks run at a tiny size on both backends and print their tables."""

from __future__ import annotations

import re

import pytest
from conftest import run_benchmark

RATIO = r"\d+\.\d\dx\s+(>=\d\.\d\d|-)\s+(PASS|MISS|info)"

pytestmark = pytest.mark.postgres


@pytest.fixture(autouse=True)
def _postgres_reachable(pg_schema: object) -> None:
    """Skip (or fail with ``REQUIRE_POSTGRES=1``) when PostgreSQL is not there."""


def _bench(name: str, *args: str) -> str:
    return run_benchmark(name, "--tiny", "--rounds", "3", "--backend", "both", *args, timeout=120)


def test_append_path_benchmark() -> None:
    out = _bench("append_path")
    for backend in ("sqlite", "postgres"):
        for config in ("1 writer, 2KB", "1 writer, 20KB", "16 writers, 2KB", "16 writers, 20KB"):
            assert re.search(rf"^{backend} {config}/row\s.*{RATIO}", out, re.MULTILINE), out
    assert "row counts per run verified, messages materialise: ok" in out


def test_claim_path_benchmark() -> None:
    out = _bench("claim_path")
    for backend in ("sqlite", "postgres"):
        for k in (1, 8, 32):
            assert re.search(rf"^{backend} K={k} claims/s\s.*{RATIO}", out, re.MULTILINE), out
        assert re.search(rf"^{backend} 5 racers, 1 pause, decided/s\s.*{RATIO}", out, re.MULTILINE), out
    assert re.search(rf"^sqlite K=8 vs K=1 \(tether\)\s.*{RATIO}", out, re.MULTILINE), out
    assert "exactly-once verified on every measurement (sqlite, postgres): ok" in out
    assert re.search(r"^sqlite 8 processes, one file: .* exactly-once, no lock error: ok$", out, re.MULTILINE)
