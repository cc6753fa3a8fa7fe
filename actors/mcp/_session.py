"""One open connection to an MCP server: its tools as a run offers them, and their calls.

A call's result is what the model reads: the text of its content blocks (another block as its
JSON), a tool error when the server says ``isError``; a call that fails (the server gone, a
protocol error, past the server's ``timeout``) is a tool error too, never a failed run.

Two things differ from a plain tool call, both for durability:

- **At most once.** A tool the server marks ``destructiveHint: true`` without ``idempotentHint:
  true`` (and not ``readOnlyHint: true``) is called through ``@idempotent(at_most_once=True)``:
  an intent is stored before the call and the result after it, so a step re-entered after a crash
  in between does not call it again; the model reads ``SideEffectInDoubt`` instead.
- **Elicitation is a pause.** When the server asks the user a question (an MCP elicitation) on a
  first pass, the call is stopped and the run pauses (``interrupt("elicitation", context)`` with the
  question in the context). The resumed run calls the tool again, and the question is answered
  with the ``Resume``: ``accept`` with its ``metadata`` as the content when approved, else
  ``decline``. A tool that asks several questions in one call gets the same answer to each.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any, Final

import anyio
import httpx2
import mcp_types as types
from mcp import Client, StdioServerParameters
from mcp.client.session import ClientRequestContext
from mcp.client.streamable_http import streamable_http_client

from stores import canonical_json
from stores import encode_json as encode
from stores import normalize_json as normalize

from .._durable._context import current_context
from .._durable._errors import SideEffectInDoubt
from .._durable._idempotent import idempotent
from .._durable._interrupt import interrupt
from .._durable._messages import Resume
from .._durable._tools import ToolOutcome

if TYPE_CHECKING:
    from ._server import MCPServer

__all__ = ["ELICITATION", "open_session"]

#: The ``interrupt()`` reason of a pause for an MCP elicitation.
ELICITATION: Final = "elicitation"
#: How many pages of a server's tool list are read at most (a paginator that never ends).
_PAGES: Final = 100
_HTTP_TIMEOUT = httpx2.Timeout(30.0, read=300.0)


@dataclasses.dataclass(slots=True)
class _Call:
    """One tool call in flight: the ``Resume`` that answers its questions (a resumed pass), and the
    question that stopped it (a first pass)."""

    resume: Resume | None
    scope: anyio.CancelScope | None = None
    asked: dict[str, Any] | None = None


class _Elicited(Exception):
    """Internal: the call was stopped by a question; the run pauses with it."""

    def __init__(self, asked: dict[str, Any]) -> None:
        super().__init__(asked.get("message", ""))
        self.asked = asked


#: The call in flight in this task (the elicitation callback runs in a task the call started).
_current: ContextVar[_Call | None] = ContextVar("tether_mcp_call", default=None)
#: The call an at-most-once wrapper runs (its body takes JSON arguments only).
_pending: ContextVar[Callable[[], Awaitable[dict[str, Any]]] | None] = ContextVar(
    "tether_mcp_pending", default=None
)


class Session:
    """An open connection to ``server`` through ``client`` (``mcp.Client``)."""

    def __init__(self, server: MCPServer) -> None:
        self.server = server
        self.client: Client | None = None
        # The call in flight, for an elicitation that comes on the connection's own task.
        self._call: _Call | None = None

    async def list_tools(self) -> list[dict[str, Any]]:
        """The server's tools, page after page."""
        assert self.client is not None
        tools: list[dict[str, Any]] = []
        cursor: str | None = None
        for _ in range(_PAGES):
            page = await self.client.list_tools(cursor=cursor)
            tools.extend(_entry(tool) for tool in page.tools)
            cursor = page.next_cursor
            if cursor is None:
                break
        return tools

    async def call(self, entry: dict[str, Any], arguments: dict[str, Any]) -> ToolOutcome:
        """Call the tool of ``entry``: what the model reads; a question pauses the run."""
        name = entry["name"]
        ctx = current_context()
        resume = ctx.resume if ctx is not None else None
        try:
            if entry.get("destructive") and not entry.get("idempotent"):
                token = _pending.set(lambda: self._call_tool(entry, arguments, resume))
                try:
                    answer = resume.to_dict() if resume is not None else None
                    result = await _at_most_once(self.server.name, entry["tool"], arguments, answer)
                finally:
                    _pending.reset(token)
            else:
                result = await self._call_tool(entry, arguments, resume)
        except _Elicited as asked:
            context = {"server": self.server.name, "tool": entry["tool"], **asked.asked}
            interrupt(ELICITATION, context)  # raises: the run pauses (a resumed pass is answered)
            raise AssertionError("unreachable") from None  # pragma: no cover
        except SideEffectInDoubt:
            content = (
                f"Tool '{name}' failed: SideEffectInDoubt: the call of {entry['tool']!r} on MCP server "
                f"{self.server.name!r} may already have run (a crash cut it before its result was "
                f"stored); it is not called again: check whether it took effect"
            )
            return ToolOutcome(content=content, ok=False, error="raised")
        except TimeoutError as exc:
            if self.server.timeout is None:
                content = f"Tool '{name}' failed: {type(exc).__name__}: {exc}"
                return ToolOutcome(content=content, ok=False, error="raised")
            content = f"Tool '{name}' timed out after {self.server.timeout:g}s"
            return ToolOutcome(content=content, ok=False, error="timeout")
        except Exception as exc:
            content = f"Tool '{name}' failed: {type(exc).__name__}: {exc}"
            return ToolOutcome(content=content, ok=False, error="raised")
        if result["is_error"]:
            return ToolOutcome(content=f"Tool '{name}' failed: {result['content']}", ok=False, error="raised")
        return ToolOutcome(content=result["content"], value=result["content"])

    async def _call_tool(
        self, entry: dict[str, Any], arguments: dict[str, Any], resume: Resume | None
    ) -> dict[str, Any]:
        """One ``tools/call``: ``{"content": text, "is_error": bool}``; ``_Elicited`` when a first
        pass was stopped by a question."""
        assert self.client is not None
        call = _Call(resume)
        token = _current.set(call)
        self._call = call
        try:
            with anyio.CancelScope() as scope:
                call.scope = scope
                with anyio.fail_after(self.server.timeout):
                    result = await self.client.call_tool(entry["tool"], arguments)
        finally:
            self._call = None
            _current.reset(token)
        if call.asked is not None:
            raise _Elicited(call.asked)
        return {"content": _text(result), "is_error": bool(result.is_error)}

    async def elicit(
        self, context: ClientRequestContext, params: types.ElicitRequestParams
    ) -> types.ElicitResult | types.ErrorData:
        """The server asks a question: answer it with the ``Resume`` of a resumed pass, or stop
        the call so that the run pauses."""
        call = _current.get() or self._call
        if call is None:
            return types.ElicitResult(action="decline")
        if call.resume is not None:
            if call.resume.approved:
                return types.ElicitResult(action="accept", content=call.resume.metadata)
            return types.ElicitResult(action="decline")
        call.asked = normalize(params.model_dump(mode="json", by_alias=True, exclude_none=True))
        if call.scope is not None:
            call.scope.cancel()
        return types.ElicitResult(action="cancel")


