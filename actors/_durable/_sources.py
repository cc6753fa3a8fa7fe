"""Tool sources: objects in an agent's ``tools`` that bring tools of their own (``actors.mcp.MCPServer``).

A source is connected per activation of a run and closed with it. :class:`Connections` holds an
activation's connections: each is opened on first use, in a task of its own (so whatever the
connection enters, task groups included, is entered and left in one task), and all are closed
together when the activation ends, shielded and bounded by :data:`CLOSE_TIMEOUT`.

:func:`offer` turns an agent's sources into the tools a run offers its model: a source's tool keeps
its name unless another tool of the agent (its own or another source's) has it too; then it is
``<source>__<tool>``. A listed name with ``/`` or ``:`` (or an empty one) fails the run before it
writes (``InvalidPath``, naming the source and the tool): the tool's rows could not carry it, and no
other name is made up for it. The list a run saw is recorded (:data:`RECORD`) on the first row the
agent writes; a re-entry offers the recorded tools again, and a recorded tool that a source no
longer lists raises :class:`ToolNotFound` before anything is written.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any, Final, Protocol

import anyio
import anyio.abc

from stores import Checkpoint, Store, conversation_of, is_segment_name

from .._core import shielded, tether_logger
from ._errors import ToolNotFound, unfit_tool_name
from ._tools import ToolOutcome

__all__ = [
    "CLOSE_TIMEOUT",
    "RECORD",
    "Connections",
    "SourceSession",
    "SourceTool",
    "ToolSource",
    "activation_sources",
    "offer",
    "recorded_tools",
    "uses_sources",
]

_log = tether_logger()

#: The snapshot key of the tools from sources an agent offered (its first row carries it).
RECORD: Final = "source_tools"
#: Bound on closing an activation's connections (seconds, shielded); past it they are cut.
CLOSE_TIMEOUT: Final = 10.0
#: Bound on opening one connection and listing its tools (seconds).
OPEN_TIMEOUT: Final = 60.0


class SourceSession(Protocol):
    """One open connection to a source."""

    async def list_tools(self) -> list[dict[str, Any]]:
        """The source's tools: ``{"tool", "description", "parameters", "destructive", "idempotent"}``."""
        ...

    async def call(self, entry: dict[str, Any], arguments: dict[str, Any]) -> ToolOutcome:
        """Call the tool of ``entry`` (a :data:`RECORD` entry) with ``arguments``."""
        ...


class ToolSource:
    """What an agent's ``tools`` may hold besides tools: a ``name`` and a connection it opens."""

    name: str

    def connect(self) -> AbstractAsyncContextManager[SourceSession]:
        """A connection to the source, entered (and left) by one task."""
        raise NotImplementedError

    def fingerprint(self) -> str:
        """What a run's fingerprint records of the source (its kind)."""
        raise NotImplementedError


class Connections:
    """An activation's open connections, one per source (by name), each held by a task of ``tg``."""

    def __init__(self, tg: anyio.abc.TaskGroup) -> None:
        self._tg = tg
        self._sessions: dict[str, SourceSession] = {}
        self._opening: dict[str, anyio.Lock] = {}
        self._closing = anyio.Event()
        self._held: list[anyio.Event] = []

    async def session(self, source: ToolSource) -> SourceSession:
        """The open connection to ``source``, opened now if it is not yet (``ConnectionError``
        naming the source when it cannot be opened)."""
        found = self._sessions.get(source.name)
        if found is not None:
            return found
        lock = self._opening.setdefault(source.name, anyio.Lock())
        async with lock:
            found = self._sessions.get(source.name)
            if found is None:
                try:
                    with anyio.fail_after(OPEN_TIMEOUT):
                        found = await self._tg.start(self._hold, source)
                except Exception as error:
                    raise ConnectionError(
                        f"could not connect to {source!r}: {type(error).__name__}: {error}"
                    ) from error
                self._sessions[source.name] = found
        return found

    async def _hold(self, source: ToolSource, *, task_status: anyio.abc.TaskStatus[SourceSession]) -> None:
        """Open the connection, hand it over, keep it open until the activation ends."""
        released = anyio.Event()
        self._held.append(released)
        started = False
        try:
            async with source.connect() as session:
                task_status.started(session)
                started = True
                await self._closing.wait()
        except Exception as error:
            if not started:
                raise  # the caller of session() hears of it
            # A connection that broke after it opened: its calls fail as tool errors the model
            # reads; the activation goes on.
            _log.warning("tool source connection ended", source=source.name, error=repr(error))
        finally:
            self._sessions.pop(source.name, None)
            released.set()

    async def aclose(self) -> None:
        """Close every connection (call shielded and bounded: see :func:`activation_sources`)."""
        self._closing.set()
        for released in list(self._held):
            await released.wait()


