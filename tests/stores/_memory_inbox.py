"""The inbox entries' outbox of the in-memory model (:class:`~_memory_store.MemoryStore` mixes it in)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import msgspec
from _model_rules import json_copy

from stores import StoredSignal
from stores.lowlevel import check_copies, merge_copies

if TYPE_CHECKING:
    from _memory_store import MemoryDatabase

__all__ = ["MemoryInboxOutbox"]


class MemoryInboxOutbox:
    """Inbox entries keep a sync state by ``signal_id``; a mark is a compare-and-set on the state sent."""

    db: MemoryDatabase

    def _entry(self, signal_id: str) -> StoredSignal | None:
        return next((s for s in self.db.signals if s.signal_id == signal_id), None)

    async def fetch_unsynced_signals(self, limit: int) -> list[StoredSignal]:
        return [s for s in self.db.signals if not self.db.signal_sync[s.signal_id][0]][:limit]

    def _mark(self, entry: StoredSignal, reason: str | None) -> None:
        held = self._entry(entry.signal_id)
        if held is not None and held.consumed_seq == entry.consumed_seq:
            self.db.signal_sync[entry.signal_id] = (True, reason)

    async def mark_signals_synced(self, entries: Sequence[StoredSignal]) -> None:
        for entry in entries:
            self._mark(entry, None)

    async def mark_signals_quarantined(self, refused: Sequence[tuple[StoredSignal, str]]) -> None:
        for entry, reason in refused:
            self._mark(entry, reason)

    async def signal_sync_state(self, signal_id: str) -> tuple[bool, str | None] | None:
        return self.db.signal_sync.get(signal_id)

    async def signal_entries(self, execution_id: str) -> list[StoredSignal]:
        return [s for s in self.db.signals if s.execution_id == execution_id]

    def _add(self, entry: StoredSignal, *, synced: bool, consumed_seq: Any) -> None:
        found = msgspec.structs.replace(
            entry,
            id=next(self.db.signal_ids),
            payload=json_copy(entry.payload, "$.payload"),
            consumed_seq=consumed_seq,
        )
        self.db.signals.append(found)
        self.db.signal_sync[found.signal_id] = (synced, None)

    def _import_signals(self, entries: Sequence[StoredSignal]) -> None:
        for entry in entries:
            if self._entry(entry.signal_id) is None:
                self._add(entry, synced=True, consumed_seq=None)

    async def copy_signals(self, entries: Sequence[StoredSignal]) -> dict[str, str]:
        checked, refused = check_copies(entries)
        held = {s.signal_id: s for s in self.db.signals}
        fresh, consumed, contradicting = merge_copies(held, checked)
        for entry, _ in fresh:
            self._add(entry, synced=False, consumed_seq=entry.consumed_seq)
        done = {e.signal_id: e.consumed_seq for e in consumed}
        self.db.signals = [
            msgspec.structs.replace(s, consumed_seq=done[s.signal_id]) if s.signal_id in done else s
            for s in self.db.signals
        ]
        for sid in done:
            self.db.signal_sync[sid] = (False, None)
        return {**refused, **contradicting}
