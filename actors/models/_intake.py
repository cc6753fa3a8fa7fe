"""Taking a model's reply into a run: checked as the store will keep it, each call's id unique.

Some servers repeat ids within one reply (``call_0`` twice) or across turns; others send none. A run
must never tell two calls apart by an id a model chose, so a reply is taken in through
:func:`take_in` (for every model, :class:`~._function.FunctionModel` included) before it is written:
the first use of an id keeps it, a repeat or a missing id gets a fresh one. The tool messages then
answer the ids the run stored, and the next request carries one answer per call.

The reply is also checked before any row holds it, so that a run behaves the same whether or not
its process crashes right after the next row: a call whose arguments are not a JSON object becomes
a call the model reads a tool error for (``arguments_error``), as a recovering process would read
it; a reply the JSON rule refuses (NaN in arguments, a NUL or a lone surrogate in the text) is a
:class:`ModelError` naming the place, and the run fails with its marker instead of writing a row
that can never be written.
"""

from __future__ import annotations

import random
import re
import string
from collections.abc import Iterable
from typing import Any

import msgspec

from stores import SerializationError, encode_json

from .._core._log import tether_logger
from ._errors import ModelError
from ._types import Message, ModelReply, ToolCall, Transcript, new_call_id

__all__ = ["take_in"]

#: Mistral accepts only ids of nine letters and digits; a repeat of one gets an id of that shape.
_NINE = re.compile(r"[A-Za-z0-9]{9}")
_ALNUM = string.ascii_letters + string.digits
_log = tether_logger()
_message_decoder = msgspec.json.Decoder(Message)


def take_in(
    reply: object, earlier: Iterable[Message], *, model: object = None, into: Transcript | None = None
) -> ModelReply:
    """``reply`` with each tool-call id unique among its calls and the calls of ``earlier`` messages.

    ``reply`` is what a model's ``complete`` returned: anything but a :class:`ModelReply` is a
    :class:`ModelError` naming the model. With ``into``, the reply's assistant message is appended
    to that transcript, with its dict form (the one its check built, unless ids changed).
    """
    if not isinstance(reply, ModelReply):
        raise ModelError(f"model {model!r} returned a {type(reply).__name__}, not a ModelReply")
    reply, message, data = _checked(reply, model)
    if reply.tool_calls:
        unique = _unique(reply, earlier, model)
        if unique is not reply:
            reply, message = unique, unique.to_message()
            data = message.to_dict()
    if into is not None:
        into.append(message, data)
    return reply


def _unique(reply: ModelReply, earlier: Iterable[Message], model: object) -> ModelReply:
    """``reply`` with a fresh id for each call whose id is missing or used already (``reply``
    itself when there is none)."""
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


def _checked(reply: ModelReply, model: object) -> tuple[ModelReply, Message, dict[str, Any]]:
    """``reply`` with calls whose arguments are not an object marked as such, its assistant message
    and that message's dict form; or :class:`ModelError` when the JSON rule or the stored message
    form refuses it (named by its path in the message)."""
    for call in reply.tool_calls:
        if not isinstance(call.arguments, dict):
            reply = msgspec.structs.replace(
                reply, tool_calls=[_object_arguments(c) for c in reply.tool_calls]
            )
            break
    try:
        message = reply.to_message()
        data = message.to_dict()
        # One C-level decode into the message type checks what a stored row will read back.
        _message_decoder.decode(encode_json(data))
    except SerializationError as exc:
        raise ModelError(f"model {model!r} returned a reply the run cannot store: {exc}") from None
    except (msgspec.ValidationError, TypeError, ValueError) as exc:
        raise ModelError(f"model {model!r} returned a malformed reply: {exc}") from None
    return reply, message, data


def _object_arguments(call: ToolCall) -> ToolCall:
    """``call`` itself, or, when its arguments are not a JSON object, the call with none and the
    error the model reads instead of the tool's result."""
    if isinstance(call.arguments, dict):
        return call
    error = f"the arguments must be a JSON object, not a {_json_kind(call.arguments)}"
    return msgspec.structs.replace(call, arguments={}, arguments_error=error)


def _json_kind(value: object) -> str:
    kinds = {list: "list", tuple: "list", str: "string", bool: "boolean", int: "number", float: "number"}
    return "null" if value is None else kinds.get(type(value), type(value).__name__)


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
