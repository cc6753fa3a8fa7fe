"""The idempotency cache: insert if absent, the first writer wins; intents of at-most-once calls."""

from __future__ import annotations

import math
from typing import Any

import anyio
import pytest

from .._errors import (
    SerializationError,
)
from .._model import (
    Cached,
)
from .._protocol import Store
from ._base import ConformanceBase

__all__ = ["CacheTests"]


class CacheTests(ConformanceBase):
    """The idempotency cache: insert if absent, the first writer wins."""

    # -- idempotency cache -----------------------------------------------------------------------

    async def test_cache_insert_if_absent(self, store: Store) -> None:
        with self.bounded():
            assert await store.cache_get("run-a", "k") is None
            assert await store.cache_put("run-a", "k", {"n": 1, "t": (1, 2)}) == {"n": 1, "t": [1, 2]}
            assert await store.cache_put("run-a", "k", {"n": 2}) == {"n": 1, "t": [1, 2]}
            assert await store.cache_get("run-a", "k") == Cached({"n": 1, "t": [1, 2]})
            assert await store.cache_get("run-b", "k") is None
            assert await store.cache_get("run-a", "other") is None

    async def test_a_cached_none_is_a_hit(self, store: Store) -> None:
        with self.bounded():
            assert await store.cache_put("run-a", "k", None) is None
            assert await store.cache_get("run-a", "k") == Cached(None)
            assert await store.cache_put("run-a", "k", "later") is None

    async def test_two_cache_writers_agree_on_the_first_value(self, store: Store) -> None:
        with self.bounded():
            other = await self.open_store()
            results: list[Any] = []

            async def put(target: Store, value: str) -> None:
                results.append(await target.cache_put("run-a", "race", value))

            async with anyio.create_task_group() as tg:
                for i in range(10):
                    tg.start_soon(put, store if i % 2 else other, f"v{i}")
            assert len(set(results)) == 1
            assert await store.cache_get("run-a", "race") == Cached(results[0])
            assert await other.cache_get("run-a", "race") == Cached(results[0])

    async def test_cache_refuses_values_that_are_not_json(self, store: Store) -> None:
        with self.bounded():
            with pytest.raises(SerializationError) as info:
                await store.cache_put("run-a", "k", {"x": math.nan})
            assert info.value.path.endswith(".x")
            assert await store.cache_get("run-a", "k") is None

    async def test_cache_intend_records_an_intent_once_and_yields_to_a_result(self, store: Store) -> None:
        with self.bounded():
            assert await store.cache_intend("run-a", "k") is True  # recorded now: run the body
            assert await store.cache_intend("run-a", "k") is False  # in doubt: never run it again
            assert await store.cache_get("run-a", "k") is None  # an intent is not a result
            other = await self.open_store()
            assert await other.cache_intend("run-a", "k") is False  # another process sees it too
            assert await other.cache_intend("run-b", "k") is True  # one run's intent is its own
            assert await store.cache_put("run-a", "k", {"charged": 3}) == {"charged": 3}
            assert await store.cache_intend("run-a", "k") == Cached({"charged": 3})
            assert await store.delete_run("run-a") == 0
            assert await store.cache_intend("run-a", "k") is True  # deleted with the run's cache
