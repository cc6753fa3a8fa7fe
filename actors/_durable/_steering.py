"""Steering: the ``"message"`` signals of a run's inbox become user messages at its next model turn.

A model turn's row is refused by the store, in the row's own transaction, while such signals wait
(:class:`~stores.SignalsWaiting`): so a turn with none costs nothing more. Then they are read,
added to the conversation in order, and the row written again at the same ``seq`` naming their
inbox ids (``node_input["signals"]``), which consumes them in that row's transaction, exactly once.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import msgspec

from stores import CONSUMES, MESSAGE, Checkpoint, SignalsWaiting, encode_json, new_id

from ..models import Message

if TYPE_CHECKING:
    from ._level import Level

__all__ = ["append_turn", "steering_text"]


def steering_text(payload: object) -> str:
    """A steering signal's payload as the user message's text: a str as it is, else its JSON."""
    return payload if isinstance(payload, str) else encode_json(payload).decode()


async def append_turn(level: Level, row: Checkpoint) -> Checkpoint:
    """Append ``level``'s model turn row ``row``, with the steering messages that wait, if any; the
    row written."""
    try:
        await level._append(row)
        return row
    except SignalsWaiting:
        pass
    waiting = await level.store.signals(level.execution_id, name=MESSAGE)
    if not waiting:  # consumed meanwhile by another writer: that writer's row conflicts
        await level._append(row)
        return row
    level._transcript.extend(Message("user", steering_text(found.payload)) for found in waiting)
    snapshot = {**row.state_snapshot, "messages": level._transcript.snapshot()}
    steered = msgspec.structs.replace(
        row,
        seq=level.rows.take_seq(),
        state_snapshot=snapshot,
        node_input={**row.node_input, CONSUMES: [found.id for found in waiting]},
        checkpoint_id=new_id(),
    )
    await level._append(steered)
    return steered
