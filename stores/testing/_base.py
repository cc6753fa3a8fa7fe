"""The conformance suite's hooks, fixtures and helpers; the topic modules hold the tests."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from typing import Any, ClassVar

import anyio
import pytest

from .._model import (
    FAILED,
    Checkpoint,
    PendingInterrupt,
    ReEntry,
)
from .._protocol import OwnedStore, ReplicatedStore, Store
from ._factories import make_pending, make_row, pause_row, run_end_row, tool_row

__all__ = ["ConformanceBase"]


class ConformanceBase:
    """What every topic of the suite uses: the backend hooks, the ``store`` fixture, run builders."""

    pytestmark: ClassVar[list[pytest.MarkDecorator]] = [pytest.mark.anyio]

    #: Seconds any one test may take before it fails.
    timeout: ClassVar[float] = 30.0
    #: Whether the store must implement :class:`ReplicatedStore` (else the outbox tests skip).
    require_outbox: ClassVar[bool] = False
    #: Whether the store must implement :class:`OwnedStore` (else the fleet's tests skip).
    require_ownership: ClassVar[bool] = False
    #: Whether a second store instance must see the first one's ownership lock as held.
    lock_across_instances: ClassVar[bool] = True

    _opened: list[Store]

    # -- hooks -----------------------------------------------------------------------------------

    async def make_store(self, **options: Any) -> Store:
        """A new store on the test's database, not yet set up; ``options`` may hold ``max_row_bytes``."""
        raise NotImplementedError("subclass StoreConformance and implement make_store()")

    async def bump_schema_version(self, store: Store) -> None:
        """Mark the database as written by a newer schema version (raw SQL). Skips when not provided."""
        pytest.skip("this backend provides no bump_schema_version() hook")

    async def raw_checkpoint_ids(self, execution_id: str) -> list[str]:
        """The ids of the run's stored rows, read with raw SQL, bypassing the store. Skips when absent."""
        pytest.skip("this backend provides no raw_checkpoint_ids() hook")

    # -- fixtures and helpers --------------------------------------------------------------------

    @pytest.fixture
    async def store(self) -> AsyncIterator[Store]:
        """A set-up store; every store the test opens is closed afterwards."""
        self._opened = []
        first = await self.open_store()
        try:
            yield first
        finally:
            for opened in reversed(self._opened):
                with anyio.move_on_after(10):
                    await opened.close()
            self._opened = []

    async def open_store(self, **options: Any) -> Store:
        """Another set-up store on the same database (closed at the end of the test)."""
        created = await self.make_store(**options)
        self._opened.append(created)
        await created.setup()
        return created

    async def close_store(self, store: Store) -> None:
        """Close a store opened by :meth:`open_store` before the end of the test."""
        if store in self._opened:
            self._opened.remove(store)
        await store.close()

    def bounded(self) -> Any:
        """A cancel scope that fails the test after :attr:`timeout` seconds."""
        return anyio.fail_after(self.timeout)

    def outbox(self, store: Store) -> ReplicatedStore:
        """The store as a :class:`ReplicatedStore`, or skip (or fail, if required)."""
        if not isinstance(store, ReplicatedStore):
            if self.require_outbox:
                pytest.fail(f"{type(store).__name__} does not implement ReplicatedStore")
            pytest.skip("the store has no outbox")
        return store

    def ownership(self, store: Store) -> OwnedStore:
        """The store as an :class:`OwnedStore`, or skip (or fail, if required)."""
        if not isinstance(store, OwnedStore):
            if self.require_ownership:
                pytest.fail(f"{type(store).__name__} does not implement OwnedStore")
            pytest.skip("this store does not record run ownership")
        return store

    @staticmethod
    async def write(store: Store, rows: Sequence[Checkpoint]) -> list[Checkpoint]:
        for row in rows:
            await store.append(row)
        return list(rows)

    async def completed_run(self, store: Store, eid: str) -> list[Checkpoint]:
        return await self.write(
            store,
            [make_row(eid, 0), tool_row(eid, 1), make_row(eid, 2, step_index=1), run_end_row(eid, 3)],
        )

    async def crashed_run(self, store: Store, eid: str) -> list[Checkpoint]:
        return await self.write(store, [make_row(eid, 0), tool_row(eid, 1), make_row(eid, 2, step_index=1)])

    async def failed_run(self, store: Store, eid: str) -> list[Checkpoint]:
        return await self.write(store, [make_row(eid, 0), tool_row(eid, 1), run_end_row(eid, 2, FAILED)])

    async def paused_run(self, store: Store, eid: str) -> tuple[list[Checkpoint], PendingInterrupt]:
        rows = await self.write(store, [make_row(eid, 0), tool_row(eid, 1)])
        pause = pause_row(eid, 2)
        pending = make_pending(eid, pause)
        await store.append_pause(pause, pending)
        return [*rows, pause], pending

    async def reentry_or_error(self, store: Store, eid: str) -> ReEntry | type[BaseException]:
        try:
            return await store.reentry(eid)
        except Exception as exc:
            return type(exc)
