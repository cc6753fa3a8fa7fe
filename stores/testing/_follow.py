"""Following a run: ``history`` pages from a ``seq``, and watches woken by another instance's rows."""

from __future__ import annotations

import time

import pytest

from .._model import Checkpoint
from .._protocol import Store
from ._base import ConformanceBase
from ._factories import make_message, make_pending, make_row, pause_row, resume_row

__all__ = ["FollowTests"]


class FollowTests(ConformanceBase):
    """``history(since=, limit=)`` and :meth:`Store.watch`."""

    async def _conversation(self, store: Store, eid: str, count: int) -> list[Checkpoint]:
        """``count`` rows of one growing conversation (a page then cuts through one message log)."""
        rows = [
            make_row(eid, seq, messages=[make_message(i) for i in range(seq + 1)]) for seq in range(count)
        ]
        return await self.write(store, rows)

    async def test_history_pages_from_a_seq(self, store: Store) -> None:
        with self.bounded():
            rows = await self._conversation(store, "run-a", 7)
            await self._conversation(store, "run-b", 2)
            assert await store.history("run-a", since=0) == rows
            assert await store.history("run-a", since=2) == rows[2:]
            assert await store.history("run-a", since=2, limit=3) == rows[2:5]
            assert await store.history("run-a", since=6, limit=5) == rows[6:]
            assert await store.history("run-a", limit=1) == rows[:1]
            assert await store.history("run-a", since=7) == []
            fresh = await self.open_store()  # no memory of the log: the page is read from the rows
            assert await fresh.history("run-a", since=3, limit=2) == rows[3:5]

    async def test_history_pages_through_a_pause_and_its_claim(self, store: Store) -> None:
        with self.bounded():
            rows = await self._conversation(store, "run-a", 2)
            pause = pause_row("run-a", 2)
            await store.append_pause(pause, make_pending("run-a", pause))
            claim = resume_row("run-a", 3, pause)
            await store.claim(claim)
            assert await store.history("run-a", since=1, limit=3) == [rows[1], pause, claim]

    @pytest.mark.parametrize(
        ("since", "limit", "error"),
        [(-1, None, ValueError), (0, 0, ValueError), ("1", None, TypeError), (0, True, TypeError)],
    )
    async def test_history_refuses_a_bad_range(
        self, store: Store, since: object, limit: object, error: type[Exception]
    ) -> None:
        with self.bounded(), pytest.raises(error, match="history"):
            await store.history("run-a", since=since, limit=limit)  # type: ignore[arg-type]

    async def test_a_watch_wakes_for_another_instances_row(self, store: Store) -> None:
        with self.bounded():
            rows = await self._conversation(store, "run-a", 1)
            other = await self.open_store()
            watch = store.watch("run-a")
            try:
                await watch.wait(0.01)  # a first wait may open what the watch listens with
                await other.append(make_row("run-a", 1))
                started = time.monotonic()
                while len(await store.history("run-a", since=1)) < 1:
                    assert time.monotonic() - started < 10, "the row never became readable"
                    await watch.wait(10.0)
                # The wait is bounded by the watch's poll interval when no notice comes.
                started = time.monotonic()
                await watch.wait(60.0)
                assert time.monotonic() - started < 10
            finally:
                watch.close()
                watch.close()  # idempotent
            assert [row.seq for row in await store.history("run-a")] == [rows[0].seq, 1]
