"""The step-path benchmark runs at its tiny size (tether and raw, both backends) and prints its tables."""

from __future__ import annotations

import re

import pytest
from conftest import run_benchmark

pytestmark = pytest.mark.postgres


@pytest.fixture(autouse=True)
def _postgres_reachable(pg_schema: object) -> None:
    """Skip (or fail with ``REQUIRE_POSTGRES=1``) when PostgreSQL is not there."""


def test_step_path_benchmark_tiny() -> None:
    out = run_benchmark("step_path", "--tiny", "--backend", "both", timeout=240)
    for backend in ("SQLite", "PostgreSQL"):
        assert f"step path, {backend}" in out, out
    # One line per contender and backend: runs/s and the ratio to raw, sequential and concurrent.
    rate = r"\s+[\d,]+\s+\d+\.\d\dx\s+-"
    for contender in ("raw", "tether"):
        lines = re.findall(rf"^{contender}{rate}{rate}$", out, re.MULTILINE)
        assert len(lines) == 2, out
    assert re.search(r"^raw(\s+[\d,]+\s+1\.00x\s+-){2}$", out, re.MULTILINE), out
    # The spawn row: batches of awaited spawns against batches spawned at once, with their ratio.
    spawns = re.findall(
        r"^spawns, 4 runs a batch: 4 awaited spawn calls then awaited [\d,]+ runs/s, 4 spawned at once "
        r"then awaited [\d,]+ runs/s: \d+\.\d\dx \(>= 0\.8x\): (?:PASS|MISS)$",
        out,
        re.MULTILINE,
    )
    assert len(spawns) == 2, out
    # Raw batched (the runs in flight in lockstep, one transaction per step) and tether's ratio to it.
    batched = re.findall(
        r"^raw batched, 4 runs in lockstep, one transaction per step: [\d,]+ runs/s; "
        r"tether 4 concurrent (\d+\.\d\d)x raw batched \(>= 0\.5x\): (PASS|MISS)$",
        out,
        re.MULTILINE,
    )
    assert len(batched) == 2, out
    for ratio, verdict in batched:
        assert verdict == ("PASS" if float(ratio) >= 0.5 else "MISS"), out
    assert "correctness: ok" in out, out
