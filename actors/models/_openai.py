""":class:`OpenAIChat`: a client for OpenAI-compatible chat-completions servers, with tool calling.

It speaks ``POST {base_url}/chat/completions`` over one lazily created ``httpx.AsyncClient``.
A 408, 409, 429, 5xx or a connection error is retried with bounded exponential backoff (honouring a
``Retry-After`` of seconds, capped); any other 4xx, or retries exhausted, raises :class:`ModelError`.
"""

from __future__ import annotations

import json
import random
from collections.abc import Sequence
from types import TracebackType
from typing import Any

import anyio
import httpx

from ._errors import ModelError
from ._types import Message, ModelReply, ToolCall

__all__ = ["OpenAIChat"]

_RETRY_STATUS = frozenset({408, 409, 429})


def _retryable(status: int) -> bool:
    return status in _RETRY_STATUS or status >= 500


class OpenAIChat:
    """A chat-completions model at ``base_url`` (e.g. ``https://api.openai.com/v1``).

    ``timeout`` bounds each HTTP attempt; ``max_retries`` is how many times a retryable failure is
    tried again (so at most ``max_retries + 1`` attempts); the wait before retry *n* is
    ``backoff * 2**n`` seconds with jitter, at most ``max_backoff``. ``extra`` is merged into every
    request body (e.g. ``{"temperature": 0}``). Call :meth:`aclose` (or use ``async with``) when done.
    """

    def __init__(
        self,
        model: str,
        *,
        base_url: str,
        api_key: str | None = None,
        timeout: float = 60.0,
        max_retries: int = 3,
        backoff: float = 0.5,
        max_backoff: float = 8.0,
        extra: dict[str, Any] | None = None,
    ) -> None:
        if max_retries < 0:
            raise ValueError("max_retries must be >= 0")
        self.model = model
        self.base_url = base_url.rstrip("/")
        self.api_key = api_key
        self.timeout = timeout
        self.max_retries = max_retries
        self.backoff = backoff
        self.max_backoff = max_backoff
        self.extra = dict(extra or {})
        self._client: httpx.AsyncClient | None = None

    def _http(self) -> httpx.AsyncClient:
        if self._client is None:
            headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
            self._client = httpx.AsyncClient(headers=headers, timeout=httpx.Timeout(self.timeout))
        return self._client

    async def aclose(self) -> None:
        """Close the HTTP client (a later call opens a new one)."""
        client, self._client = self._client, None
        if client is not None:
            await client.aclose()

    async def __aenter__(self) -> OpenAIChat:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    async def complete(self, messages: Sequence[Message], tools: Sequence[dict[str, Any]] = ()) -> ModelReply:
        """One chat-completions call: the conversation and the offered tools in, a reply out."""
        body: dict[str, Any] = {"model": self.model, "messages": [to_openai(m) for m in messages]}
        if tools:
            body["tools"] = list(tools)
        body.update(self.extra)
        data = await self._post("/chat/completions", body)
        return from_openai(data)

    async def _post(self, path: str, body: dict[str, Any]) -> Any:
        url = self.base_url + path
        attempt = 0
        while True:
            delay: float | None = None
            try:
                response = await self._http().post(url, json=body)
            except httpx.TransportError as exc:
                if attempt >= self.max_retries:
                    raise ModelError(
                        f"model server at {url} unreachable after {attempt + 1} attempts: "
                        f"{type(exc).__name__}: {exc}"
                    ) from exc
            else:
                if response.is_success:
                    try:
                        return response.json()
                    except ValueError as exc:
                        raise ModelError(
                            f"model server at {url} sent a reply that is not JSON",
                            status_code=response.status_code,
                            body=response.text[:2000],
                        ) from exc
                status = response.status_code
                if not _retryable(status) or attempt >= self.max_retries:
                    tried = f" after {attempt + 1} attempts" if _retryable(status) else ""
                    raise ModelError(
                        f"model server at {url} answered {status}{tried}: {_error_text(response)}",
                        status_code=status,
                        body=response.text[:2000],
                    )
                delay = _retry_after(response)
            if delay is None:
                delay = self.backoff * 2**attempt * (0.5 + random.random() / 2)
            await anyio.sleep(min(delay, self.max_backoff))
            attempt += 1


def _retry_after(response: httpx.Response) -> float | None:
    value = response.headers.get("retry-after")
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        return None


def _error_text(response: httpx.Response) -> str:
    try:
        data = response.json()
    except ValueError:
        return response.text[:500]
    if isinstance(data, dict):
        error = data.get("error")
        if isinstance(error, dict) and isinstance(error.get("message"), str):
            return str(error["message"])
        if isinstance(error, str):
            return error
    return response.text[:500]


def to_openai(message: Message) -> dict[str, Any]:
    """A message in the chat-completions request shape."""
    out: dict[str, Any] = {"role": message.role, "content": message.content}
    if message.role == "assistant" and message.tool_calls:
        out["content"] = message.content or None
        out["tool_calls"] = [
            {
                "id": call.id,
                "type": "function",
                "function": {"name": call.name, "arguments": json.dumps(call.arguments)},
            }
            for call in message.tool_calls
        ]
    if message.role == "tool":
        out["tool_call_id"] = message.tool_call_id
    elif message.name is not None:
        out["name"] = message.name
    return out


def from_openai(data: Any) -> ModelReply:
    """A chat-completions response body as a :class:`ModelReply` (the first choice)."""
    try:
        message = data["choices"][0]["message"]
        text = message.get("content") or ""
        raw_calls = message.get("tool_calls") or []
        calls = [_tool_call(raw) for raw in raw_calls]
    except (KeyError, IndexError, TypeError, AttributeError) as exc:
        raise ModelError(f"model reply is not a chat completion: {str(data)[:500]}") from exc
    if not isinstance(text, str):
        raise ModelError(f"model reply content is a {type(text).__name__}, not a str")
    return ModelReply(text=text, tool_calls=calls)


def _tool_call(raw: dict[str, Any]) -> ToolCall:
    function = raw["function"]
    name = function["name"]
    arguments = function.get("arguments") or "{}"
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except ValueError as exc:
            raise ModelError(
                f"model called tool {name!r} with arguments that are not JSON: {arguments[:500]}"
            ) from exc
    if not isinstance(arguments, dict):
        raise ModelError(f"model called tool {name!r} with arguments that are not a JSON object")
    if raw.get("id"):
        return ToolCall(str(name), arguments, str(raw["id"]))
    return ToolCall(str(name), arguments)