def _once_key(server: str, tool: str, arguments: Any, answer: Any) -> str:
    """The at-most-once key of a call: its step (its tool row), the tool, its arguments, and the
    answer of a resumed pass (so a pass that paused on a question leaves the next one free)."""
    ctx = current_context()
    step = ctx.step if ctx is not None else None
    return hashlib.sha256(canonical_json([step, server, tool, arguments, answer])).hexdigest()


@idempotent(key=_once_key, at_most_once=True)
async def _at_most_once(server: str, tool: str, arguments: Any, answer: Any) -> dict[str, Any]:
    """Call a destructive tool at most once per call of a run (the call is in ``_pending``)."""
    run = _pending.get()
    assert run is not None
    return await run()


def _entry(tool: types.Tool) -> dict[str, Any]:
    """A tool as the run records it: name, description, input schema, and whether it is
    destructive (marked so, and not read-only) or idempotent."""
    hints = tool.annotations
    destructive = hints is not None and hints.destructive_hint is True and hints.read_only_hint is not True
    return {
        "tool": tool.name,
        "description": tool.description or tool.title or "",
        "parameters": normalize(tool.input_schema),
        "destructive": destructive,
        "idempotent": hints is not None and hints.idempotent_hint is True,
    }


def _text(result: types.CallToolResult) -> str:
    """What the model reads of a result: its text blocks (another block as its JSON), else its
    structured content as JSON."""
    parts: list[str] = []
    for block in result.content:
        if isinstance(block, types.TextContent):
            parts.append(block.text)
        else:
            parts.append(encode(block.model_dump(mode="json", by_alias=True, exclude_none=True)).decode())
    if not parts and result.structured_content is not None:
        parts.append(encode(normalize(result.structured_content)).decode())
    return "\n".join(parts)


@asynccontextmanager
async def open_session(server: MCPServer) -> AsyncIterator[Session]:
    """Connect to ``server`` (stdio or streamable HTTP) and hand over the open session."""
    session = Session(server)
    if server.command is not None:
        params = StdioServerParameters(
            command=server.command[0], args=list(server.command[1:]), env=server.env
        )
        async with Client(params, elicitation_callback=session.elicit, cache=None) as client:
            session.client = client
            yield session
        return
    assert server.url is not None
    async with httpx2.AsyncClient(headers=server.headers, timeout=_HTTP_TIMEOUT) as http:
        transport = streamable_http_client(server.url, http_client=http)
        async with Client(transport, elicitation_callback=session.elicit, cache=None) as client:
            session.client = client
            yield session
