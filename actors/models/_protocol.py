"""The :class:`Model` protocol: what a run asks of a model, one turn at a time."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

from ._types import Message, ModelReply

__all__ = ["Model"]


@runtime_checkable
class Model(Protocol):
    """A chat model with tool calling.

    ``tools`` are OpenAI-style function tools (``{"type": "function", "function": {"name",
    "description", "parameters"}}``, ``parameters`` a JSON schema). The model must not mutate
    ``messages``. It answers with a final text or with tool calls to run first.
    """

    async def complete(self, messages: Sequence[Message], tools: Sequence[dict[str, Any]] = ()) -> ModelReply:
        """Answer the conversation ``messages``, offered ``tools``."""
        ...
