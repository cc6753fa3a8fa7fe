"""The inspector's answers to what a browser test does not click: a decision without the run's
runner (the pause is claimed and the run handed to the fleet), unknown runs and rows, bad
parameters, a wrong token. A real ``tether inspect`` on loopback,
asked with httpx; SQLite (the pages read through the same calls on both backends, which the
browser test runs on each)."""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import anyio
import httpx
import pytest
from _cli_support import TETHER

from actors import ActorSystem
from stores import SQLiteStore
from tether.lowlevel import demo_agent

pytest.importorskip("starlette")


async def _paused(path: Path) -> None:
    agent = demo_agent()
    async with SQLiteStore(path) as store, ActorSystem(store, runners=[agent]) as system:
        ref = await system.spawn(agent, "Refund order 1042, amount 50000", execution_id="waits")
        assert (await ref.result(timeout=30)).status == "paused"


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """``tether inspect`` without a runner and with a token; (base address, database path)."""
    db = tmp_path / "i.db"
    anyio.run(_paused, db)
    proc = subprocess.Popen(
        [str(TETHER), "inspect", "--port", "0", "--token", "tok", "--store", f"sqlite:///{db}"],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        text=True,
        env={k: v for k, v in os.environ.items() if k != "TETHER_STORE"},
    )
    try:
        assert proc.stdout is not None
        match = re.match(
            r"tether inspector on (http://127\.0\.0\.1:\d+)/\?token=tok$", proc.stdout.readline()
        )
        assert match, proc.poll()
        yield match[1], db
    finally:
        proc.terminate()
        proc.wait(timeout=15)


def test_refusals_of_the_inspector(served: tuple[str, Path]) -> None:
    base, _ = served
    with httpx.Client(base_url=base, timeout=30) as client:
        assert client.get("/runs").status_code == 401
        with httpx.Client(base_url=base, cookies={"tether_inspect_token": "wrong"}) as wrong:
            assert wrong.get("/runs").status_code == 401
        entered = client.get("/?token=tok", follow_redirects=True)
        assert entered.status_code == 200 and str(entered.url) == f"{base}/runs"
        assert "waits" in entered.text

        page = client.get("/pending").text
        csrf = re.search(r'name="csrf" value="([^"]+)"', page)
        assert csrf is not None
        # The pending list's pages: positions before and after the pause.
        assert client.get("/pending?after=waits").status_code == 400
        later = client.get("/pending", params={"after": "waits", "at": "2999-01-01T00:00:00+00:00"})
        assert later.status_code == 200 and 'data-id="waits"' in later.text
        earlier = client.get("/pending", params={"after": "waits", "at": "2000-01-01T00:00:00+00:00"})
        assert earlier.status_code == 200 and 'data-id="waits"' not in earlier.text
        # Refused forms write nothing.
        assert client.post("/runs/waits/approve", data={"csrf": "forged"}).status_code == 403
        padded = {"csrf": csrf[1], "approver": "x" * 20_000}  # over the form bound: refused unread
        assert client.post("/runs/waits/approve", data=padded).status_code == 403
        assert "3 rows" in client.get("/runs/waits").text
        # No runner for 'refund-bot' here: the decision claims the pause and hands the run to the
        # fleet (a resume row with the decision; the run is approved until a worker drives it).
        handed = client.post("/runs/waits/approve", data={"csrf": csrf[1], "approver": "ops"})
        assert handed.status_code == 303 and handed.headers["location"] == "/runs/waits?done=approved-handed"
        page = client.get(handed.headers["location"]).text
        assert "approved; handed to the fleet: a worker finishes the run." in page
        assert 'id="status">approved, waiting for a worker<' in page and "4 rows" in page
        assert "To go on, a worker finishes it: <code>tether worker --runner MODULE:ATTR" in page
        assert 'data-id="waits"' not in client.get("/pending").text
        again = client.post("/runs/waits/approve", data={"csrf": csrf[1]})
        assert again.status_code == 409 and "already resumed: " in again.text
        assert client.post("/runs/waits/destroy", data={"csrf": csrf[1]}).status_code == 404

        assert client.get("/runs/nobody").status_code == 404
        assert client.get("/runs/waits/diff?a=0&b=99").status_code == 404
        assert client.get("/runs/waits/diff?a=zero&b=1").status_code == 400
        assert client.get("/runs?status=finished").status_code == 400
        assert client.get("/runs?status=paused").status_code == 200
        assert client.get("/runs?limit=0").status_code == 400
        one = client.get("/runs?limit=1").text
        assert one.count('class="run"') == 1 and 'href="/runs?limit=2"' in one
        assert 'id="more"' not in client.get("/runs?limit=5").text
