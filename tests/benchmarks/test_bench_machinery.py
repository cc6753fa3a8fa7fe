"""The machinery benchmark runs at its tiny size: every unit's child runs, and the units a run uses
are counted for the store and for tether."""

from __future__ import annotations

import contextlib
import io
import re

import pytest
from conftest import run_benchmark


def _row(out: str, label: str) -> list[str]:
    found = re.search(rf"^{re.escape(label)}\s+(.*)$", out, re.MULTILINE)
    assert found is not None, out
    return found.group(1).split()


def test_machinery_benchmark_tiny() -> None:
    out = run_benchmark("machinery", "--tiny", timeout=300)
    assert out.startswith("a run's machinery on asyncio: instructions per unit (not counted (--tiny))"), out
    # A tether run starts its actor's task and its work's task and opens cancel scopes; the store
    # alone does neither. Both hop to the writer thread once per row, and tether turns the loop more.
    _, store_turns, tether_turns, _, _ = _row(out, "loop turn")
    assert float(tether_turns) > float(store_turns) >= 4, out
    assert _row(out, "task (beyond its 2 turns)")[1:3] == ["0.0", "2.0"], out
    _, store_scopes, tether_scopes, _, _ = _row(out, "anyio cancel scope")
    assert float(store_scopes) == 0 and float(tether_scopes) >= 2, out
    assert _row(out, "thread hop (beyond its turn)")[1:3] == ["4.0", "4.0"], out
    assert out.rstrip().endswith("every run of both contenders holds its 4 rows in order"), out


def test_machinery_report_prices_the_units_tether_adds() -> None:
    """With the units counted, each row's cost is its count beyond the store times the unit's
    instructions, and the total is their sum."""
    from benchmarks.machinery import UNITS, report

    instructions = {"empty": 3.0, "turn": 20_000.0, "task": 5_000.0, "scope": 18_000.0, "deadline": 17_000.0}
    instructions["hop"] = 40_000.0
    store = {unit: 0.0 for unit, _ in UNITS} | {"turn": 8.0, "hop": 4.0}
    tether = {"turn": 14.0, "task": 2.0, "scope": 9.0, "deadline": 2.0, "hop": 4.0}
    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        report(instructions, {"store": store, "tether": tether}, 2000, 200)
    out = buffer.getvalue()
    assert _row(out, "loop turn") == ["20,000", "8.0", "14.0", "6.0", "120,000"], out
    assert _row(out, "thread hop (beyond its turn)")[-1] == "0", out
    total = 120_000 + 2 * 5_000 + 9 * 18_000 + 2 * 17_000
    assert f"the units tether uses beyond the store: {total:,} instructions per run" in out, out


@pytest.mark.postgres
def test_machinery_benchmark_tiny_postgres(pg_schema: object) -> None:
    """On PostgreSQL a write is a round trip on the loop's own socket: no thread hop."""
    out = run_benchmark("machinery", "--tiny", "--backend", "postgres", timeout=300)
    assert "PostgreSQL (synchronous_commit=on)" in out.splitlines()[0], out
    assert _row(out, "task (beyond its 2 turns)")[1:3] == ["0.0", "2.0"], out
    assert _row(out, "thread hop (beyond its turn)")[1:3] == ["0.0", "0.0"], out
    assert out.rstrip().endswith("every run of both contenders holds its 4 rows in order"), out
