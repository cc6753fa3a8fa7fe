"""Typed final answers: an agent's ``output_type``, the JSON schema the model is asked for, and the check.

An :class:`OutputSpec` holds the type (a msgspec Struct, a dataclass or a TypedDict) and its JSON
schema. The model is offered it as one more entry of its ``tools``, shaped as the chat-completions
``response_format`` (``{"type": "json_schema", "json_schema": {"name", "schema"}}``): ``OpenAIChat``
sends it as ``response_format``, a ``FunctionModel`` whose function takes the tools sees it there.
A final answer is decoded and validated with msgspec; one that does not validate goes back to the
model as a user message that names the error (:data:`RETRY_PREFIX`), at most :data:`MAX_RETRIES`
times in a row, and the next one fails the run with a ``ModelError`` naming it.
"""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Sequence
from typing import Any, Final

import msgspec

from ..models import Message, ModelError

__all__ = ["MAX_RETRIES", "OUTPUT_TYPE", "RETRY_PREFIX", "OutputSpec", "plain_value"]

#: How many answers in a row may fail to validate and be sent back before the run fails.
MAX_RETRIES: Final = 2
#: How the user message that sends an invalid answer back begins (a re-entry counts them by it).
RETRY_PREFIX: Final = "Your answer is not valid JSON of the output type: "
#: The ``run_end`` snapshot key naming the output type of a run that completed with a typed answer.
OUTPUT_TYPE: Final = "output_type"


class OutputSpec:
    """An agent's ``output_type``: its ``name``, its JSON ``schema``, and the model-facing entry."""

    __slots__ = ("entry", "name", "schema", "type")

    def __init__(self, output_type: Any, *, agent: str) -> None:
        if not (
            (isinstance(output_type, type) and issubclass(output_type, msgspec.Struct))
            or (isinstance(output_type, type) and dataclasses.is_dataclass(output_type))
            or typing.is_typeddict(output_type)
        ):
            raise TypeError(
                f"agent {agent!r}: output_type must be a msgspec Struct, a dataclass or a TypedDict "
                f"class, not {output_type!r}"
            )
        self.type = output_type
        self.name = f"{output_type.__module__}.{output_type.__qualname__}"
        try:
            (root,), components = msgspec.json.schema_components(
                (output_type,), ref_template="#/$defs/{name}"
            )
        except (TypeError, ValueError) as exc:
            raise TypeError(
                f"agent {agent!r}: output_type {self.name} cannot be checked as JSON: {exc}"
            ) from exc
        # The root inline (a response_format schema must be an object), the rest as $defs.
        ref = root.get("$ref", "")
        schema = dict(components.get(ref.rpartition("/")[2], root)) if ref else dict(root)
        if components:
            schema["$defs"] = components
        self.schema: dict[str, Any] = schema
        self.entry: dict[str, Any] = {
            "type": "json_schema",
            "json_schema": {"name": output_type.__name__, "schema": schema},
        }

    def decode(self, text: str) -> Any:
        """The answer ``text`` as the output type; ``msgspec.ValidationError`` or
        ``msgspec.DecodeError`` when it is not."""
        return msgspec.json.decode(text.strip() or "null", type=self.type)

    def check(self, text: str, messages: Sequence[Message], *, agent: str) -> tuple[str | None, str | None]:
        """``(json, None)`` for a valid answer (its canonical JSON), ``(None, retry)`` with the user
        message that sends an invalid one back, or ``ModelError`` once :data:`MAX_RETRIES` answers
        in a row were sent back. ``messages`` is the conversation, the answer included."""
        try:
            value = self.decode(text)
        except (msgspec.ValidationError, msgspec.DecodeError) as exc:
            error = str(exc)
        else:
            return msgspec.json.encode(value).decode(), None
        if _rejections(messages) >= MAX_RETRIES:
            raise ModelError(
                f"agent {agent!r}: the final answer is not valid JSON of {self.name} after "
                f"{MAX_RETRIES + 1} tries: {error}",
                reason="output_type",
            )
        return None, f"{RETRY_PREFIX}{error}. Answer again with only the JSON, matching the schema."


def _rejections(messages: Sequence[Message]) -> int:
    """How many answers in a row at the end of ``messages`` were sent back (before the newest)."""
    count = 0
    index = len(messages) - 2  # the newest message is the answer just checked
    while index >= 1:
        sent_back, answer = messages[index], messages[index - 1]
        if not (sent_back.role == "user" and (sent_back.content or "").startswith(RETRY_PREFIX)):
            break
        if answer.role != "assistant" or answer.tool_calls:
            break
        count += 1
        index -= 2
    return count


def plain_value(output: str | None) -> Any:
    """The JSON of a typed answer read without its type: plain JSON values (dicts, lists, ...)."""
    return None if output is None else msgspec.json.decode(output)
