"""The tracing benchmark runs at its tiny size: its three configurations measured (the traced one
verified to end 4 spans a run, the untraced one to import no opentelemetry) and the ratio printed."""

from __future__ import annotations

import re

from conftest import run_benchmark


def test_tracing_benchmark_tiny() -> None:
    out = run_benchmark("tracing", "--tiny", timeout=120)
    assert out.startswith("tracing cost, SQLite (WAL, synchronous=FULL): 8 runs a measurement"), out
    cells = r"\s+[\d,]+\s+\d+\.\d\dx\s+\d+\.\d{3}\s+\d+\.\d\dx"
    for name in ("untraced", "api, no provider", "traced"):
        assert re.search(rf"^{name}{cells}{cells}$", out, re.MULTILINE), out
    assert re.search(
        r"^api with no provider over untraced: 1 in flight: runs/s \d+\.\d\dx, loop CPU \d+\.\d\dx; "
        r"4 in flight: runs/s \d+\.\d\dx, loop CPU \d+\.\d\dx \(target: within 3%\) (PASS|MISS)$",
        out,
        re.MULTILINE,
    ), out
