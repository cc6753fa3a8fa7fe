"""The store surfaces the runtime finds by protocol, never by a method's name: both backends are an
``OwnedStore`` (run ownership: what a fleet and lock loss need) and a ``ReplicatedStore``, PostgreSQL
an ``OwnerSessions`` too; the replicator's kicking view stays what its store is, forwarding each
method by name; a store without ownership (the test model) is driven without it."""

from __future__ import annotations

import typing
from collections.abc import Callable

import pytest
from _memory_store import MemoryDatabase, MemoryStore
from conftest import Backend

from actors import ActorSystem, Agent
from actors.lowlevel import KickingOwnedStore, KickingStore, kicking, owned
from actors.models import FunctionModel
from stores import (
    OwnedStore,
    OwnerSessions,
    OwnershipLost,
    PostgresStore,
    ReplicatedStore,
    SQLiteStore,
    Store,
)

pytestmark = pytest.mark.anyio


def _members(protocol: type) -> set[str]:
    """The methods a protocol declares (its own and those of the protocols it extends)."""
    return {
        name
        for klass in protocol.__mro__
        if getattr(klass, "_is_protocol", False) and klass is not typing.Protocol
        for name, value in vars(klass).items()
        if not name.startswith("_") and callable(value)
    }


def _kicks() -> tuple[list[int], Callable[[], None]]:
    kicked: list[int] = []
    return kicked, lambda: kicked.append(1)


async def test_both_backends_have_every_surface_and_their_kicking_view_keeps_it(
    store_backend: Backend,
) -> None:
    store = store_backend.open()
    await store.setup()
    try:
        assert isinstance(store, OwnedStore) and isinstance(store, ReplicatedStore)
        assert isinstance(store, OwnerSessions) is (store_backend.name == "postgres")
        assert owned(store) is store
        kicked, kick = _kicks()
        view = kicking(store, kick)
        assert type(view) is KickingOwnedStore and owned(view) is view
        # The view reaches the backend's own ownership: a run taken with its first row is not
        # recorded until that row is written, so nothing may act for it before.
        assert await view.try_lock_with_first_row("run-1")  # type: ignore[attr-defined]
        with pytest.raises(OwnershipLost, match="is not recorded as owned here"):
            view.check_owner("run-1")  # type: ignore[attr-defined]
        await view.unlock("run-1")
        assert kicked == []
    finally:
        await store.close()


def test_the_backend_classes_satisfy_the_protocols_without_an_instance() -> None:
    for backend in (SQLiteStore, PostgresStore):
        for protocol in (Store, OwnedStore, ReplicatedStore):
            missing = sorted(
                name for name in _members(protocol) if not callable(getattr(backend, name, None))
            )
            assert not missing, f"{backend.__name__} lacks {protocol.__name__} methods {missing}"
    assert callable(getattr(PostgresStore, "terminate_owner", None))


def test_the_kicking_views_forward_every_method_by_name() -> None:
    assert not hasattr(KickingStore, "__getattr__")
    assert _members(Store) <= set(vars(KickingStore)), _members(Store) - set(vars(KickingStore))
    extra = _members(OwnedStore) - _members(Store)
    assert extra and extra <= set(vars(KickingOwnedStore)), extra - set(vars(KickingOwnedStore))


async def test_a_store_without_ownership_is_driven_without_it() -> None:
    memory = MemoryStore(MemoryDatabase())
    await memory.setup()
    assert isinstance(memory, Store) and not isinstance(memory, OwnedStore)
    assert owned(memory) is None
    kicked, kick = _kicks()
    view = kicking(memory, kick)
    assert type(view) is KickingStore and owned(view) is None and not isinstance(view, OwnedStore)
    agent = Agent("plain", FunctionModel(lambda messages: "done"))
    async with ActorSystem(view) as system:
        assert (await (await system.spawn(agent, "go")).result(timeout=30)).output == "done"
        with pytest.raises(TypeError, match="does not record run ownership, so it cannot serve a fleet"):
            await system.sweep()
    assert kicked  # the run's rows went through the view's writes
