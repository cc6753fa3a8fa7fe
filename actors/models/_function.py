""":class:`FunctionModel`: the offline, deterministic model, backed by a plain function."""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from ._errors import ModelError
from ._types import Message, ModelReply

__all__ = ["FunctionModel"]

ModelFn = Callable[[list[Message]], "str | ModelReply | Awaitable[str | ModelReply]"]


class FunctionModel:
    """A model whose every turn is ``fn(messages)``, sync or async.

    ``fn`` returns a ``str`` (the final answer) or a :class:`ModelReply` (e.g. with tool calls). It
    gets its own copy of the message list, so it cannot change the run's conversation. Tests and
    examples use it to script a conversation with no network; an exception ``fn`` raises is the
    model failing (the run fails and can be resumed).
    """

    def __init__(self, fn: ModelFn, *, name: str | None = None) -> None:
        if not callable(fn):
            raise TypeError(f"FunctionModel needs a callable, not {type(fn).__name__}")
        self.fn = fn
        self.name = name or getattr(fn, "__qualname__", type(fn).__name__)

    async def complete(self, messages: Sequence[Message], tools: Sequence[dict[str, Any]] = ()) -> ModelReply:
        """Call ``fn`` with a copy of ``messages``; ``tools`` are not shown to it."""
        result: Any = self.fn(list(messages))
        if inspect.isawaitable(result):
            result = await result
        if isinstance(result, str):
            return ModelReply(text=result)
        if isinstance(result, ModelReply):
            return result
        raise ModelError(
            f"FunctionModel {self.name!r} returned a {type(result).__name__}; return a str or a ModelReply"
        )

    def __repr__(self) -> str:
        return f"FunctionModel({self.name!r})"
