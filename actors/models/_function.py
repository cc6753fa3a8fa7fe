""":class:`FunctionModel`: the offline, deterministic model, backed by a plain function."""

from __future__ import annotations

import copy
import inspect
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from typing import Any

from ._errors import ModelError
from ._stream import emit_text
from ._types import Message, ModelReply, Usage

__all__ = ["FunctionModel"]

Chunks = Iterator["str | ModelReply"] | AsyncIterator["str | ModelReply"]
ModelFn = Callable[[list[Message]], "str | ModelReply | Chunks | Awaitable[str | ModelReply]"]


class FunctionModel:
    """A model whose every turn is ``fn(messages)``, sync or async.

    ``fn`` returns a ``str`` (the final answer) or a :class:`ModelReply` (e.g. with tool calls). It
    may also be a generator, sync or async, that yields the answer in pieces, as a streaming model
    does: each ``str`` is a piece of text (handed to the bound text sink as it comes), a yielded
    ``ModelReply`` adds its text, its tool calls and its ``usage``. ``fn`` gets its own copy of the message list,
    so it cannot change the run's conversation. Tests and examples use it to script a conversation
    with no network; an exception ``fn`` raises is the model failing (the run fails and can be
    resumed).

    A ``fn`` that takes a second argument, ``fn(messages, tools)``, is also given (a copy of) what
    the model is offered: each tool's OpenAI-style function schema, and for an agent with an
    ``output_type`` a last entry ``{"type": "json_schema", "json_schema": {"name", "schema"}}``,
    the ``response_format`` an OpenAI-compatible server is sent.
    """

    def __init__(self, fn: ModelFn, *, name: str | None = None) -> None:
        if not callable(fn):
            raise TypeError(f"FunctionModel needs a callable, not {type(fn).__name__}")
        self.fn = fn
        self.name = name or getattr(fn, "__qualname__", type(fn).__name__)
        self._with_tools = _takes_tools(fn)

    async def complete(self, messages: Sequence[Message], tools: Sequence[dict[str, Any]] = ()) -> ModelReply:
        """Call ``fn`` with a copy of ``messages`` (and of ``tools``, when it takes them)."""
        fn: Any = self.fn
        result: Any = (
            fn(list(messages), copy.deepcopy(list(tools))) if self._with_tools else fn(list(messages))
        )
        if not isinstance(result, str | ModelReply) and inspect.isawaitable(result):
            result = await result
        if isinstance(result, str):
            return ModelReply(text=result)
        if isinstance(result, ModelReply):
            return result
        if inspect.isgenerator(result):
            return self._joined(list(_pieces(result)))
        if inspect.isasyncgen(result):
            return self._joined([piece async for piece in _async_pieces(result)])
        raise ModelError(
            f"FunctionModel {self.name!r} returned a {type(result).__name__}; return a str or a ModelReply"
        )

    def _joined(self, pieces: list[Any]) -> ModelReply:
        texts: list[str] = []
        calls = []
        usage: Usage | None = None
        for piece in pieces:
            if isinstance(piece, ModelReply):
                texts.append(piece.text)
                calls.extend(piece.tool_calls)
                if piece.usage is not None:
                    usage = piece.usage if usage is None else usage + piece.usage
            else:
                texts.append(piece)
        return ModelReply(text="".join(texts), tool_calls=calls, usage=usage)

    def __repr__(self) -> str:
        return f"FunctionModel({self.name!r})"


def _takes_tools(fn: Callable[..., Any]) -> bool:
    """Whether ``fn`` takes a second positional argument (or one named ``tools``): the tools."""
    try:
        parameters = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        return False
    if any(p.name == "tools" for p in parameters):
        return True
    positional = [
        p
        for p in parameters
        if p.kind in (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
        and p.default is inspect.Parameter.empty
    ]
    return len(positional) >= 2 or any(p.kind is inspect.Parameter.VAR_POSITIONAL for p in parameters)


def _check(piece: object) -> str | ModelReply:
    if isinstance(piece, str):
        emit_text(piece, 1)
        return piece
    if isinstance(piece, ModelReply):
        emit_text(piece.text, 1)
        return piece
    raise ModelError(
        f"a FunctionModel generator yielded a {type(piece).__name__}; yield a str or a ModelReply"
    )


def _pieces(chunks: Iterator[Any]) -> Iterator[str | ModelReply]:
    for piece in chunks:
        yield _check(piece)


async def _async_pieces(chunks: AsyncIterator[Any]) -> AsyncIterator[str | ModelReply]:
    async for piece in chunks:
        yield _check(piece)
