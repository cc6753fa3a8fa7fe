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
    assert out.rstrip().endswith(
        "correctness: ok (every run answered, the tool ran once per run, the rows in order)"
    )
