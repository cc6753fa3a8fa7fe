"""Ids: unique, UUID version 7 layout, and sorted by creation time (what keeps indexes append-only)."""

from __future__ import annotations

import itertools
import time
import uuid

from stores import new_id


def test_ids_are_uuid7_carrying_their_creation_time() -> None:
    before = time.time_ns() // 1_000_000
    made = new_id()
    after = time.time_ns() // 1_000_000
    parsed = uuid.UUID(made)
    assert len(made) == 32 and made == parsed.hex
    assert parsed.version == 7 and parsed.variant == uuid.RFC_4122
    assert before <= int(made[:12], 16) <= after


def test_ids_sort_in_creation_order_and_never_repeat() -> None:
    made: list[str] = []
    for _ in range(50):
        made.extend(new_id() for _ in range(200))
        time.sleep(0.001)  # a later millisecond: the next group sorts after this one
    groups = [made[i : i + 200] for i in range(0, len(made), 200)]
    assert all(max(a) < min(b) for a, b in itertools.pairwise(groups))
    assert len(set(made)) == len(made)
