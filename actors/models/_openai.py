""":class:`OpenAIChat`: a client for OpenAI-compatible chat-completions servers, with tool calling.

It speaks ``POST {base_url}/chat/completions`` over one lazily created ``httpx.AsyncClient`` that
follows redirects (a 307/308 keeps the method and the body). The body and the reply shapes are in
:mod:`._wire`; when to retry and how long to wait, in :mod:`._retry`.
"""

from __future__ import annotations

import math
import os
from collections.abc import Awaitable, Callable, Mapping, Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Any

import anyio
import msgspec

from ._errors import ModelError
from ._retry import MAX_SERVER_WAIT, backoff_delay, server_wait, should_retry
from ._stream import Assembly, server_events
from ._types import Message, ModelReply
from ._wire import read_completion, read_message, read_usage, request_body, server_message

if TYPE_CHECKING:  # imported where a call first needs it (see ``_http``)
    import httpx

__all__ = ["OpenAIChat"]

#: Where ``base_url=None`` goes when ``OPENAI_BASE_URL`` is not set either.
DEFAULT_BASE_URL = "https://api.openai.com/v1"
_JSON = {"content-type": "application/json"}
_NOT_RETRIED = (
    "; a read timeout is not retried unless retry_read_timeouts=True (the server may still be generating)"
)


