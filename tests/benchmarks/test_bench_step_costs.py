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


def test_step_costs_benchmark_spawns_tiny() -> None:
    """``--spawns``: the two ways of starting a batch, and each awaited spawn's commit of its own
    (more write transactions per run than spawns at once, whose first rows share one)."""
    out = run_benchmark("step_costs", "--spawns", "--tiny")
    assert out.startswith(
        "step costs of spawns, SQLite (WAL, synchronous=FULL): 8 tether runs in batches of 4"
    ), out
    number = r"\s+\d+\.\d{3}"
    for name in ("tether awaited spawns", "tether spawns at once"):
        line = rf"^{name}\s+[\d,]+\s+\d+\.\d\dx{number}{number}{number}{number}\s+\d+\.\d\d$"
        assert re.search(line, out, re.MULTILINE), out
    ratios = re.search(
        r"^awaited spawns over spawns at once: runs/s \d+\.\d\dx, loop CPU per run \d+\.\d\dx, "
        r"write transactions per run (\d+\.\d\d)x$",
        out,
        re.MULTILINE,
    )
    assert ratios is not None, out
    assert float(ratios.group(1)) > 1.0, out
    assert out.rstrip().endswith("tether runs answered with the tool once and hold their 4 rows in order"), (
        out
    )
