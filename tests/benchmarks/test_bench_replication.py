"""The replication benchmark runs at its tiny size: rows reach the plane, both step rates print."""

from __future__ import annotations

import re

from conftest import run_benchmark


def test_replication_benchmark_tiny() -> None:
    out = run_benchmark("replication", "--tiny")
    assert re.search(
        r"^rows/s shipped end to end: [\d,]+ \(written locally: [\d,]+/s, \d+\.\d\dx\)$", out, re.M
    ), out
    assert re.search(
        r"^4 concurrent refunds\s+[\d,]+\.\d\s+[\d,]+\.\d\s+\d+\.\d\dx\s+>=0\.90\s+(PASS|MISS)", out, re.M
    ), out
    assert out.rstrip().endswith("every run completed; every row reached the plane as it was written"), out
