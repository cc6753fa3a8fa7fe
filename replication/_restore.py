"""Restore-anywhere: a run the local store lacks, fetched from the plane and imported whole.

``GET {url}/public/v1/runs/{execution_id}`` returns every row of the run in ``seq`` order, its
cache entries and its inbox entries; the rows are imported as synced (their messages rebuilt from
the wire), the cache entries too, the pending row when the newest row is an unclaimed pause, and
the signals not consumed by a row the plane holds (a consumption by a row it lacks did not happen
in the run restored), so the run resumes, or is woken, as if it had never left. ``TETHER_RESTORE_FROM_PLANE`` turns the automatic restore of
``system.resume/send/fork`` off; :func:`restore_from_plane` is the same thing done by hand.
"""

from __future__ import annotations

import logging
import os
from typing import Any, Final
from urllib.parse import quote

import msgspec

from stores import HITL_PAUSE, INTERRUPTED, CacheEntry, Checkpoint, PendingInterrupt, Store, StoredSignal

from ._client import PlaneClient
from ._errors import PlaneError
from ._wire import CacheItem, Item, Rebuilder, SignalItem

__all__ = ["ENV_RESTORE", "restore_enabled", "restore_from_plane", "restore_into", "unconsumed"]

#: The environment switch of the automatic restore.
ENV_RESTORE: Final = "TETHER_RESTORE_FROM_PLANE"
_OFF: Final = frozenset({"0", "false", "no", "off"})
_ON: Final = frozenset({"", "1", "true", "yes", "on"})
_log = logging.getLogger("tether")


def restore_enabled() -> bool:
    """Whether restore-anywhere is on: unset or 1/true/yes/on; 0/false/no/off (any case) turn it
    off, and so does any other value (with a warning: an erasure policy must fail closed)."""
    value = os.environ.get(ENV_RESTORE, "").strip().lower()
    if value in _ON:
        return True
    if value not in _OFF:
        _log.warning("%s=%r is not one of 1/true/yes/on/0/false/no/off: restore is off", ENV_RESTORE, value)
    return False


class _Run(msgspec.Struct):
    checkpoints: list[Item]
    cache: list[CacheItem] = []
    signals: list[SignalItem] = []


async def restore_into(store: Any, execution_id: str, client: PlaneClient) -> Checkpoint | None:
    """Fetch the run from the plane and import it into ``store``; its newest row, or ``None`` when
    the plane has no row of it. Never touches a run the store already has."""
    if await store.latest(execution_id) is not None:
        return None
    found = await client.read(f"/public/v1/runs/{quote(execution_id, safe='')}")
    if found is None:
        return None
    try:
        run = msgspec.convert(found, _Run)
    except msgspec.ValidationError as exc:
        raise PlaneError(
            f"the plane's copy of run {execution_id!r} is not of the protocol's shape: {exc}"
        ) from exc
    for item in run.checkpoints:
        if item.execution_id != execution_id:
            raise PlaneError(
                f"the plane answered for run {execution_id!r} with a row of {item.execution_id!r}"
            )
    if not run.checkpoints:
        return None
    rebuild = Rebuilder()
    try:
        rows = [await rebuild.row(item) for item in sorted(run.checkpoints, key=lambda i: i.seq)]
    except LookupError as exc:
        raise PlaneError(f"the plane's copy of run {execution_id!r} is incomplete: {exc}") from exc
    newest = rows[-1]
    pending = None
    if newest.step_type == HITL_PAUSE and newest.status == INTERRUPTED:
        pending = PendingInterrupt(
            execution_id=execution_id,
            reason=newest.interrupt_reason or "",
            context=newest.interrupt_context,
            node_id=newest.node_id,
            agent_path=newest.agent_path,
            created_at=newest.created_at,
        )
    cache = [
        CacheEntry(execution_id=execution_id, key=e.key, value=e.value, created_at=e.created_at)
        for e in run.cache
        if e.execution_id == execution_id
    ]
    signals = unconsumed(run.signals, execution_id, rows)
    await store.import_run(execution_id, rows, cache, pending, signals)
    _log.info(
        "restored run %s from the plane: %d rows, %d cache entries, %d unconsumed signals",
        execution_id,
        len(rows),
        len(cache),
        len(signals),
    )
    return newest


def unconsumed(items: list[SignalItem], execution_id: str, rows: list[Checkpoint]) -> list[StoredSignal]:
    """The inbox entries a run restored with ``rows`` still has to consume, in the plane's order:
    those no row consumed, and those consumed by a row the plane does not hold (quarantined, or not
    there yet): in the run restored, that consumption has not happened."""
    held = {row.seq for row in rows}
    return [
        msgspec.structs.replace(item.entry(), consumed_seq=None)
        for item in items
        if item.execution_id == execution_id and (item.consumed_seq is None or item.consumed_seq not in held)
    ]


async def restore_from_plane(store: Store, execution_id: str, *, url: str, api_key: str) -> Checkpoint | None:
    """Restore ``execution_id`` from the plane at ``url`` into ``store`` by hand; the newest row, or
    ``None`` when the plane has none or ``store`` already holds the run (it is never overwritten)."""
    client = PlaneClient(url, api_key, timeout=30.0)
    try:
        return await restore_into(store, execution_id, client)
    finally:
        await client.aclose()
