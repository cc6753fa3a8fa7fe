"""The instruction-count benchmark runs at its tiny size under callgrind (tether alone)."""

from __future__ import annotations

import re

from conftest import run_benchmark


def test_instructions_benchmark_tiny() -> None:
    out = run_benchmark("instructions", "--tiny", timeout=900)
    line = re.search(r"^tether\s+([\d,]+)\s+-$", out, re.MULTILINE)
    assert line is not None, out
    # A run of the small refund is millions of instructions (its 4 rows, a model, a tool), never 0.
    assert int(line.group(1).replace(",", "")) > 100_000, out
    assert out.rstrip().endswith("every contender's runs hold their 4 rows in order"), out
