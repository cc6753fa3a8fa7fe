"""The mailbox benchmark runs at a tiny size and prints its ratio table."""

from __future__ import annotations

import re

from conftest import run_benchmark


def test_mailbox_benchmark_prints_ratios() -> None:
    out = run_benchmark("mailbox", "--tiny", "--rounds", "5")
    for metric in ("send", "ask round trip", "start"):
        assert re.search(rf"^{metric}\s.*\d+\.\d\dx", out, re.MULTILINE), out
    assert "counts verified: ok" in out
