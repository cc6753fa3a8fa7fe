"""``ActorSystem()`` without a store opens ``SQLiteStore("tether.db")`` on first durable use only."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from actors import Actor, ActorContext, ActorSystem, Agent
from actors.models import FunctionModel
from stores import SQLiteStore

pytestmark = pytest.mark.anyio


class Echo(Actor):
    async def receive(self, ctx: ActorContext, message: object) -> object:
        return message


async def test_the_default_store_opens_on_first_durable_use(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    agent = Agent("greeter", FunctionModel(lambda messages: "hello"))
    with anyio.fail_after(20):
        async with ActorSystem(runners=[agent]) as system:
            ref = await system.start(Echo())
            assert await ref.ask("ping", timeout=5) == "ping"
            assert not (tmp_path / "tether.db").exists(), "a plain actor must not open the store"
            result = await (await system.spawn(agent, "hi", execution_id="first")).result(timeout=10)
            assert result.status == "completed" and result.output == "hello"
            assert (tmp_path / "tether.db").exists()
            assert isinstance(system.store, SQLiteStore)
        # The system closed the store it opened; the rows are on disk for the next process.
        async with SQLiteStore(str(tmp_path / "tether.db")) as store:
            rows = await store.history("first")
        assert [r.node_id for r in rows] == ["turn:0", "run_end"]
