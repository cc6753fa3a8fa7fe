"""Taking a model's reply into a run: every tool call gets an id no other call of the run has.

Some servers repeat ids within one reply (``call_0`` twice) or across turns; others send none. A run
must never tell two calls apart by an id a model chose, so a reply is taken in through
:func:`take_in` (for every model, :class:`~._function.FunctionModel` included) before it is written:
the first use of an id keeps it, a repeat or a missing id gets a fresh one. The tool messages then
answer the ids the run stored, and the next request carries one answer per call.
"""

from __future__ import annotations

import random
import re
import string
from collections.abc import Iterable

import msgspec

from .._core._log import tether_logger
from ._errors import ModelError
from ._types import Message, ModelReply, ToolCall, new_call_id

__all__ = ["take_in"]

#: Mistral accepts only ids of nine letters and digits; a repeat of one gets an id of that shape.
_NINE = re.compile(r"[A-Za-z0-9]{9}")
_ALNUM = string.ascii_letters + string.digits
_log = tether_logger()


def take_in(reply: object, earlier: Iterable[Message], *, model: object = None) -> ModelReply:
    """``reply`` with each tool-call id unique among its calls and the calls of ``earlier`` messages.

    ``reply`` is what a model's ``complete`` returned: anything but a :class:`ModelReply` is a
    :class:`ModelError` naming the model.
    """
    if not isinstance(reply, ModelReply):
        raise ModelError(f"model {model!r} returned a {type(reply).__name__}, not a ModelReply")
    if not reply.tool_calls:
        return reply
    seen = {call.id for message in earlier for call in message.tool_calls}
    calls: list[ToolCall] = []
    changed: list[str] = []
    for call in reply.tool_calls:
        if call.id and call.id not in seen:
            calls.append(call)
        else:
            fresh = _fresh_id(call.id, seen)
            changed.append(f"{call.id!r} -> {fresh!r}")
            calls.append(msgspec.structs.replace(call, id=fresh))
        seen.add(calls[-1].id)
    if not changed:
        return reply
    _log.info("tool-call ids made unique", model=repr(model), ids=", ".join(changed))
    return msgspec.structs.replace(reply, tool_calls=calls)


def _fresh_id(old: str, seen: set[str]) -> str:
    """An id not in ``seen``: ``old`` with a counter, a random id of Mistral's shape, or a new one."""
    if not old:
        return new_call_id()
    if _NINE.fullmatch(old):
        while True:
            candidate = "".join(random.choices(_ALNUM, k=9))
            if candidate not in seen:
                return candidate
    n = 2
    while f"{old}_{n}" in seen:
        n += 1
    return f"{old}_{n}"
