"""The tracing benchmark runs at its tiny size: its three configurations measured batch by batch in
one process (the traced batches verified to end 4 spans a run, every run its 4 rows) and the api's
ratio to untraced printed."""

from __future__ import annotations

import re

from conftest import run_benchmark


def test_tracing_benchmark_tiny() -> None:
    out = run_benchmark("tracing", "--tiny", timeout=120)
    assert out.startswith(
        "tracing cost, SQLite (WAL, synchronous=FULL): 8 runs of each configuration a round, in batches "
        "of 8 taking turns in one process; medians of 1 rounds"
    ), out
    cells = r"\s+[\d,]+\s+\d+\.\d\dx\s+\d+\.\d{3}\s+\d+\.\d\dx"
    for name in ("untraced", "api, no provider", "traced"):
        assert re.search(rf"^{name}{cells}{cells}$", out, re.MULTILINE), out
    assert re.search(r"^untraced(\s+[\d,]+\s+1\.00x\s+\d+\.\d{3}\s+1\.00x){2}$", out, re.MULTILINE), out
    assert re.search(
        r"^api with no provider over untraced: 1 in flight: runs/s \d+\.\d\dx, loop CPU \d+\.\d\dx; "
        r"4 in flight: runs/s \d+\.\d\dx, loop CPU \d+\.\d\dx \(target: within 3%\) (PASS|MISS)$",
        out,
        re.MULTILINE,
    ), out
