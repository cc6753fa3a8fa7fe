"""The release of a run's ownership at the end of an activation: shielded and bounded.

A stop of the run's actor while the release is under way does not cut it (the run is free for any
process afterwards), and a release that hangs does not hold the run's answer back longer than its
bound. Every test is time-bounded.
"""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from actors import ActorSystem, Agent
from actors.lowlevel import run_actor_module
from actors.models import FunctionModel, Message
from stores import SQLiteStore

pytestmark = pytest.mark.anyio

#: Bound on one test's body (seconds); a hang fails instead of stalling the suite.
LIMIT = 20.0


class SlowRelease(SQLiteStore):
    """A SQLite store whose ownership release signals its start, then takes ``delay`` seconds
    (for ever when ``delay`` is None) before it releases."""

    def __init__(self, path: str, delay: float | None) -> None:
        super().__init__(path)
        self.delay = delay
        self.releasing = anyio.Event()
        self.released = anyio.Event()

    async def unlock(self, execution_id: str) -> None:
        self.releasing.set()
        if self.delay is None:
            await anyio.sleep_forever()
        await anyio.sleep(self.delay)
        await super().unlock(execution_id)
        self.released.set()


def answering_agent() -> Agent:
    def model(messages: list[Message]) -> str:
        return f"answer: {messages[-1].content}"

    return Agent("answerer", FunctionModel(model))


async def test_a_stop_during_the_release_does_not_cut_it(sqlite_path: Path) -> None:
    store = SlowRelease(str(sqlite_path), delay=0.3)
    await store.setup()
    try:
        with anyio.fail_after(LIMIT):
            async with ActorSystem(store) as system:
                ref = await system.spawn(answering_agent(), "hi", execution_id="r1")
                await store.releasing.wait()
                actor = system.runtime.registry.lookup("r1")
                assert actor is not None
                await actor.stop(timeout=0.01)  # the actor's scope is cancelled mid-release
                assert store.released.is_set()  # ... and the release ran to its end first
                result = await ref.result()
                assert (result.status, result.output) == ("completed", "answer: hi")
            other = SQLiteStore(str(sqlite_path))
            await other.setup()
            try:
                assert await other.try_lock("r1")  # free for another owner
                await other.unlock("r1")
            finally:
                await other.close()
    finally:
        await store.close()


async def test_a_hung_release_is_cut_at_its_bound_quietly(
    sqlite_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(run_actor_module, "_UNLOCK_TIMEOUT", 0.2)
    store = SlowRelease(str(sqlite_path), delay=None)
    await store.setup()
    try:
        with anyio.fail_after(LIMIT):
            async with ActorSystem(store) as system:
                ref = await system.spawn(answering_agent(), "hi", execution_id="r2")
                started = anyio.current_time()
                result = await ref.result()  # the run's own outcome, not the release's timeout
                assert anyio.current_time() - started < 5
                assert (result.status, result.output) == ("completed", "answer: hi")
                assert store.releasing.is_set() and not store.released.is_set()
    finally:
        await store.close()
