"""``tether worker`` and ``tether recover``: an approval made without the runner finished by a worker
process, a live owner refused, a frozen (SIGSTOPped) owner's lock session ended with ``--force``."""

from __future__ import annotations

import functools
import os
import signal
import subprocess
import sys
from pathlib import Path

import anyio
import pytest
from _cli_support import RUNNER, TETHER, tether, url_of, write_paused
from conftest import Backend, until_status

from actors import ActorSystem

DURABLE = Path(__file__).resolve().parents[1] / "actors" / "durable"
ROOT = Path(__file__).resolve().parents[2]


async def until_completed(backend: Backend, execution_id: str, *, timeout: float) -> None:
    """Wait until the run reads ``completed``, on the store's watch of it (see ``until_run``)."""
    async with backend.open() as store, ActorSystem(store) as system:
        await until_status(system, execution_id, "completed", timeout=timeout)


def test_a_worker_finishes_an_approval_made_without_the_runner(
    store_backend: Backend, tmp_path: Path
) -> None:
    url = url_of(store_backend)
    anyio.run(write_paused, store_backend, ["wait-w"])
    handed = tether(url, "approve", "wait-w", "--meta", "approver=night-shift")
    assert handed.code == 0 and "handed to the fleet" in handed.out, handed
    worker = subprocess.Popen(
        [str(TETHER), "worker", "--runner", RUNNER, "--poll", "0.05", "--concurrency", "2", "--store", url],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        anyio.run(functools.partial(until_completed, store_backend, "wait-w", timeout=60))
    finally:
        worker.send_signal(signal.SIGTERM)
        out, err = worker.communicate(timeout=30)
    assert worker.returncode == 0, err
    assert out.startswith("worker serving refund-bot"), out
    assert "charged a refund of 50000 cents on order 1042" in out  # approved: the tool charged
    rows = tether(url, "show", "wait-w", "--json").json()["rows"]
    assert [r["step_type"] for r in rows][-4:] == ["resume", "recover", "llm_call", "run_end"]


@pytest.mark.postgres
def test_recover_refuses_a_live_owner_and_force_ends_a_frozen_ones_lock(
    pg_schema: object, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    backend = Backend("postgres", pg_schema.dsn, pg_schema.schema)  # type: ignore[attr-defined]
    url = url_of(backend)
    (tmp_path / "hold").touch()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "tests"), str(DURABLE)])}
    owner = subprocess.Popen(
        [
            sys.executable,
            str(DURABLE / "_fleet_child.py"),
            "hold",
            *backend.child_args(),
            str(tmp_path),
            "1",
            "frozen",
        ],
        stdout=subprocess.PIPE,
        env=env,
        text=True,
    )
    try:
        assert owner.stdout is not None
        assert owner.stdout.readline().strip() == '{"holding": 1}'
        owner.send_signal(signal.SIGSTOP)  # frozen: alive, its lock held, its run going nowhere
        refused = tether(url, "recover", "frozen-0")
        assert refused.refusal()[0] == "AlreadyResumed" and "--force" in refused.err, refused
        monkeypatch.syspath_prepend(str(DURABLE))
        monkeypatch.setenv("FLEET_WORKDIR", str(tmp_path / "recovered"))
        (tmp_path / "recovered").mkdir()
        forced = tether(url, "recover", "--force", "frozen-0", "--runner", "_fleet_child:cli_agent")
        assert forced.code == 0, forced
        assert "ended the lock session" in forced.out
        assert forced.out.splitlines()[-1] == "frozen-0: completed · done: charged frozen-0", forced
    finally:
        owner.kill()
        owner.wait(timeout=30)


def test_recover_force_is_refused_on_sqlite_and_an_orphan_is_left_to_the_fleet(tmp_path: Path) -> None:
    backend = Backend("sqlite", str(tmp_path / "t.db"))
    url = url_of(backend)
    anyio.run(write_paused, backend, ["wait-s"])
    assert tether(url, "recover", "--force", "wait-s").refusal()[0] == "StoreError"
    tether(url, "approve", "wait-s")
    left = tether(url, "recover", "wait-s")
    assert left.code == 0 and left.out.strip().startswith(
        "wait-s: approved, waiting for a worker; a worker's sweep takes it"
    ), left
