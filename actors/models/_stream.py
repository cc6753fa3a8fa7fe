"""Streamed replies: server-sent events read into the same reply a call without streaming returns.

A chat-completions stream is a series of ``data: {chunk}`` events ending with ``data: [DONE]``;
each chunk's ``choices[0].delta`` carries a piece of the answer text, of a refusal, or of a tool
call (a call's pieces share its ``index``: the id and name come first, the arguments in fragments).
:class:`Assembly` joins them into the assistant message a non-streamed reply holds, so
:func:`~._wire.read_message` reads both the same way.

While the text arrives, each piece goes to the :data:`TextSink` bound with :func:`text_sink` (the
run binds one to publish ``TextDelta`` events): ``sink(text, attempt)``, where ``attempt`` counts
the client's attempts at this call from 1, so a reader can drop the partial text of an attempt that
was retried. A sink must not block: it is called on the event loop, between two reads.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from contextvars import ContextVar, Token
from typing import Any

from ._errors import ModelError

__all__ = ["Assembly", "TextSink", "emit_text", "server_events", "text_sink"]

#: Where streamed text goes: ``sink(text, attempt)``.
TextSink = Callable[[str, int], None]

#: The data of the event that ends a stream.
DONE = "[DONE]"

_sink: ContextVar[TextSink | None] = ContextVar("tether_text_sink", default=None)


class text_sink:
    """Send the text a streaming model produces inside this block to ``sink`` (None: nowhere).

    A small class rather than a ``@contextmanager`` generator: it is entered on every model call.
    """

    __slots__ = ("_sink", "_token")

    _token: Token[TextSink | None]

    def __init__(self, sink: TextSink | None) -> None:
        self._sink = sink

    def __enter__(self) -> None:
        self._token = _sink.set(self._sink)

    def __exit__(self, *exc_info: object) -> None:
        _sink.reset(self._token)


def emit_text(text: str, attempt: int) -> None:
    """Hand one piece of answer text to the bound sink, if any."""
    sink = _sink.get()
    if sink is not None and text:
        sink(text, attempt)


async def server_events(lines: AsyncIterator[str]) -> AsyncIterator[str]:
    """The ``data`` of each server-sent event (multi-line data joined by newlines), up to ``[DONE]``.

    Comments (``:``), event names, ids and retry fields are skipped: chat-completions servers put
    everything in ``data``.
    """
    data: list[str] = []
    async for line in lines:
        if line:
            field, _, value = line.partition(":")
            if field == "data":
                data.append(value.removeprefix(" "))
            continue
        if data:
            payload, data = "\n".join(data), []
            yield payload
            if payload.strip() == DONE:
                return
    if data:
        yield "\n".join(data)


class Assembly:
    """The pieces of one streamed reply, joined into the message a non-streamed reply holds."""

    def __init__(self) -> None:
        self._texts: list[str] = []
        self._parts: list[Any] | None = None  # set when a server streams content as parts
        self._refusal: list[str] = []
        self._calls: list[dict[str, Any]] = []
        self._slots: dict[Any, dict[str, Any]] = {}
        self.finish_reason: str | None = None
        self.done = False
        #: The ``usage`` object of the stream (the chunk ``stream_options.include_usage`` adds last).
        self.usage: Any = None

    def feed(self, payload: str, attempt: int) -> None:
        """Take one event's data: a chunk (its text goes to the sink), the end, or a streamed error."""
        if payload.strip() == DONE:
            self.done = True
            return
        try:
            chunk = json.loads(payload)
        except ValueError as exc:
            raise ModelError(f"model server streamed an event that is not JSON: {payload[:500]}") from exc
        if not isinstance(chunk, dict):
            raise ModelError(f"model server streamed an event that is not a chunk: {payload[:500]}")
        if chunk.get("error") is not None:
            error = chunk["error"]
            message = error.get("message") if isinstance(error, dict) else error
            raise ModelError(f"model server streamed an error: {str(message)[:500]}")
        if chunk.get("usage") is not None:
            self.usage = chunk["usage"]
        for choice in chunk.get("choices") or []:
            if not isinstance(choice, dict) or choice.get("index", 0) != 0:
                continue  # only the first choice is read, as without streaming
            delta = choice.get("delta") or {}
            if isinstance(delta, dict):
                self._delta(delta, attempt)
            if choice.get("finish_reason") is not None:
                self.finish_reason = choice["finish_reason"]
                self.done = True

    def _delta(self, delta: dict[str, Any], attempt: int) -> None:
        content = delta.get("content")
        if isinstance(content, str):
            self._text(content, attempt)
        elif isinstance(content, list):
            if self._parts is None:
                self._parts = [{"type": "text", "text": text} for text in self._texts]
            for part in content:
                self._parts.append(part)
                if (
                    isinstance(part, dict)
                    and part.get("type") == "text"
                    and isinstance(part.get("text"), str)
                ):
                    self._texts.append(part["text"])
                    emit_text(part["text"], attempt)
        if isinstance(delta.get("refusal"), str):
            self._refusal.append(delta["refusal"])
        for i, piece in enumerate(delta.get("tool_calls") or []):
            if isinstance(piece, dict):
                self._call_piece(piece, i)
        if isinstance(delta.get("function_call"), dict):  # the legacy shape: one call
            self._call_piece({"index": "function_call", "function": delta["function_call"]}, 0)

    def _text(self, text: str, attempt: int) -> None:
        self._texts.append(text)
        if self._parts is not None:
            self._parts.append({"type": "text", "text": text})
        emit_text(text, attempt)

    def _call_piece(self, piece: dict[str, Any], position: int) -> None:
        """One fragment of a tool call: found by its ``index``; without one, by its id, else the last call."""
        key: Any = piece.get("index")
        if key is None:
            key = (
                ("id", piece["id"])
                if piece.get("id")
                else (self._calls[-1]["key"] if self._calls else position)
            )
        slot = self._slots.get(key)
        if slot is None:
            slot = {"key": key, "id": None, "name": None, "arguments": []}
            self._slots[key] = slot
            self._calls.append(slot)
        if piece.get("id") and not slot["id"]:
            slot["id"] = piece["id"]
        function = piece.get("function") or {}
        if isinstance(function, dict):
            if function.get("name") and not slot["name"]:
                slot["name"] = function["name"]
            arguments = function.get("arguments")
            if isinstance(arguments, str):
                slot["arguments"].append(arguments)
            elif arguments is not None:
                slot["arguments"] = arguments  # a server that sends the whole object at once

    def message(self) -> dict[str, Any]:
        """The assistant message the pieces make, in the shape of a non-streamed reply's ``message``."""
        content: Any = self._parts if self._parts is not None else "".join(self._texts)
        message: dict[str, Any] = {"role": "assistant", "content": content}
        if self._refusal:
            message["refusal"] = "".join(self._refusal)
        calls = []
        for slot in self._calls:
            arguments = slot["arguments"]
            call: dict[str, Any] = {
                "type": "function",
                "function": {
                    "name": slot["name"],
                    "arguments": "".join(arguments) if isinstance(arguments, list) else arguments,
                },
            }
            if slot["id"]:
                call["id"] = slot["id"]
            calls.append(call)
        if calls:
            message["tool_calls"] = calls
        return message
