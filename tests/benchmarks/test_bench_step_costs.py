"""The step-costs benchmark runs at its tiny size and prints its split of a run (SQLite only)."""

from __future__ import annotations

import re

from conftest import run_benchmark


def test_step_costs_benchmark_tiny() -> None:
    out = run_benchmark("step_costs", "--tiny")
    number = r"\s+\d+\.\d{3}"
    # raw: runs/s, 1.00x, wall and loop CPU; no writer timers (aiosqlite's own thread).
    assert re.search(rf"^raw\s+[\d,]+\s+1\.00x{number}{number}\s+-\s+-\s+-$", out, re.MULTILINE), out
    # store and tether: the writer's transactions and COMMIT per run, and 4 transactions per run
    # one after another (one commit per row: nothing else writes).
    for name in ("store", "tether"):
        line = re.search(
            rf"^{name}\s+[\d,]+\s+\d+\.\d\dx{number}{number}{number}{number}\s+(\d+\.\d\d)$",
            out,
            re.MULTILINE,
        )
        assert line is not None, out
        assert float(line.group(1)) == 4.0, out
    assert re.search(r"^loop CPU per run: framework \(tether - store\) -?\d+\.\d{3} ms", out, re.MULTILINE), (
        out
    )
    assert re.search(r"^a tether run, one after another: \d+\.\d{3} ms = loop CPU", out, re.MULTILINE), out
    assert out.rstrip().endswith("tether and store runs hold their 4 rows in order, raw runs 4 rows"), out