class SourceTool:
    """A tool of a source as a run offers it: its recorded ``entry`` and the connection it runs on."""

    __slots__ = ("connections", "entry", "name", "source")

    def __init__(self, source: ToolSource, entry: dict[str, Any], connections: Connections) -> None:
        self.source = source
        self.entry = entry
        self.name: str = entry["name"]
        self.connections = connections

    def schema(self) -> dict[str, Any]:
        """The OpenAI-style function tool the model is offered."""
        entry = self.entry
        return {
            "type": "function",
            "function": {
                "name": entry["name"],
                "description": entry.get("description") or "",
                "parameters": entry.get("parameters") or {"type": "object", "properties": {}},
            },
        }

    async def invoke(self, arguments: dict[str, Any]) -> ToolOutcome:
        """Call the tool on the activation's connection (opened again if it broke: a failure to
        open it is a tool error the model reads). A failed call is a WARNING too."""
        try:
            session = await self.connections.session(self.source)
        except ConnectionError as error:
            outcome = ToolOutcome(content=f"Tool '{self.name}' failed: {error}", ok=False, error="raised")
        else:
            outcome = await session.call(self.entry, arguments)
        if not outcome.ok:  # the model reads it; the developer hears of it
            _log.warning(
                "tool source call failed", source=self.source.name, tool=self.name, error=outcome.content
            )
        return outcome


async def offer(
    sources: Sequence[ToolSource],
    local: Iterable[str],
    connections: Connections,
    recorded: list[dict[str, Any]] | None,
    *,
    agent: str,
    execution_id: str,
) -> tuple[list[dict[str, Any]], dict[str, SourceTool]]:
    """The tools of ``sources`` a run offers: the list to record and the tools by offered name.

    Without ``recorded`` (a new run) the sources' current tools, named as the module says; with it,
    the recorded tools again, each of which its source must still list (``ToolNotFound``)."""
    listed: dict[str, list[dict[str, Any]]] = {}
    for source in sources:
        listed[source.name] = await (await connections.session(source)).list_tools()
    by_source = {source.name: source for source in sources}
    if recorded is None:
        counts: dict[str, int] = {}
        for name in local:
            counts[name] = counts.get(name, 0) + 1
        for tools in listed.values():
            for tool in tools:
                counts[tool["tool"]] = counts.get(tool["tool"], 0) + 1
        recorded = []
        for source_name, tools in listed.items():
            for tool in tools:
                if not is_segment_name(tool["tool"]):  # its rows could not be read back
                    raise unfit_tool_name(tool["tool"], agent=agent, source=source_name)
                name = tool["tool"] if counts[tool["tool"]] == 1 else f"{source_name}__{tool['tool']}"
                recorded.append({"name": name, "source": source_name, **tool})
    offered: dict[str, SourceTool] = {}
    for entry in recorded:
        owner = by_source.get(entry.get("source", ""))
        names = {tool["tool"] for tool in listed.get(entry.get("source", ""), ())}
        if owner is None or entry.get("tool") not in names:
            raise ToolNotFound(entry.get("name", "?"), agent=agent, execution_id=execution_id)
        offered[entry["name"]] = SourceTool(owner, entry, connections)
    return recorded, offered


async def recorded_tools(store: Store, execution_id: str, path: str) -> list[dict[str, Any]] | None:
    """The tools from sources that the agent at ``path`` recorded in the run (``None``: none yet)."""
    first = await store.history(execution_id, limit=1)
    rows: Sequence[Checkpoint] = first
    if not first or conversation_of(first[0].agent_path) != path or RECORD not in first[0].state_snapshot:
        rows = await store.history(execution_id)
    for row in rows:
        found = row.state_snapshot.get(RECORD)
        if isinstance(found, list) and conversation_of(row.agent_path) == path:
            return found
    return None


def uses_sources(runner: Any) -> bool:
    """Whether an agent of ``runner`` (an Agent, a Swarm or a Supervisor) has tool sources."""
    match getattr(runner, "kind", None):
        case "agent":
            return bool(runner.sources)
        case "supervisor":
            return uses_sources(runner.manager) or any(uses_sources(w) for w in runner.workers.values())
        case "swarm":
            return any(uses_sources(member) for member in runner.agents)
    return False


@asynccontextmanager
async def activation_sources() -> AsyncIterator[Connections]:
    """The connections of one activation whose runner has sources (:func:`uses_sources`): each
    is opened on first use and all are closed when the activation ends, shielded and bounded."""
    failure: BaseException | None = None
    async with anyio.create_task_group() as tg:
        connections = Connections(tg)
        try:
            yield connections
        except anyio.get_cancelled_exc_class():
            raise
        except BaseException as error:  # re-raised after the group, not wrapped in a group
            failure = error
        finally:
            with shielded(CLOSE_TIMEOUT):
                await connections.aclose()
            tg.cancel_scope.cancel()  # whatever did not close in time is cut
    if failure is not None:
        raise failure
