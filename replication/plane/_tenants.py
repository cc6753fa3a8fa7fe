"""The plane's tenants: one per API key, each with its own tether store, and what it ingests.

A tenant's rows live in its own store (:func:`stores.open_store` of a URL per tenant), so a tenant
never reads or overwrites another's rows. Ingest is idempotent by ``checkpoint_id``: a known row
sent again with the same content is accepted, with different content rejected per item. Rows are
stored as copies (:meth:`~stores.ReplicatedStore.append_copy`): what a row did to its own store's
inbox arrives as inbox entries of their own, merged by ``signal_id``
(:meth:`~stores.ReplicatedStore.copy_signals`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Final, TypeVar

import anyio
import msgspec

from stores import (
    Checkpoint,
    ReplicatedStore,
    Store,
    StoredSignal,
    StoreError,
    TetherError,
    conversation_of,
    encode_json,
)

from .._wire import (
    CacheItem,
    Conversations,
    Item,
    Rebuilder,
    SignalItem,
    cache_item,
    resource_type,
    signal_item,
)

__all__ = ["MAX_ITEM_BYTES", "Tenant", "parse_keys"]

#: The largest JSON encoding of one item the plane takes (larger: rejected per item).
MAX_ITEM_BYTES: Final = 1024 * 1024


def parse_keys(pairs: list[str]) -> dict[str, str]:
    """``KEY=TENANT`` (or ``KEY``: the tenant is the key's position, ``t1``...) to ``{key: tenant}``."""
    keys: dict[str, str] = {}
    for index, pair in enumerate(p.strip() for p in pairs):
        if not pair:
            continue
        key, sep, tenant = pair.partition("=")
        tenant = tenant if sep else f"t{index + 1}"
        if not key or not tenant.isidentifier() or not tenant.isascii() or len(tenant) > 40:
            raise ValueError(f"a plane key is KEY or KEY=TENANT (TENANT a plain identifier), not {pair!r}")
        keys[key] = tenant
    return keys


class Tenant:
    """One tenant's store and the memory of its conversations."""

    def __init__(self, name: str, store: Store) -> None:
        if not isinstance(store, ReplicatedStore):
            raise TypeError(f"the plane stores into a stores.ReplicatedStore, not {type(store).__name__}")
        self.name = name
        self.store = store
        self.box: ReplicatedStore = store
        self._rebuild = Rebuilder(self._held)

    async def _held(self, execution_id: str, log: str) -> list[Any] | None:
        """What the store holds of a conversation: the messages of its newest row there."""
        for row in reversed(await self.store.history(execution_id)):
            if conversation_of(row.agent_path) == log and isinstance(
                row.state_snapshot.get("messages"), list
            ):
                messages: list[Any] = row.state_snapshot["messages"]
                return messages
        return None

    async def ingest(
        self, raw_items: list[Any], raw_cache: list[Any], raw_signals: list[Any]
    ) -> dict[str, Any]:
        """Store what is new; the answer body, the acknowledgment ``{"accepted": N, "signals": M,
        "rejections": [...]}`` (``accepted`` counts the rows stored or already held, ``signals`` the
        inbox entries). The cache and inbox entries are stored first, so a reader never finds the
        row that follows a step without that step's results, nor a row without the consumption of
        the signals it consumed."""
        rejections: list[dict[str, Any]] = []
        for raw in raw_cache:
            try:
                entry = msgspec.convert(raw, CacheItem)
                await self.store.cache_put(entry.execution_id, entry.key, entry.value)
            except (msgspec.ValidationError, TetherError) as exc:
                rejections.append(
                    {
                        "key": raw.get("key") if isinstance(raw, dict) else None,
                        "reason": f"malformed cache entry: {exc}",
                    }
                )
        stored = await self._ingest_signals(raw_signals, rejections)
        runs: dict[str, list[Checkpoint]] = {}
        broken: set[tuple[str, str]] = set()
        for raw in raw_items:
            name, item = _checked(raw, Item, "checkpoint_id", "item", rejections)
            if item is None:
                continue
            key = (item.execution_id, item.messages.log) if item.messages is not None else None
            if key is not None and key in broken and len(item.messages.new) < item.messages.count:  # type: ignore[union-attr]
                rejections.append(
                    _rejected(name, "builds on a rejected item: send its messages whole", resend=True)
                )
                continue
            try:
                row = await self._rebuild.row(item)
                encode_json(row.state_snapshot, path="$.state_snapshot")
            except LookupError as exc:
                rejections.append(_rejected(name, str(exc), resend=True))
                if key is not None:
                    broken.add(key)
                continue
            except TetherError as exc:
                self._rebuild.drop(item)
                if key is not None:
                    broken.add(key)
                rejections.append(_rejected(name, f"malformed item: {exc}"))
                continue
            runs.setdefault(row.execution_id, []).append(row)
        refused: dict[str, str] = {}
        async with anyio.create_task_group() as tg:
            for rows in runs.values():
                tg.start_soon(self._store_run, rows, refused)
        for cid, reason in refused.items():
            rejections.append(_rejected(cid, reason))
        accepted = sum(len(rows) for rows in runs.values()) - len(refused)
        return {"accepted": accepted, "signals": stored, "rejections": rejections}

    async def _ingest_signals(self, raw_signals: list[Any], rejections: list[dict[str, Any]]) -> int:
        """Check inbox entries one by one and merge them into the store; how many were stored
        (the rest are rejected per entry, by ``signal_id``)."""
        entries: list[StoredSignal] = []
        for raw in raw_signals:
            item = _checked(raw, SignalItem, "signal_id", "inbox entry", rejections)[1]
            if item is not None:
                entries.append(item.entry())
        if not entries:
            return 0
        refused = await self.box.copy_signals(entries)
        rejections.extend(_refused(sid, reason) for sid, reason in refused.items())
        return len(entries) - len(refused)

    async def _store_run(self, rows: list[Checkpoint], refused: dict[str, str]) -> None:
        """Append one run's new rows in ``seq`` order (runs of a request are written concurrently,
        so the store's group commit shares their transactions)."""
        store = self.store
        for row in sorted(rows, key=lambda r: r.seq):
            known = await store.get(row.execution_id, row.checkpoint_id)
            if known is not None:
                if known != row:
                    refused[row.checkpoint_id] = "a known checkpoint_id sent again with different content"
                continue
            try:
                await self.box.append_copy(row)
            except StoreError as exc:
                refused[row.checkpoint_id] = f"{type(exc).__name__}: {exc}"
                continue
            except TetherError as exc:  # WriteConflict, RunExists: another row holds its place
                refused[row.checkpoint_id] = f"{type(exc).__name__}: {exc}"
                continue

    async def run(self, execution_id: str) -> dict[str, Any] | None:
        """``{"checkpoints": [...], "cache": [...], "signals": [...]}`` of one run (every inbox
        entry, consumed or not), or ``None``."""
        rows = await self.store.history(execution_id)
        if not rows:
            return None
        cache = await self.box.cache_entries(execution_id)
        signals = await self.box.signal_entries(execution_id)
        return {
            "checkpoints": Conversations().items(rows),
            "cache": [cache_item(e.execution_id, e.key, e.value, e.created_at) for e in cache],
            "signals": [signal_item(e) for e in signals],
        }

    async def latest(self, execution_id: str) -> Item | None:
        """The newest item of the run (its messages whole), or ``None``."""
        row = await self.store.latest(execution_id)
        return None if row is None else Conversations().items([row])[0]

    async def runs(self, *, status: str | None = None, limit: int = 100) -> list[dict[str, Any]]:
        """Run health: one summary per run from its rows alone (its head), newest first."""
        out = []
        for head in await self.store.heads(state=status, limit=limit):
            newest = await self.store.latest(head.execution_id)
            out.append(
                {
                    "execution_id": head.execution_id,
                    "runner": head.runner,
                    "resource_type": resource_type(head.agent_path),
                    "status": head.state,
                    "node_id": head.node_id,
                    "step_index": newest.step_index if newest is not None else 0,
                    "checkpoints": head.rows,
                    "updated_at": head.updated_at,
                }
            )
        return out


_Wire = TypeVar("_Wire", Item, SignalItem)


def _checked(
    raw: Any, kind: type[_Wire], id_field: str, what: str, rejections: list[dict[str, Any]]
) -> tuple[str, _Wire | None]:
    """The id ``raw`` gives under ``id_field`` (``""``: none) and ``raw`` decoded as ``kind`` and
    checked; ``None`` in its place when it is too large or malformed (its rejection, named by that
    id, is added to ``rejections``)."""
    found = raw.get(id_field) if isinstance(raw, dict) else None
    name = found if isinstance(found, str) else ""
    size = len(msgspec.json.encode(raw))
    if size > MAX_ITEM_BYTES:
        rejections.append(
            {id_field: name, "reason": f"{what} is {size} bytes, over the limit of {MAX_ITEM_BYTES}"}
        )
        return name, None
    try:
        item = msgspec.convert(raw, kind)
        item.check()
    except (msgspec.ValidationError, ValueError) as exc:
        rejections.append({id_field: name, "reason": f"malformed {what}: {exc}"})
        return name, None
    return name, item


def _refused(signal_id: str, reason: str) -> dict[str, Any]:
    return {"signal_id": signal_id, "reason": reason}


def _rejected(checkpoint_id: str, reason: str, *, resend: bool = False) -> dict[str, Any]:
    found: dict[str, Any] = {"checkpoint_id": checkpoint_id, "reason": reason}
    if resend:
        found["resend"] = True
    return found


TenantFactory = Callable[[str], Store]
Tenants = Mapping[str, Tenant]
