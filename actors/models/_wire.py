"""The chat-completions wire shapes: the request body :class:`~._openai.OpenAIChat` sends, the reply it reads.

The request is what the official ``openai`` SDK sends for the same conversation, byte for byte:
compact JSON, non-ASCII as is, keys in the SDK documentation's order, a tool call's arguments as the
model wrote them. A reply is read as servers really send it: ``content`` as a string or as a list
of parts, ``tool_calls`` or a legacy ``function_call``, arguments as a JSON string or an object,
and ``finish_reason`` / ``refusal`` saying why it ended.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import msgspec

from stores import SerializationError, encode_json

from .._core._log import tether_logger
from ._errors import ModelError
from ._types import Message, ModelReply, ToolCall, Usage

__all__ = [
    "read_arguments",
    "read_completion",
    "read_message",
    "read_usage",
    "request_body",
    "server_message",
    "to_wire",
]

#: Body keys that only make sense with tools; a request without tools leaves them out.
_TOOL_KEYS = ("tool_choice", "parallel_tool_calls")
_log = tether_logger()


def request_body(
    model: str,
    messages: Sequence[Message],
    tools: Sequence[dict[str, Any]],
    extra: dict[str, Any],
    *,
    stream: bool = False,
) -> bytes:
    """The JSON body of one chat-completions request (``extra`` merged in last). An entry of
    ``tools`` of type ``json_schema`` (an agent's ``output_type``) is sent as ``response_format``."""
    body: dict[str, Any] = {"model": model, "messages": [to_wire(m) for m in messages]}
    formats = [t for t in tools if t.get("type") == "json_schema"]
    if formats:
        tools = [t for t in tools if t.get("type") != "json_schema"]
    if tools:
        body["tools"] = list(tools)
    if formats:
        body["response_format"] = formats[-1]
    if stream:
        body["stream"] = True
        body["stream_options"] = {"include_usage": True}  # the last chunk carries the usage
    body.update(extra)
    if not tools:
        for key in _TOOL_KEYS:
            body.pop(key, None)
    return json.dumps(body, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode()


def to_wire(message: Message) -> dict[str, Any]:
    """A message in the chat-completions request shape."""
    if message.role == "tool":
        return {"role": "tool", "tool_call_id": message.tool_call_id, "content": message.content}
    out: dict[str, Any] = {"role": message.role, "content": message.content}
    if message.role == "assistant" and message.tool_calls:
        out["content"] = message.content or None
        out["tool_calls"] = [
            {
                "id": call.id,
                "type": "function",
                "function": {"name": call.name, "arguments": _arguments_text(call)},
            }
            for call in message.tool_calls
        ]
    if message.name is not None:
        out["name"] = message.name
    return out


def _arguments_text(call: ToolCall) -> str:
    if call.arguments_text is not None:
        return call.arguments_text
    return json.dumps(call.arguments, ensure_ascii=False, separators=(",", ":"))


def read_completion(data: Any, *, accept_truncated: bool = False) -> ModelReply:
    """A chat-completions response body as a :class:`ModelReply` (its first choice)."""
    try:
        choice = data["choices"][0]
        message = choice["message"]
        if not isinstance(message, dict):
            raise TypeError(message)
    except (KeyError, IndexError, TypeError) as exc:
        raise ModelError(f"model reply is not a chat completion: {_error_of(data)}") from exc
    reply = read_message(message, choice.get("finish_reason"), accept_truncated=accept_truncated)
    usage = read_usage(data.get("usage"))
    return reply if usage is None else msgspec.structs.replace(reply, usage=usage)


def read_usage(raw: Any) -> Usage | None:
    """A reply's ``usage`` object as :class:`Usage` (``prompt_tokens``/``completion_tokens``, or the
    ``input_tokens``/``output_tokens`` some servers send); None when it holds neither count."""
    if not isinstance(raw, dict):
        return None
    tokens = []
    for names in (("prompt_tokens", "input_tokens"), ("completion_tokens", "output_tokens")):
        value = next((raw[n] for n in names if n in raw), None)
        tokens.append(value if type(value) is int and value >= 0 else None)
    if tokens == [None, None]:
        return None
    return Usage(input_tokens=tokens[0] or 0, output_tokens=tokens[1] or 0)


def read_message(message: dict[str, Any], finish_reason: Any, *, accept_truncated: bool) -> ModelReply:
    """One choice's assistant message and ``finish_reason`` as a reply, or the :class:`ModelError` it means."""
    text, refusal = _content(message.get("content"))
    refusal = message.get("refusal") or refusal
    if refusal:
        raise _ended("refusal", f"the model refused to answer: {str(refusal)[:500]}")
    if finish_reason == "content_filter":
        raise _ended(
            "content_filter",
            "the server's content filter stopped the answer (finish_reason 'content_filter')",
        )
    if finish_reason == "length" and not accept_truncated:
        raise _ended(
            "length",
            "the answer was cut off at the token limit (finish_reason 'length'); "
            "raise max_tokens, or pass accept_truncated=True to take a cut-off answer",
        )
    raw_calls = message.get("tool_calls") or []
    if not raw_calls and isinstance(message.get("function_call"), dict):
        raw_calls = [{"function": message["function_call"]}]  # the legacy shape
    if not isinstance(raw_calls, list):
        raise ModelError(f"model reply's tool_calls is a {type(raw_calls).__name__}, not a list")
    return ModelReply(text=text, tool_calls=[_tool_call(raw) for raw in raw_calls])


def _ended(reason: str, message: str) -> ModelError:
    _log.warning("model reply not usable", reason=reason, detail=message)
    return ModelError(message, reason=reason)


def _content(content: Any) -> tuple[str, str | None]:
    """The answer's text and a refusal part's text: a string, or the text parts of a list joined."""
    if content is None:
        return "", None
    if isinstance(content, str):
        return content, None
    if not isinstance(content, list):
        raise ModelError(
            f"model reply content is a {type(content).__name__}, not a string or a list of parts"
        )
    texts: list[str] = []
    refusal: str | None = None
    left_out: list[str] = []
    for part in content:
        kind = part.get("type") if isinstance(part, dict) else type(part).__name__
        if kind == "text" and isinstance(part.get("text"), str):
            texts.append(part["text"])
        elif kind == "refusal" and isinstance(part.get("refusal"), str):
            refusal = part["refusal"]
        else:
            left_out.append(str(kind))
    if left_out:
        _log.info("content parts left out of the answer", types=", ".join(left_out))
    return "".join(texts), refusal


def _tool_call(raw: Any) -> ToolCall:
    try:
        function = raw["function"]
        name = function["name"]
    except (KeyError, TypeError) as exc:
        raise ModelError(f"model reply has a tool call without a function name: {str(raw)[:500]}") from exc
    if not isinstance(name, str) or not name:
        raise ModelError(f"model reply has a tool call whose name is {name!r}")
    call_id = raw.get("id") if isinstance(raw.get("id"), str) else None
    arguments, text, error = read_arguments(function.get("arguments"))
    kwargs: dict[str, Any] = {"arguments_text": text, "arguments_error": error}
    if call_id:
        kwargs["id"] = call_id
    return ToolCall(name, arguments, **kwargs)


def read_arguments(raw: Any) -> tuple[dict[str, Any], str | None, str | None]:
    """A call's arguments as the model wrote them: ``(arguments, text, error)``.

    ``text`` is the JSON text to send back (None when the server sent an object); ``error`` says why
    the arguments cannot be used (then ``arguments`` is ``{}``): not JSON, NaN or infinity, not an
    object, or a value the JSON rule refuses. The model reads that error as the tool's result.
    """
    if raw is None or raw == "":
        return {}, None, None
    if isinstance(raw, dict):
        text = None
        value: Any = raw
    elif isinstance(raw, str):
        text = _storable(raw)
        try:
            value = msgspec.json.decode(raw)
        except (msgspec.DecodeError, RecursionError) as exc:
            return {}, text, _why_not_json(raw, exc)
    else:
        return {}, None, f"the arguments are a JSON {type(raw).__name__}, not an object"
    if not isinstance(value, dict):
        kind = {list: "list", str: "string", bool: "boolean"}.get(type(value), type(value).__name__)
        return {}, text, f"the arguments are a JSON {kind}, not an object"
    try:
        encode_json(value)
    except (SerializationError, UnicodeError) as exc:
        return {}, text, f"the arguments cannot be kept as JSON: {exc}"
    return value, text, None


def _why_not_json(raw: str, exc: BaseException) -> str:
    if isinstance(exc, RecursionError):
        return "the arguments are nested too deeply to read"
    try:
        json.loads(raw)
    except (ValueError, RecursionError):
        return f"the arguments are not valid JSON ({exc}): {raw[:200]}"
    return f"the arguments hold NaN or infinity, which JSON does not allow: {raw[:200]}"


def _storable(text: str) -> str | None:
    """``text`` if a row can keep it (no NUL, no lone surrogate), else None (it is not sent back then)."""
    if "\x00" in text:
        return None
    try:
        text.encode()
    except UnicodeEncodeError:
        return None
    return text


def server_message(data: Any) -> str | None:
    """The message of an ``{"error": {"message": ...}}`` (or ``{"error": "..."}``) body, if it is one."""
    if isinstance(data, dict):
        error = data.get("error")
        if isinstance(error, dict) and isinstance(error.get("message"), str):
            return str(error["message"])
        if isinstance(error, str):
            return error
    return None


def _error_of(data: Any) -> str:
    """What a body that is not a completion says: its ``error`` message if it has one."""
    message = server_message(data)
    return str(data)[:500] if message is None else f"the server says: {message[:500]}"
