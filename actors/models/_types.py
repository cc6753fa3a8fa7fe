"""The conversation types every model speaks: :class:`Message`, :class:`ToolCall`, :class:`ModelReply`.

They are frozen msgspec Structs. Their dict forms are what a run stores in
``state_snapshot["messages"]``: plain JSON, with a fixed key order and default fields left out, so
one message always has one dict form. :class:`Transcript` keeps each message's dict built once, so
the rows of a run share the very same dict objects (the store's message log compares prefixes by
identity first).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from typing import Any, Final

import msgspec

__all__ = ["ROLES", "Message", "ModelReply", "ToolCall", "Transcript", "Usage", "new_call_id"]

#: The roles a message may have.
ROLES: Final = frozenset({"system", "user", "assistant", "tool"})


def new_call_id() -> str:
    """A tool-call id unique across processes: ``call_`` and 128 random bits in hex (a uuid4's
    entropy without building a ``UUID``)."""
    return "call_" + os.urandom(16).hex()


class ToolCall(msgspec.Struct, frozen=True):
    """A model's request to run the tool ``name`` with ``arguments`` (a JSON object).

    A client that reads the arguments from text keeps that text in ``arguments_text``, so the call is
    sent back to the server exactly as the model wrote it (provider-side prefix caches then match).
    ``arguments_error`` says why the model's arguments could not be read (not JSON, NaN, not an
    object...): the run does not call the tool and the model reads that error as the tool's result.
    """

    name: str
    arguments: dict[str, Any]
    id: str = msgspec.field(default_factory=new_call_id)
    arguments_text: str | None = None
    arguments_error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """The JSON form: ``{"id", "name", "arguments"}``, and the two optional fields when set."""
        out: dict[str, Any] = {"id": self.id, "name": self.name, "arguments": self.arguments}
        if self.arguments_text is not None:
            out["arguments_text"] = self.arguments_text
        if self.arguments_error is not None:
            out["arguments_error"] = self.arguments_error
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ToolCall:
        """Read :meth:`to_dict`'s form back (a missing ``id`` gets a fresh one)."""
        return msgspec.convert(data, cls)


class Message(msgspec.Struct, frozen=True):
    """One message of a conversation. ``role`` is ``"system"``, ``"user"``, ``"assistant"`` or ``"tool"``.

    An assistant message may carry ``tool_calls``; a tool message names the call it answers in
    ``tool_call_id`` and the tool in ``name``.
    """

    role: str
    content: str
    tool_calls: list[ToolCall] = []
    tool_call_id: str | None = None
    name: str | None = None

    def __post_init__(self) -> None:
        if self.role not in ROLES:
            raise ValueError(f"message role must be one of {sorted(ROLES)}, not {self.role!r}")
        if not isinstance(self.content, str):
            raise TypeError(f"message content must be a str, not {type(self.content).__name__}")

    def to_dict(self) -> dict[str, Any]:
        """The canonical JSON form: ``role`` and ``content`` always, the other fields only when set."""
        out: dict[str, Any] = {"role": self.role, "content": self.content}
        if self.tool_calls:
            out["tool_calls"] = [call.to_dict() for call in self.tool_calls]
        if self.tool_call_id is not None:
            out["tool_call_id"] = self.tool_call_id
        if self.name is not None:
            out["name"] = self.name
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Message:
        """Read :meth:`to_dict`'s form back; raises ``msgspec.ValidationError`` on a malformed dict."""
        return msgspec.convert(data, cls)


class Usage(msgspec.Struct, frozen=True, kw_only=True):
    """Tokens a model call was billed for: ``input_tokens`` read (the prompt) and ``output_tokens``
    generated. Usages add up (``a + b``), which is how a run sums its calls."""

    input_tokens: int = 0
    output_tokens: int = 0

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            input_tokens=self.input_tokens + other.input_tokens,
            output_tokens=self.output_tokens + other.output_tokens,
        )

    def __bool__(self) -> bool:
        return bool(self.input_tokens or self.output_tokens)


class ModelReply(msgspec.Struct, frozen=True):
    """What a model answers: a final ``text``, or ``tool_calls`` to run first (with optional text),
    and the ``usage`` the call was billed for, when the model reports it."""

    text: str = ""
    tool_calls: list[ToolCall] = []
    usage: Usage | None = None

    def to_message(self) -> Message:
        """The assistant message that records this reply in the conversation."""
        return Message("assistant", self.text, list(self.tool_calls))


class Transcript:
    """A conversation kept as messages and, in lockstep, their dict forms, each built once.

    :meth:`snapshot` returns a new list of the same dict objects, which is what a row's
    ``state_snapshot["messages"]`` should hold: rows then share their messages by identity.
    Do not mutate the dicts.
    """

    __slots__ = ("_dicts", "_messages")

    def __init__(self, messages: Iterable[Message] = ()) -> None:
        self._messages: list[Message] = []
        self._dicts: list[dict[str, Any]] = []
        self.extend(messages)

    @classmethod
    def from_dicts(cls, dicts: Iterable[dict[str, Any]]) -> Transcript:
        """Rebuild from stored dict forms, keeping the given dict objects."""
        transcript = cls()
        for data in dicts:
            transcript._messages.append(Message.from_dict(data))
            transcript._dicts.append(data)
        return transcript

    def append(self, message: Message, data: dict[str, Any] | None = None) -> None:
        """Add one message at the end (``data``: its dict form, when the caller built it already)."""
        self._messages.append(message)
        self._dicts.append(message.to_dict() if data is None else data)

    def extend(self, messages: Iterable[Message]) -> None:
        """Add messages at the end, in order."""
        for message in messages:
            self.append(message)

    @property
    def messages(self) -> list[Message]:
        """A copy of the message list (the messages themselves are immutable)."""
        return list(self._messages)

    def snapshot(self) -> list[dict[str, Any]]:
        """A new list of the (shared) dict forms, for a row's ``state_snapshot``."""
        return list(self._dicts)

    def __len__(self) -> int:
        return len(self._messages)

    def __iter__(self) -> Iterator[Message]:
        return iter(list(self._messages))
