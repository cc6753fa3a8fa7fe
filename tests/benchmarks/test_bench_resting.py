"""The resting-runs benchmark runs at its tiny size: no live actor for resting runs, a flat scan
printed, a signalled run completes."""

from __future__ import annotations

import re

from conftest import run_benchmark


def test_resting_benchmark_tiny() -> None:
    out = run_benchmark("resting", "--tiny")
    found = re.findall(r"^tether\s+(50|200)\s+[\d,]+\s+(\d+)\s+(\d+)$", out, re.MULTILINE)
    assert [n for n, *_ in found] == ["50", "200"], out
    assert all(tuple(counts) == ("0", "0") for _, *counts in found), out  # no actor, no task per resting run
    assert re.search(r"^target actors: .* 0 \(= 0\): PASS$", out, re.MULTILINE), out
    # Below the store's memory of 1,024 runs the store's cache grows: the memory target is printed.
    assert re.search(
        r"^target memory: bytes per resting run -?[\d,]+\.\d B \(<= 16 B\): (PASS|MISS)$", out, re.M
    )
    assert re.search(
        r"^ratio 5,000 / 1,000 resting runs: due_waits \d+\.\d\dx, next_wake \d+\.\d\dx$", out, re.M
    )
    assert out.rstrip().endswith("correctness: ok (a signalled run woke and completed)"), out
