"""``tether signal`` and ``tether schedules`` against both backends, and a waiting run's listing."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import anyio
from _cli_support import tether, url_of
from conftest import Backend

from actors import ActorSystem, Agent, tool, wait_signal
from actors.models import FunctionModel, Message, ModelReply, ToolCall


def _waiter() -> Agent:
    @tool
    async def hold() -> str:
        """Wait for go."""
        got = await wait_signal("go")
        return str(got)

    def model(messages: list[Message]) -> str | ModelReply:
        if messages[-1].role == "tool":
            return "done"
        return ModelReply(tool_calls=[ToolCall("hold", {})])

    return Agent("holder", FunctionModel(model), tools=[hold])


async def _waiting_run(backend: Backend) -> str:
    agent = _waiter()
    async with backend.open() as store, ActorSystem(store, runners=[agent]) as system:
        ref = await system.spawn(agent, "hold", execution_id="held-1")
        assert (await ref.result()).status == "waiting"
        await system.schedule("nightly", agent, "hold", cron="0 3 * * *")
        await system.schedule("often", agent, "hold", every=timedelta(minutes=5))
        return ref.execution_id


async def _inbox(backend: Backend, execution_id: str) -> list[tuple[str, object]]:
    async with backend.open() as store:
        return [(s.name, s.payload) for s in await store.signals(execution_id)]


def test_signal_and_schedules_from_the_shell(store_backend: Backend, tmp_path: Path) -> None:
    eid = anyio.run(_waiting_run, store_backend)
    url = url_of(store_backend)

    listed = tether(url, "runs", "--status", "waiting")
    assert listed.code == 0, listed
    assert listed.out.splitlines()[1].split()[:2] == [eid, "waiting"]
    assert "resting until its signal comes" in listed.out
    assert tether(url, "show", eid, "--json").json()["summary"]["status"] == "waiting"

    sent = tether(url, "signal", eid, "go", "--payload", '{"n": 1}')
    assert sent.code == 0, sent
    assert eid in sent.out
    assert tether(url, "signal", eid, "message", "--payload", '"steer"', "--json").json()["sent"] is True
    assert anyio.run(_inbox, store_backend, eid) == [("go", {"n": 1}), ("message", "steer")]

    assert tether(url, "signal", "no-such-run", "go").refusal()[0] == "RunNotFound"
    assert tether(url, "signal", eid, "go", "--payload", "{not json").code == 2
    assert anyio.run(_inbox, store_backend, eid) == [("go", {"n": 1}), ("message", "steer")]

    table = tether(url, "schedules")
    assert table.code == 0, table
    rows = {line.split()[0]: line for line in table.out.splitlines()[1:]}
    assert set(rows) == {"nightly", "often"} and "0 3 * * *" in rows["nightly"]
    found = tether(url, "schedules", "--json").json()
    assert [(s["name"], s["runner"], s["cron"]) for s in found] == [
        ("nightly", "holder", "0 3 * * *"),
        ("often", "holder", None),
    ]
    assert found[0]["next_at"].endswith(("03:00:00Z", "03:00:00+00:00"))
