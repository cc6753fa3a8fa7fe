"""The inspector shows a run resting at a wait: its status, its wake time (a sleep) or that it
waits for its signal, and how to go on. A real ``tether inspect`` on loopback, asked with httpx."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import anyio
import httpx
import pytest
from _cli_support import TETHER

from actors import ActorSystem, Agent, sleep, tool, wait_signal
from actors.models import FunctionModel, Message, ModelReply, ToolCall
from stores import SQLiteStore

pytest.importorskip("starlette")


def _agent() -> Agent:
    @tool
    async def rest(kind: str) -> str:
        """Sleep an hour, or wait for the signal go."""
        if kind == "sleep":
            await sleep(3600)
        else:
            await wait_signal("go")
        return "rested"

    def model(messages: list[Message]) -> str | ModelReply:
        if messages[-1].role == "tool":
            return "done"
        return ModelReply(tool_calls=[ToolCall("rest", {"kind": messages[-1].content})])

    return Agent("rester", FunctionModel(model), tools=[rest])


async def _resting(path: Path) -> str:
    agent = _agent()
    async with SQLiteStore(path) as store, ActorSystem(store, runners=[agent]) as system:
        for kind in ("sleep", "wait"):
            ref = await system.spawn(agent, kind, execution_id=f"{kind}s")
            assert (await ref.result(timeout=30)).status == "waiting"
        wake_at = (await system.status("sleeps")).wake_at
        assert wake_at is not None
        return wake_at.strftime("%Y-%m-%d %H:%M:%S.") + f"{wake_at.microsecond // 1000:03d}"


def test_the_inspector_shows_a_waiting_run_and_its_wake_time(tmp_path: Path) -> None:
    db = tmp_path / "i.db"
    wake_at = anyio.run(_resting, db)
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
        with httpx.Client(base_url=match[1], timeout=30) as client:
            listed = client.get("/?token=tok", follow_redirects=True).text
            assert "sleeps" in listed and "waits" in listed
            only = client.get("/runs?status=waiting").text
            assert "status-waiting" in only and "sleeps" in only and "waits" in only
            slept = client.get("/runs/sleeps").text
            assert 'id="status">waiting<' in slept
            assert f'id="wake-at">{wake_at}<' in slept
            waited = client.get("/runs/waits").text
            assert "until its signal comes" in waited and "tether signal waits NAME" in waited
    finally:
        proc.terminate()
        proc.wait(timeout=15)
