"""The fleet benchmark runs at its tiny size: throughput, SIGKILL-to-recovery and finding work, and
the take rate of a limited queue (``--queues``)."""

from __future__ import annotations

import json
import re

from conftest import run_benchmark


def test_fleet_benchmark_tiny() -> None:
    out = run_benchmark("fleet", "--tiny", timeout=120)
    assert out.startswith("fleet, sqlite: 12 small refunds per throughput measurement"), out
    assert re.search(r"^  spawned in one process\s+\d+ runs/s$", out, re.MULTILINE), out
    assert re.search(r"^  enqueued, 2 worker processes\s+\d+ runs/s$", out, re.MULTILINE), out
    for count in ("100", "1,000"):
        assert re.search(
            rf"^\s+{count} resting runs: idle sweep\s+[\d.]+ ms, spawn to result\s+[\d.]+ ms$",
            out,
            re.MULTILINE,
        ), out
    for what in ("sweep", "spawn"):
        found = re.search(
            rf"^  {what} at 1,000 / at 100: (\d+\.\d\d)x \(target <= 1\.30x\): (PASS|MISS)$",
            out,
            re.MULTILINE,
        )
        assert found is not None, out
        assert found.group(2) == ("PASS" if float(found.group(1)) <= 1.3 else "MISS")
    assert "correctness: ok (every run completed once, with its tool's answer)" in out
    takeovers = json.loads(out.strip().splitlines()[-1])["takeover_seconds"]
    assert takeovers and all(0 <= t < 5 for t in takeovers), out


def test_fleet_queues_benchmark_tiny() -> None:
    out = run_benchmark("fleet", "--queues", "--tiny", timeout=120)
    assert out.startswith("fleet --queues, sqlite: 12 takes per queue per round, 2 rounds (medians)"), out
    rows = dict(re.findall(r"^  (free|capped)\s+\d+\s+(\d+\.\d\d)$", out, re.MULTILINE))
    assert set(rows) == {"free", "capped"}, out
    found = re.search(
        r"^  capped / free: (\d+\.\d\d)x the take rate; ([+-]\d+\.\d\d) statements per take "
        r"\(target <= \+1\): (PASS|MISS)$",
        out,
        re.MULTILINE,
    )
    assert found is not None, out
    more = float(found.group(2))
    assert more == float(rows["capped"]) - float(rows["free"])
    assert found.group(3) == "PASS" and more <= 1.0, out
