"""The instruction-count benchmark runs at its tiny size under callgrind (tether alone), per backend."""

from __future__ import annotations

import contextlib
import io
import os
import re
import subprocess
import sys

import pytest
from conftest import run_benchmark


def _tether_count(out: str) -> int:
    line = re.search(r"^tether\s+([\d,]+)\s+-$", out, re.MULTILINE)
    assert line is not None, out
    assert out.rstrip().endswith("every contender's runs hold their 4 rows in order"), out
    return int(line.group(1).replace(",", ""))


def test_instructions_benchmark_tiny() -> None:
    out = run_benchmark("instructions", "--tiny", timeout=900)
    assert out.startswith("instructions per run under callgrind, SQLite (WAL, synchronous=FULL): 2 runs"), out
    # A run of the small refund is millions of instructions (its 4 rows, a model, a tool), never 0.
    assert _tether_count(out) > 100_000, out


@pytest.mark.postgres
def test_instructions_benchmark_tiny_postgres(pg_schema: object) -> None:
    """On PostgreSQL the header says that only the client process is counted."""
    out = run_benchmark("instructions", "--tiny", "--backend", "postgres", timeout=900)
    assert out.startswith(
        "instructions per run under callgrind, PostgreSQL (synchronous_commit=on), the client process "
        "only (the server is not counted): 2 runs"
    ), out
    assert _tether_count(out) > 100_000, out


def test_instructions_spawns_child_runs_its_batches() -> None:
    """``--spawns``' counted work, without valgrind (the children are what callgrind counts): each
    way of starting a batch runs its warm-up batch and its batches, and checks every run."""
    for name in ("awaited-spawns", "spawns-at-once"):
        run_benchmark("instructions", "--child", name, "--runs", "8", "--batch", "4", "--verified", "8")


def test_instructions_spawns_report() -> None:
    """The ``--spawns`` report: both counts and their ratio."""
    from benchmarks.instructions import report_spawns

    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        report_spawns({"awaited-spawns": 2_100_000.0, "spawns-at-once": 2_000_000.0}, 128, 64)
    out = buffer.getvalue()
    assert out.startswith(
        "instructions per tether run under callgrind, SQLite (WAL, synchronous=FULL): 128 runs in batches of 64"
    ), out
    assert re.search(r"^awaited-spawns\s+2,100,000$", out, re.MULTILINE), out
    assert "awaited spawns over spawns at once: 1.05x the instructions per run" in out, out


def test_instructions_against_report() -> None:
    """``--against``'s report: each mode's two counts and ratio, both halves, and the target's verdict."""
    from benchmarks.instructions import report_against

    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        report_against(
            {"one after another": (1_200_000.0, 2_400_000.0), "64 at a time": (1_000_000.0, 2_000_000.0)},
            "6f0b2a1",
        )
    out = buffer.getvalue()
    assert out.startswith(
        "instructions per tether run under callgrind, SQLite (WAL, synchronous=FULL): this tree against 6f0b2a1"
    ), out
    assert re.search(r"^one after another\s+1,200,000\s+2,400,000\s+0\.50x$", out, re.MULTILINE), out
    assert re.search(r"^both halves\s+1,100,000\s+2,200,000\s+0\.50x$", out, re.MULTILINE), out
    assert out.rstrip().endswith("at most 0.6x the instructions per run of 6f0b2a1: PASS"), out


def test_instructions_against_runs_the_other_trees_child() -> None:
    """``--against``'s other tree is the project at that revision, and its own child runs there, on
    its own code (without valgrind here: the child's work is what callgrind counts)."""
    from benchmarks.instructions import other_tree

    with other_tree("HEAD") as tree:
        where = subprocess.run(
            [sys.executable, "-c", "import actors; print(actors.__file__)"],
            cwd=tree,
            env={**os.environ, "PYTHONPATH": str(tree)},
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert where.stdout.strip() == str(tree / "actors" / "__init__.py"), where.stdout + where.stderr
        child = subprocess.run(
            [
                sys.executable,
                "-m",
                "benchmarks.instructions",
                "--child",
                "tether",
                "--runs",
                "2",
                "--verified",
                "2",
            ],
            cwd=tree,
            env={**os.environ, "PYTHONPATH": str(tree)},
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert child.returncode == 0, child.stdout + child.stderr


def test_instructions_against_an_unknown_revision_names_it() -> None:
    from benchmarks.instructions import other_tree

    with pytest.raises(SystemExit, match="--against no-such-revision: git archive failed"):
        with other_tree("no-such-revision"):
            pass


def test_instructions_against_cpu_tiny() -> None:
    """``--against REV --cpu``: process CPU of both trees' children, without valgrind."""
    out = run_benchmark("instructions", "--against", "HEAD", "--cpu", "--tiny", timeout=600)
    assert out.startswith("process CPU per tether run, medians of 1 rounds, SQLite"), out
    assert re.search(r"^both halves\s+-?[\d,]+\.\d{3}\s+-?[\d,]+\.\d{3}\s+-?[\d.]+x$", out, re.MULTILINE), out
    assert "the process CPU (user + system, ms) per run of HEAD:" in out, out


def test_instructions_against_cpu_report() -> None:
    """The ``--cpu`` report prints milliseconds from seconds, and the same ratios and verdict."""
    from benchmarks.instructions import report_against

    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        report_against(
            {"one after another": (0.0012, 0.0015), "64 at a time": (0.0008, 0.0010)}, "6f0b2a1", rounds=5
        )
    out = buffer.getvalue()
    assert out.startswith(
        "process CPU per tether run, medians of 5 rounds, SQLite (WAL, synchronous=FULL)"
    ), out
    assert re.search(r"^one after another\s+1\.200\s+1\.500\s+0\.80x$", out, re.MULTILINE), out
    assert out.rstrip().endswith(
        "at most 0.6x the process CPU (user + system, ms) per run of 6f0b2a1: MISS"
    ), out
