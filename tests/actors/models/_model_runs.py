"""Runs for the model tests: an ActorSystem on a fresh store instance of a test's backend."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from conftest import Backend

from actors import ActorSystem, Agent
from stores import Store


@asynccontextmanager
async def running(backend: Backend, *runners: Agent) -> AsyncIterator[tuple[Store, ActorSystem]]:
    """A store on ``backend`` (set up, closed afterwards) and an ActorSystem on it with ``runners``."""
    store = backend.open()
    await store.setup()
    try:
        async with ActorSystem(store, runners=runners) as system:
            yield store, system
    finally:
        await store.close()
