"""The mailbox benchmark runs at a tiny size and prints its ratio table."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_mailbox_benchmark_prints_ratios() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "benchmarks.mailbox", "--tiny", "--rounds", "5"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    out = result.stdout
    for metric in ("send", "ask round trip", "start"):
        assert re.search(rf"^{metric}\s.*\d+\.\d\dx", out, re.MULTILINE), out
    assert "counts verified: ok" in out
