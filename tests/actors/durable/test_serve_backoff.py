"""``serve`` looks again at a store that fails with a backoff that doubles from 0.1 s up to 2 s, and
starts again from 0.1 s once the store has answered: the pauses between its looks are observed (not
slept) through the module's ``anyio.sleep``, the only sleep ``serve`` takes. Each outage is logged
once, and so is its end.
"""

from __future__ import annotations

import functools
import logging
from typing import Any

import anyio
import anyio.lowlevel
import pytest
from conftest import Backend

from actors import ActorSystem
from actors.lowlevel import sweep_module
from stores import StoreUnavailable

pytestmark = pytest.mark.anyio

LIMIT = 10.0
#: The pauses of one outage of seven failed looks: doubled each time, held at the longest.
BACKOFF = [0.1, 0.2, 0.4, 0.8, 1.6, 2.0, 2.0]


class _Pauses:
    """``anyio`` as ``_sweep`` sees it, but a sleep is recorded and returns at once; the sleep that
    makes ``hold`` of them waits for ``go`` (a fresh one each time)."""

    def __init__(self) -> None:
        self.slept: list[float] = []
        self.hold = 0
        self.held, self.go = anyio.Event(), anyio.Event()

    def __getattr__(self, name: str) -> Any:
        return getattr(anyio, name)

    async def sleep(self, delay: float) -> None:
        self.slept.append(delay)
        if len(self.slept) == self.hold:
            self.held.set()
            await self.go.wait()
        await anyio.lowlevel.checkpoint()

    async def until(self, count: int) -> None:
        """Wait until ``count`` sleeps were taken (the last is held until :meth:`release`)."""
        self.hold = count
        await self.held.wait()

    def release(self) -> None:
        self.go.set()
        self.held, self.go = anyio.Event(), anyio.Event()


def _said(caplog: pytest.LogCaptureFixture, event: str) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == "tether" and r.getMessage().startswith(f"event='{event}' ")
    ]


async def test_serve_backs_off_by_doubling_up_to_its_longest_pause_and_starts_over(
    store_backend: Backend, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="tether")
    pauses = _Pauses()
    monkeypatch.setattr(sweep_module, "anyio", pauses)
    down = True
    answered = anyio.Event()
    async with store_backend.open() as store, ActorSystem(store) as system:
        expired = store.expired

        async def failing(limit: int) -> list[str]:
            if down:
                raise StoreUnavailable("the store is down")
            answered.set()
            return await expired(limit)

        store.expired = failing  # type: ignore[method-assign]
        with anyio.fail_after(LIMIT):
            async with anyio.create_task_group() as tg:
                tg.start_soon(functools.partial(system.serve, concurrency=1, poll=0.05))
                await pauses.until(len(BACKOFF))
                assert pauses.slept == BACKOFF
                down = False  # the store answers at the next look: the backoff starts over
                pauses.release()
                await answered.wait()
                down = True
                await pauses.until(len(BACKOFF) + 2)
                assert pauses.slept == [*BACKOFF, 0.1, 0.2]
                pauses.release()
                tg.cancel_scope.cancel()
    assert len(_said(caplog, "store unusable: serve looks again")) == 2  # once an outage
    assert len(_said(caplog, "store usable again: serve goes on")) == 1
