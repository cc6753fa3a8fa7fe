"""Pause, claim, cancel and the pending list (rules 2, 4 and 11 of docs/durability.md)."""

from __future__ import annotations

from datetime import timedelta

import anyio
import anyio.lowlevel
import pytest

from .._errors import (
    AlreadyResumed,
    RunNotFound,
    WriteConflict,
)
from .._model import (
    FAILED,
    INTERRUPTED,
    RECOVER,
    REENTRY_SEQ,
    RESUME,
    Checkpoint,
    PendingInterrupt,
    utcnow,
)
from .._protocol import Store
from ._base import ConformanceBase
from ._factories import (
    make_pending,
    make_row,
    pause_row,
    resume_row,
    run_end_row,
)

__all__ = ["PauseTests"]


class PauseTests(ConformanceBase):
    """Pause, claim, cancel and the pending list (rules 2, 4 and 11 of docs/durability.md)."""

    # -- pause, claim, cancel --------------------------------------------------------------------

    async def test_pause_writes_the_row_and_the_pending_row(self, store: Store) -> None:
        with self.bounded():
            rows, pending = await self.paused_run(store, "run-a")
            assert await store.history("run-a") == rows
            latest = await store.latest("run-a")
            assert latest is not None and latest.status == INTERRUPTED
            assert latest.interrupt_reason == "approve"
            assert latest.interrupt_context == {"amount": 120, "items": ["a", "b"]}
            assert await store.pending("run-a") == [pending]
            assert await store.pending() == [pending]

    async def test_second_pause_of_a_run_conflicts_and_writes_nothing(self, store: Store) -> None:
        with self.bounded():
            rows, pending = await self.paused_run(store, "run-a")
            again = pause_row("run-a", 3, turn=1)
            with pytest.raises(WriteConflict):
                await store.append_pause(again, make_pending("run-a", again, context={"second": True}))
            assert await store.history("run-a") == rows
            assert await store.pending("run-a") == [pending]

    async def test_pause_at_a_taken_seq_writes_no_pending_row(self, store: Store) -> None:
        with self.bounded():
            rows = await self.crashed_run(store, "run-a")
            pause = pause_row("run-a", 2)
            with pytest.raises(WriteConflict):
                await store.append_pause(pause, make_pending("run-a", pause))
            assert await store.history("run-a") == rows
            assert await store.pending("run-a") == []

    async def test_claim_first_wins_and_returns_the_pending_row(self, store: Store) -> None:
        with self.bounded():
            rows, pending = await self.paused_run(store, "run-a")
            claim = resume_row("run-a", 3, rows[-1])
            got = await store.claim(claim)
            assert got == pending
            assert got.context == {"amount": 120, "items": ["a", "b"]}
            assert await store.pending("run-a") == []
            assert await store.history("run-a") == [*rows, claim]
            with pytest.raises(AlreadyResumed):
                await store.claim(resume_row("run-a", 4, rows[-1], by="bob"))
            with pytest.raises(AlreadyResumed):
                await store.claim(resume_row("run-a", 3, rows[-1], by="carol"))
            assert await store.history("run-a") == [*rows, claim]

    async def test_claim_of_an_unknown_run_raises_run_not_found(self, store: Store) -> None:
        with self.bounded():
            with pytest.raises(RunNotFound, match="ghost-run"):
                await store.claim(make_row("ghost-run", 1, step_type=RESUME))
            assert await store.history("ghost-run") == []

    async def test_claim_of_a_run_that_never_paused_is_refused(self, store: Store) -> None:
        with self.bounded():
            rows = await self.crashed_run(store, "run-a")
            with pytest.raises(AlreadyResumed):
                await store.claim(make_row("run-a", 3, step_type=RESUME))
            assert await store.history("run-a") == rows

    async def test_claim_at_a_taken_seq_keeps_the_pause_claimable(self, store: Store) -> None:
        with self.bounded():
            rows, pending = await self.paused_run(store, "run-a")
            squatter = make_row("run-a", 3, rows[-1].node_id, step_type=RECOVER, node_input={REENTRY_SEQ: 2})
            await store.append(squatter)
            with pytest.raises(WriteConflict):
                await store.claim(resume_row("run-a", 3, rows[-1]))
            assert await store.pending("run-a") == [pending]
            claim = resume_row("run-a", 4, rows[-1])
            assert await store.claim(claim) == pending
            assert await store.history("run-a") == [*rows, squatter, claim]

    async def test_a_valid_claim_racing_a_failing_one_in_one_process_wins(self, store: Store) -> None:
        with self.bounded():
            rows, pending = await self.paused_run(store, "run-a")
            squatter = make_row("run-a", 3, rows[-1].node_id, step_type=RECOVER, node_input={REENTRY_SEQ: 2})
            await store.append(squatter)
            outcomes: dict[str, object] = {}

            async def attempt(name: str, seq: int) -> None:
                try:
                    outcomes[name] = await store.claim(resume_row("run-a", seq, rows[-1], by=name))
                except AlreadyResumed as exc:  # WriteConflict is one
                    outcomes[name] = type(exc)

            async with anyio.create_task_group() as group:
                group.start_soon(attempt, "stale", 3)  # its seq is taken: it fails in the database
                await anyio.lowlevel.checkpoint()  # it is in flight now
                group.start_soon(attempt, "valid", 4)
            assert outcomes == {"stale": WriteConflict, "valid": pending}
            assert await store.pending("run-a") == []
            assert (await store.history("run-a"))[-1].seq == 4

    async def test_cancel_of_a_paused_run_deletes_its_pending_row(self, store: Store) -> None:
        with self.bounded():
            rows, _ = await self.paused_run(store, "run-a")
            _, other_pending = await self.paused_run(store, "run-b")
            marker = run_end_row("run-a", 3, FAILED, reason="cancelled")
            await store.append(marker)
            assert await store.pending("run-a") == []
            assert await store.pending() == [other_pending]
            assert await store.history("run-a") == [*rows, marker]
            entry = await store.reentry("run-a")
            assert entry.step == rows[-1] and entry.newest == marker and entry.resume is None
            with pytest.raises(AlreadyResumed):
                await store.claim(resume_row("run-a", 4, rows[-1]))
            assert await store.history("run-a") == [*rows, marker]

    # -- pending ---------------------------------------------------------------------------------

    async def test_pending_lists_newest_first_all_or_per_run(self, store: Store) -> None:
        with self.bounded():
            base = utcnow() - timedelta(minutes=10)
            expected: dict[str, PendingInterrupt] = {}
            for i, minutes in enumerate([3, 1, 5, 2]):
                eid = f"run-{i}"
                await self.write(store, [make_row(eid, 0)])
                pause = pause_row(eid, 1)
                pending = make_pending(
                    eid, pause, context={"i": i}, created_at=base + timedelta(minutes=minutes)
                )
                await store.append_pause(pause, pending)
                expected[eid] = pending
            assert await store.pending() == sorted(
                expected.values(), key=lambda p: p.created_at, reverse=True
            )
            assert await store.pending("run-2") == [expected["run-2"]]
            assert await store.pending("nobody") == []

    async def test_pending_pages_cover_every_pause_once_in_order(self, store: Store) -> None:
        with self.bounded():
            base = utcnow() - timedelta(minutes=10)
            made: list[PendingInterrupt] = []
            for i in range(7):
                eid = f"run-{i}"
                await self.write(store, [make_row(eid, 0)])
                pause = pause_row(eid, 1)
                # runs 2..4 pause at one instant: the execution_id orders them
                at = base + timedelta(seconds=3 if 2 <= i <= 4 else i)
                pending = make_pending(eid, pause, context={"i": i}, created_at=at)
                await store.append_pause(pause, pending)
                made.append(pending)
            newest_first = sorted(made, key=lambda p: (p.created_at, p.execution_id), reverse=True)
            assert await store.pending() == newest_first
            pages: list[list[PendingInterrupt]] = []
            after: PendingInterrupt | None = None
            while page := await store.pending(limit=3, after=after):
                pages.append(page)
                after = page[-1]
            assert [len(p) for p in pages] == [3, 3, 1]
            assert [p for page in pages for p in page] == newest_first
            assert await store.pending(limit=2) == newest_first[:2]
            assert await store.pending(limit=100) == newest_first

    async def test_pending_page_after_a_run_resumed_meanwhile(self, store: Store) -> None:
        with self.bounded():
            base = utcnow() - timedelta(minutes=10)
            made: list[PendingInterrupt] = []
            rows_of: dict[str, list[Checkpoint]] = {}
            for i in range(4):
                eid = f"run-{i}"
                first = make_row(eid, 0)
                await self.write(store, [first])
                pause = pause_row(eid, 1)
                pending = make_pending(eid, pause, created_at=base + timedelta(seconds=i))
                await store.append_pause(pause, pending)
                made.append(pending)
                rows_of[eid] = [first, pause]
            first_page = await store.pending(limit=2)
            assert first_page == [made[3], made[2]]
            await store.claim(resume_row("run-2", 2, rows_of["run-2"][-1]))  # the cursor's run goes
            assert await store.pending(limit=2, after=first_page[-1]) == [made[1], made[0]]
            assert await store.pending("run-1", after=first_page[-1]) == [made[1]]
            assert await store.pending("run-3", after=first_page[-1]) == []

    async def test_pending_refuses_a_bad_page(self, store: Store) -> None:
        with self.bounded():
            for bad in (0, -1):
                with pytest.raises(ValueError, match="at least 1"):
                    await store.pending(limit=bad)
            with pytest.raises(TypeError, match="str"):
                await store.pending(limit="3")  # type: ignore[arg-type]
            with pytest.raises(TypeError, match="bool"):
                await store.pending(limit=True)
            with pytest.raises(TypeError, match=r"PendingInterrupt.*str"):
                await store.pending(after="run-1")  # type: ignore[arg-type]