class OpenAIChat:
    """A chat-completions model at ``base_url`` (default ``$OPENAI_BASE_URL``, else OpenAI's API).

    ``api_key`` defaults to ``$OPENAI_API_KEY`` (no key, no ``Authorization`` header: local servers
    need none). ``timeout`` is the read timeout (how long the server may stay silent; a generation
    that is not streamed is silent until it is done), ``connect_timeout`` the connect timeout;
    ``deadline`` (seconds, default none) bounds the whole call, retries and waits included.

    A 408, 409, 429, 5xx or a connection failure is tried again, at most ``max_retries`` times, after
    the wait the server asks for (``retry-after-ms``, ``Retry-After``; up to 120 s, a longer one fails
    the call at once) or after ``backoff * 2**n`` seconds with jitter (at most ``max_backoff``);
    ``x-should-retry`` overrides the status. A read timeout is not tried again unless
    ``retry_read_timeouts`` (the server may still be generating: a retry pays for it twice).

    A refusal or a ``content_filter`` stop raises :class:`ModelError` naming it; so does a
    ``length`` stop, unless ``accept_truncated`` (then the cut-off text is the answer and cut-off
    tool arguments are a tool error the model reads). ``default_headers`` and ``default_query`` go
    with every request (Azure's ``api-key`` and ``api-version``, OpenAI's ``OpenAI-Organization``);
    ``extra`` is merged into every request body (e.g. ``{"temperature": 0}``). With ``stream=True``
    the reply is read from server-sent events and its text handed on as it arrives
    (:mod:`._stream`). Call :meth:`aclose` (or use ``async with``) when done.
    """

    def __init__(
        self,
        model: str,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        timeout: float = 600.0,
        connect_timeout: float = 10.0,
        max_retries: int = 3,
        stream: bool = False,
        default_headers: Mapping[str, str] | None = None,
        default_query: Mapping[str, str] | None = None,
        deadline: float | None = None,
        retry_read_timeouts: bool = False,
        accept_truncated: bool = False,
        backoff: float = 0.5,
        max_backoff: float = 8.0,
        extra: dict[str, Any] | None = None,
    ) -> None:
        if max_retries < 0:
            raise ValueError(f"max_retries must be >= 0, not {max_retries!r}")
        for label, value in (
            ("timeout", timeout),
            ("connect_timeout", connect_timeout),
            ("deadline", deadline),
        ):
            if value is not None and not value > 0:
                raise ValueError(f"{label} must be > 0 seconds, not {value!r}")
        base = base_url or os.environ.get("OPENAI_BASE_URL") or DEFAULT_BASE_URL
        self.model = model
        self.base_url = base.rstrip("/")
        self.api_key = api_key if api_key is not None else os.environ.get("OPENAI_API_KEY") or None
        self.timeout = timeout
        self.connect_timeout = connect_timeout
        self.max_retries = max_retries
        self.stream = stream
        self.default_headers = dict(default_headers or {})
        self.default_query = dict(default_query or {})
        self.deadline = deadline
        self.retry_read_timeouts = retry_read_timeouts
        self.accept_truncated = accept_truncated
        self.backoff = backoff
        self.max_backoff = max_backoff
        self.extra = dict(extra or {})
        self._client: httpx.AsyncClient | None = None

    def _http(self) -> httpx.AsyncClient:
        # httpx is imported here, on the first call, not with the package: with what it pulls in,
        # it was about a sixth of the objects an ``import actors`` leaves for every full collection
        # of the garbage collector to walk, and a good part of the import time of every process.
        import httpx

        if self._client is None:
            headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
            headers.update(self.default_headers)
            self._client = httpx.AsyncClient(
                headers=headers,
                params=self.default_query,
                timeout=httpx.Timeout(self.timeout, connect=self.connect_timeout),
                follow_redirects=True,
            )
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
        """One chat-completions call: the conversation and the offered tools in, a reply out.

        With ``stream=True`` the reply is read from server-sent events as it is generated, and its
        text goes to the bound text sink (:func:`~._stream.text_sink`) piece by piece; the reply is
        the one the same answer gives without streaming.
        """
        body = request_body(self.model, messages, tools, self.extra, stream=self.stream)
        return await self._post("/chat/completions", body, self._read_stream if self.stream else self._read)

    async def _read(self, response: httpx.Response, attempt: int) -> ModelReply:
        await response.aread()
        return read_completion(_json_of(response), accept_truncated=self.accept_truncated)

    async def _read_stream(self, response: httpx.Response, attempt: int) -> ModelReply:
        assembly = Assembly()
        async for payload in server_events(response.aiter_lines()):
            assembly.feed(payload, attempt)
        if not assembly.done:
            raise ModelError(
                f"model server at {response.request.url} ended its stream before the answer was "
                "finished (no finish_reason, no [DONE])"
            )
        reply = read_message(
            assembly.message(), assembly.finish_reason, accept_truncated=self.accept_truncated
        )
        usage = read_usage(assembly.usage)
        return reply if usage is None else msgspec.structs.replace(reply, usage=usage)

    async def _post(
        self, path: str, body: bytes, read: Callable[[httpx.Response, int], Awaitable[ModelReply]]
    ) -> ModelReply:
        """POST ``body`` and ``read`` the reply, retrying as :mod:`._retry` says within the deadline."""
        import httpx  # imported by ``_http`` already: a lookup

        url = self.base_url + path
        started = anyio.current_time()
        deadline = math.inf if self.deadline is None else started + self.deadline
        attempt = 0
        while True:
            attempt += 1
            wait: float | None = None
            try:
                with anyio.fail_after(deadline - anyio.current_time() if self.deadline else None):
                    request = self._http().stream("POST", url, content=body, headers=_JSON)
                    async with request as response:
                        if response.is_success:
                            return await read(response, attempt)
                        await response.aread()
            except TimeoutError:
                raise ModelError(
                    f"model server at {url} timed out: the call's deadline of {self.deadline:g} s "
                    f"passed during attempt {attempt}"
                ) from None
            except httpx.ReadTimeout as exc:
                if not self.retry_read_timeouts or attempt > self.max_retries:
                    hint = "" if self.retry_read_timeouts else _NOT_RETRIED
                    raise ModelError(
                        f"model server at {url} timed out: no answer within the read timeout of "
                        f"{self.timeout:g} s, after {_attempts(attempt)} ({_seconds(started)} in all){hint}"
                    ) from exc
            except httpx.TransportError as exc:
                if attempt > self.max_retries:
                    raise ModelError(f"model server at {url} {self._failure(exc, attempt, started)}") from exc
            else:
                if not should_retry(response) or attempt > self.max_retries:
                    raise _refused(response, url, attempt)
                wait = server_wait(response.headers)
                if wait is not None and wait > MAX_SERVER_WAIT:
                    raise _refused(
                        response,
                        url,
                        attempt,
                        f"; it asks to wait {wait:g} s, more than the {MAX_SERVER_WAIT:g} s a client waits",
                    )
                if wait is not None and wait <= 0:
                    wait = None
            if wait is None:
                wait = backoff_delay(attempt - 1, self.backoff, self.max_backoff)
            if anyio.current_time() + wait > deadline:
                raise ModelError(
                    f"model server at {url} timed out: waiting {wait:g} s before attempt {attempt + 1} "
                    f"would pass the call's deadline of {self.deadline:g} s"
                )
            await anyio.sleep(wait)

    def _failure(self, exc: httpx.TransportError, attempt: int, started: float) -> str:
        """How the last attempt failed to get an answer, after how many attempts and how long."""
        import httpx  # imported by ``_http`` already: a lookup

        tried = f"after {_attempts(attempt)} ({_seconds(started)} in all)"
        if isinstance(exc, httpx.ConnectTimeout):
            return (
                f"timed out: no connection within the connect timeout of {self.connect_timeout:g} s, {tried}"
            )
        what = "timed out" if isinstance(exc, httpx.TimeoutException) else "unreachable"
        return f"{what} {tried}: {type(exc).__name__}: {str(exc) or 'no detail'}"


def _attempts(n: int) -> str:
    return f"{n} attempt" if n == 1 else f"{n} attempts"


def _seconds(started: float) -> str:
    return f"{anyio.current_time() - started:.1f} s"


def _json_of(response: httpx.Response) -> Any:
    try:
        return response.json()
    except ValueError as exc:
        raise ModelError(
            f"model server at {response.request.url} sent a reply that is not JSON",
            status_code=response.status_code,
            body=response.text[:2000],
        ) from exc


def _refused(response: httpx.Response, url: str, attempt: int, note: str = "") -> ModelError:
    status = response.status_code
    tried = f" after {_attempts(attempt)}" if attempt > 1 else ""
    return ModelError(
        f"model server at {url} answered {status}{tried}: {_error_text(response)}{note}",
        status_code=status,
        body=response.text[:2000],
    )


def _error_text(response: httpx.Response) -> str:
    try:
        message = server_message(response.json())
    except ValueError:
        message = None
    return response.text[:500] if message is None else message
