"""Messages stored once per conversation, read back whole."""

from __future__ import annotations

from .._model import (
    TOOL_CALL,
    Checkpoint,
)
from .._protocol import Store
from ._base import ConformanceBase
from ._factories import Pair, Point, make_message, make_row

__all__ = ["MessageTests"]


class MessageTests(ConformanceBase):
    """Messages stored once per conversation, read back whole."""

    # -- messages stored once ------------------------------------------------------------------

    async def test_messages_round_trip_as_the_conversation_grows(self, store: Store) -> None:
        with self.bounded():
            msgs = [make_message(i, "user" if i % 2 else "assistant") for i in range(12)]
            rows = [make_row("run-a", seq, messages=msgs[: 2 * seq + 1]) for seq in range(6)]
            rows.append(make_row("run-a", 6, messages=msgs[:3]))  # a shorter prefix
            rows.append(make_row("run-a", 7, messages=[]))
            rows.append(make_row("run-a", 8))  # no messages at all
            diverged = [*msgs[:2], make_message(100), make_message(101)]
            rows.append(make_row("run-a", 9, messages=diverged))
            rows.append(make_row("run-a", 10, messages=[*diverged, make_message(102)]))
            rows.append(make_row("run-a", 11, messages=msgs))
            await self.write(store, rows)
            assert await store.history("run-a") == rows
            for row in rows:
                assert await store.get("run-a", row.checkpoint_id) == row
            fresh = await self.open_store()
            assert await fresh.history("run-a") == rows
            more = make_row("run-a", 12, messages=[*msgs, make_message(12)])
            await fresh.append(more)
            assert await store.latest("run-a") == more

    async def test_messages_of_two_conversations_in_one_run(self, store: Store) -> None:
        with self.bounded():
            a = [make_message(i) for i in range(6)]
            b = [make_message(100 + i) for i in range(6)]
            rows: list[Checkpoint] = []
            for i in range(6):
                rows.append(make_row("run-a", 3 * i, messages=a[: i + 1], agent_path="swarm:s/agent:a"))
                rows.append(make_row("run-a", 3 * i + 1, messages=b[: i + 1], agent_path="swarm:s/agent:b"))
                rows.append(
                    make_row(
                        "run-a",
                        3 * i + 2,
                        "turn:0/tool:t",
                        step_type=TOOL_CALL,
                        messages=a[: i + 1],
                        agent_path="swarm:s/agent:a/tool:t",
                    )
                )
            await self.write(store, rows)
            assert await store.history("run-a") == rows
            fresh = await self.open_store()
            assert await fresh.history("run-a") == rows

    async def test_messages_are_normalised(self, store: Store) -> None:
        with self.bounded():
            row = make_row(
                "run-a",
                0,
                messages=[("user", "hi"), Pair(1, [2]), Point(3, (4, 5))],
                node_input={"pair": Pair(6, [7]), "t": (1, (2, 3))},
            )
            await store.append(row)
            got = await store.latest("run-a")
            assert got is not None
            assert got.state_snapshot["messages"] == [
                ["user", "hi"],
                {"left": 1, "right": [2]},
                {"x": 3, "y": [4, 5]},
            ]
            assert got.node_input == {"pair": {"left": 6, "right": [7]}, "t": [1, [2, 3]]}
