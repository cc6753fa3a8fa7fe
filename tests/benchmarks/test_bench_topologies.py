"""The topologies benchmark runs at its tiny size and prints runs/s, time per step and the ratio."""

from __future__ import annotations

import re

from conftest import run_benchmark


def test_topologies_benchmark_tiny() -> None:
    out = run_benchmark("topologies", "--tiny")
    assert "topologies, sqlite: 10 runs one after another per measurement, medians of 3 rounds" in out, out
    rate = r"\s+[\d,]+\s+(\d+)\s+\d+\.\d{3}\s+\d+\.\d{3}\s+(\d+\.\d\d)x"
    agent = re.search(rf"^agent{rate}$", out, re.MULTILINE)
    supervisor = re.search(rf"^supervisor{rate}$", out, re.MULTILINE)
    assert agent is not None and supervisor is not None, out
    assert (agent.group(1), agent.group(2)) == ("4", "1.00")
    assert supervisor.group(1) == "7"
    ratio = re.search(
        r"^time per step, supervisor / agent: (\d+\.\d\d)x \(target <= 1\.50x\): (PASS|MISS)$",
        out,
        re.MULTILINE,
    )
    assert ratio is not None, out
    assert ratio.group(2) == ("PASS" if float(ratio.group(1)) <= 1.5 else "MISS")
    assert float(ratio.group(1)) == float(supervisor.group(2))
    # What one delegation costs: supervisor minus the same work in one agent (flat), per run.
    assert "delegation, sqlite: supervisor minus flat (the same work in one agent), per run, medians" in out
    cost = r"\s+(\d+)\s+(\d+\.\d\d)\s+\d+\.\d{3}\s+(\d+\.\d{3})"
    flat = re.search(rf"^flat{cost}$", out, re.MULTILINE)
    topo = re.search(rf"^supervisor{cost}$", out, re.MULTILINE)
    assert flat is not None and topo is not None, out
    assert (flat.group(1), topo.group(1)) == ("6", "7"), out
    # Sequential runs on SQLite: every row is its own write transaction.
    assert (flat.group(2), topo.group(2)) == ("6.00", "7.00"), out
    delegation = re.search(
        r"^per delegation: \+1 row, \+1\.00 commits, [+-]\d+\.\d{3} ms wall, ([+-]\d+\.\d{3}) ms loop CPU "
        r"\(a flat row: (\d+\.\d{3}) ms loop CPU\)$",
        out,
        re.MULTILINE,
    )
    assert delegation is not None, out
    target = re.search(
        r"^target delegation: at most one more row's commit plus 0\.1 ms of loop CPU \(rows <= \+1, "
        r"commits <= \+1, loop CPU <= (\d+\.\d{3}) ms\): (PASS|MISS)$",
        out,
        re.MULTILINE,
    )
    assert target is not None, out
    assert out.rstrip().endswith(
        "correctness: ok (every run answered, the tool ran once per run, the rows in order)"
    )
