"""``tether worker --queue``: a bad spec is refused before anything runs, naming what is wrong."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

DURABLE = Path(__file__).resolve().parents[1] / "actors" / "durable"


@pytest.mark.parametrize(
    ("spec", "named"),
    [
        ("llm:burst=3", "unknown limit 'burst'"),
        ("llm:rate=10", "rate must be COUNT/WINDOW"),
        ("llm:concurrency=0", "concurrency must be a whole number of at least 1"),
        ("llm", "expected NAME:limit=value"),
    ],
)
def test_a_bad_queue_spec_is_a_usage_error_naming_it(tmp_path: Path, spec: str, named: str) -> None:
    store = f"sqlite:///{tmp_path / 'tether.db'}"
    ran = subprocess.run(
        [
            sys.executable,
            "-m",
            "tether",
            "worker",
            "--runner",
            "_queue_child:cli_agent",
            "--queue",
            spec,
            "--store",
            store,
        ],
        capture_output=True,
        text=True,
        timeout=60,
        env={"PYTHONPATH": str(DURABLE), "QUEUE_WORKDIR": str(tmp_path), "PATH": ""},
        cwd=Path(__file__).resolve().parents[2],
    )
    assert ran.returncode == 2, ran
    assert f"argument --queue: queue spec {spec!r}" in ran.stderr and named in ran.stderr, ran.stderr
    assert not (tmp_path / "tether.db").exists()  # refused before the store was opened
