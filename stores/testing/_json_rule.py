"""The JSON rule and the row size limit, at every write."""

from __future__ import annotations

import math
from collections.abc import Awaitable
from typing import Any

import msgspec
import pytest

from .._errors import (
    MAX_EXECUTION_ID,
    InvalidExecutionId,
    RowTooLarge,
    SerializationError,
)
from .._model import (
    REENTRY_SEQ,
    RESUME,
    Checkpoint,
)
from .._protocol import Store
from ._base import ConformanceBase
from ._factories import (
    BAD_IDS,
    BAD_VALUES,
    make_message,
    make_pending,
    make_row,
    pause_row,
)

__all__ = ["JsonRuleTests"]


class JsonRuleTests(ConformanceBase):
    """The JSON rule and the row size limit, at every write."""

    # -- the JSON rule -----------------------------------------------------------------------------

    @pytest.mark.parametrize(("label", "value", "inner"), BAD_VALUES, ids=BAD_IDS)
    async def test_json_rule_at_append(self, store: Store, label: str, value: Any, inner: str) -> None:
        with self.bounded():
            first = make_row("run-a", 0, messages=[make_message(0)])
            await store.append(first)
            cases: list[tuple[Checkpoint, str]] = [
                (make_row("run-a", 1, node_input={"x": value}), "$.node_input.x"),
                (make_row("run-a", 1, node_output={"x": value}), "$.node_output.x"),
                (make_row("run-a", 1, interrupt_context={"x": value}), "$.interrupt_context.x"),
                (make_row("run-a", 1, state_snapshot={"turn": 1, "x": value}), "$.state_snapshot.x"),
                (
                    make_row("run-a", 1, messages=[make_message(0), {"role": "user", "content": value}]),
                    "$.state_snapshot.messages[1].content",
                ),
            ]
            for bad, path in cases:
                with pytest.raises(SerializationError) as info:
                    await store.append(bad)
                assert info.value.path == path + inner, label
                assert await store.history("run-a") == [first]
            good = make_row("run-a", 1, messages=[make_message(0), make_message(1)])
            await store.append(good)
            assert await store.history("run-a") == [first, good]

    async def test_json_rule_at_pause_and_claim(self, store: Store) -> None:
        with self.bounded():
            rows = await self.crashed_run(store, "run-a")
            pause = pause_row("run-a", 3)
            with pytest.raises(SerializationError) as info:
                await store.append_pause(pause, make_pending("run-a", pause, context={"when": {1, 2}}))
            assert info.value.path == "$.context.when"
            assert await store.history("run-a") == rows
            assert await store.pending("run-a") == []
            pending = make_pending("run-a", pause)
            await store.append_pause(pause, pending)
            bad_claim = make_row(
                "run-a", 4, step_type=RESUME, node_input={REENTRY_SEQ: 3, "resume": math.inf}
            )
            with pytest.raises(SerializationError) as info:
                await store.claim(bad_claim)
            assert info.value.path == "$.node_input.resume"
            assert await store.pending("run-a") == [pending]
            assert await store.history("run-a") == [*rows, pause]

    async def test_nul_in_a_text_field_is_refused_by_every_backend(self, store: Store) -> None:
        with self.bounded():
            rows = await self.crashed_run(store, "run-a")
            for field in ("node_id", "agent_path", "interrupt_reason"):
                bad = msgspec.structs.replace(make_row("run-a", 3), **{field: "a\x00b"})
                with pytest.raises(SerializationError) as info:
                    await store.append(bad)
                assert info.value.path == f"$.{field}"
            pause = pause_row("run-a", 3)
            with pytest.raises(SerializationError) as info:
                await store.append_pause(
                    pause, msgspec.structs.replace(make_pending("run-a", pause), reason="x\x00")
                )
            assert info.value.path == "$.reason"
            assert await store.history("run-a") == rows
            assert await store.pending("run-a") == []

    # -- execution ids ---------------------------------------------------------------------------

    async def test_execution_id_limits_are_the_same_on_every_backend(self, store: Store) -> None:
        with self.bounded():
            # The longest id, of 4-byte characters: the worst case for an index entry.
            longest = "\U0001f600" * (MAX_EXECUTION_ID - 1) + "x"
            row = make_row(longest, 0)
            await store.append(row)
            assert await store.history(longest) == [row]
            assert await store.try_lock(longest)
            await store.unlock(longest)
            await store.cache_put(longest, "k", 1)
            pause = pause_row(longest, 1)
            await store.append_pause(pause, make_pending(longest, pause))
            assert [p.execution_id for p in await store.pending(longest)] == [longest]
            bad: list[tuple[Any, str]] = [
                (longest + "y", f"1 to {MAX_EXECUTION_ID} characters; this one has {MAX_EXECUTION_ID + 1}"),
                ("", "this one has 0"),
                ("a\x00b", "NUL"),
                ("a\ud800", "lone surrogate"),
                (42, "is a str, not int"),
                (b"run", "is a str, not bytes"),
                (None, "is a str, not NoneType"),
            ]
            for eid, words in bad:
                calls: list[Awaitable[object]] = [
                    store.append(make_row(eid, 0)),
                    store.latest(eid),
                    store.history(eid),
                    store.reentry(eid),
                    store.forkable(eid),
                    store.get(eid, "c"),
                    store.delete_run(eid),
                    store.cache_get(eid, "k"),
                    store.cache_put(eid, "k", 1),
                    store.try_lock(eid),
                    store.unlock(eid),
                ]
                if eid is not None:
                    calls.append(store.pending(eid))
                for call in calls:
                    with pytest.raises(InvalidExecutionId, match=words):
                        await call
            assert await store.history(longest) == [row, pause]

    # -- size limit ------------------------------------------------------------------------------

    async def test_row_over_the_size_limit_is_refused(self, store: Store) -> None:
        with self.bounded():
            small = await self.open_store(max_row_bytes=4096)
            first = make_row("run-a", 0, messages=[make_message(0)])
            await small.append(first)
            with pytest.raises(RowTooLarge):
                await small.append(make_row("run-a", 1, node_input={"blob": "x" * 8000}))
            with pytest.raises(RowTooLarge):
                await small.append(
                    make_row("run-a", 1, messages=[make_message(0), make_message(1, size=8000)])
                )
            pause = pause_row("run-a", 1)
            with pytest.raises(RowTooLarge):
                await small.append_pause(
                    msgspec.structs.replace(pause, interrupt_context={"blob": "y" * 8000}),
                    make_pending("run-a", pause),
                )
            assert await small.history("run-a") == [first]
            assert await small.pending("run-a") == []
            msgs = [make_message(i, size=600) for i in range(40)]  # 24 KB in all, 600 B per step
            rows = [make_row("run-a", seq, messages=msgs[:seq]) for seq in range(1, 41)]
            await self.write(small, rows)
            assert await store.history("run-a") == [first, *rows]
