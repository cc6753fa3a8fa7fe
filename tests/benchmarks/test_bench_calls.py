"""The calls profile runs at its tiny size and accounts for every call it counts."""

from __future__ import annotations

import re

from conftest import ROOT, run_benchmark

from benchmarks.calls import group_of


def test_calls_benchmark_tiny() -> None:
    out = run_benchmark("calls", "--tiny", timeout=300)
    groups = dict(re.findall(r"^(\S.*?)\s{2,}([\d,.]+)\s+[\d.]+%", out, re.MULTILINE))
    total = float(groups.pop("all").replace(",", ""))
    # A run of the small refund makes hundreds of Python calls, most of them in the framework and its
    # libraries; the groups add up to the total.
    assert total > 200, out
    assert float(groups["actors/_durable"].replace(",", "")) > 10, out
    assert float(groups["stores"].replace(",", "")) > 10, out
    assert abs(sum(float(v.replace(",", "")) for v in groups.values()) - total) < 1, out
    iterations = re.search(r"^event-loop iterations per run: ([\d.]+)$", out, re.MULTILINE)
    assert iterations is not None and float(iterations.group(1)) >= 1, out
    assert out.rstrip().endswith("holds its 4 rows in order"), out


def test_functions_are_grouped_by_where_they_live() -> None:
    assert group_of(str(ROOT / "actors" / "_core" / "_cell.py")) == "actors/_core"
    assert group_of(str(ROOT / "actors" / "_durable" / "_engine.py")) == "actors/_durable"
    assert group_of(str(ROOT / "stores" / "sqlite" / "_writer.py")) == "stores"
    # An installed package by its name, even in a venv inside the project's folder.
    assert group_of(str(ROOT / ".venv/lib/python3.11/site-packages/anyio/_backends/_asyncio.py")) == "anyio"
    assert group_of("/usr/lib/python3.11/asyncio/base_events.py") == "asyncio"
    assert group_of("~") == "builtins and C methods"
    assert group_of("/somewhere/else.py") == "other Python"
