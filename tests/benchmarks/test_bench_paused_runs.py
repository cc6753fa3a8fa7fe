"""The paused-runs benchmark runs at its tiny size: both sides measured, no live actor, runs verified."""

from __future__ import annotations

import re

from conftest import run_benchmark


def test_paused_runs_benchmark_tiny() -> None:
    out = run_benchmark("paused_runs", "--tiny")
    assert "paused runs, sqlite: spawned 250 at once, each awaited until paused; after gc.collect()" in out
    row = r"\s+(50|200)\s+[\d,]+\s+[\d,]+\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)"
    for side in ("tether", "bare store"):
        found = re.findall(rf"^{side}{row}$", out, re.MULTILINE)
        assert [paused for paused, *_ in found] == ["50", "200"], out
        # Every run paused and passivated: no actor task, registry entry or live listing is left for it.
        assert all(tuple(counts) == ("0", "0", "0") for _, *counts, _ in found), out
    assert re.search(
        r"^growth per paused run from 50 to 200: tether -?[\d,]+\.\d B traced \(-?[\d,]+ B RSS\), "
        r"bare store -?[\d,]+\.\d B traced \(-?[\d,]+ B RSS\)$",
        out,
        re.MULTILINE,
    ), out
    # Below the store's memory of 1,024 runs both sides grow: the memory target is printed, not checked.
    assert re.search(
        r"^target memory: framework bytes per paused run \(tether - bare store, traced\) -?[\d,]+\.\d B "
        r"\(<= 16 B\): (PASS|MISS)$",
        out,
        re.MULTILINE,
    ), out
    assert re.search(
        r"^target actors: live actors, registry entries and runs listed with every run paused 0, tasks "
        r"beyond the bare store's -?\d+ \(= 0\): PASS$",
        out,
        re.MULTILINE,
    ), out
    assert out.rstrip().endswith(
        "correctness: ok (every run paused with its pending interrupt and its rows, one resumed and "
        "completed with one charge)"
    )
