"""The :class:`Agent` definition: a name, a model, tools, instructions and a turn budget.

It is only a description; the run actor executes it. Tools are found by name, so a resumed run
finds the tool it paused in as long as an agent of the same name has a tool of that name.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from stores import child_path, is_segment_name

from ..models import Message, Model
from ._errors import ToolNotFound, unfit_tool_name
from ._output import OutputSpec
from ._sources import ToolSource
from ._tools import Tool
from ._versions import cached_fingerprint, check_version

__all__ = ["Agent", "check_runner_name"]


class Agent:
    """An agent: ``model`` answers each turn, offered ``tools``; ``instructions`` become the system
    message; the run fails with ``MaxTurnsExceeded`` after ``max_turns`` model calls without a final answer.

    ``tools`` are :class:`~actors._durable._tools.Tool` objects, plain functions (wrapped with ``@tool``)
    or tool sources (``actors.mcp.MCPServer``), whose tools the agent offers too, connected per activation.
    ``output_type`` (a msgspec Struct, a dataclass or a TypedDict) asks the model for a JSON answer of
    that type, validated before the run completes (``RunResult.value`` holds it).
    ``name`` may not contain ``/`` or ``:`` (they separate the segments of ``agent_path``).
    ``version`` names this build of the agent: a run records it, and a resume takes the runner of
    the run's name and version (``docs/versions.md``); ``None`` resumes on any build of the name.
    """

    __slots__ = (
        "_fingerprint",
        "_tools",
        "instructions",
        "max_turns",
        "model",
        "name",
        "output",
        "sources",
        "version",
    )

    def __init__(
        self,
        name: str,
        model: Model,
        tools: Sequence[Tool | ToolSource | Callable[..., Any]] = (),
        instructions: str | None = None,
        max_turns: int = 20,
        version: str | None = None,
        output_type: type | None = None,
    ) -> None:
        check_runner_name("agent", name)
        if not callable(getattr(model, "complete", None)):
            raise TypeError(f"agent {name!r}: model must have an async complete(messages, tools) method")
        if isinstance(max_turns, bool) or not isinstance(max_turns, int) or max_turns < 1:
            raise ValueError(f"agent {name!r}: max_turns must be an int >= 1, not {max_turns!r}")
        if instructions is not None and not isinstance(instructions, str):
            raise TypeError(f"agent {name!r}: instructions must be a str or None")
        by_name: dict[str, Tool] = {}
        sources: dict[str, ToolSource] = {}
        for item in tools:
            if isinstance(item, ToolSource):
                if item.name in sources:
                    raise ValueError(f"agent {name!r} has two tool sources named {item.name!r}")
                sources[item.name] = item
                continue
            wrapped = item if isinstance(item, Tool) else Tool(item)
            if not is_segment_name(wrapped.name):  # a Tool renamed after @tool checked its name
                raise unfit_tool_name(wrapped.name, agent=name)
            if wrapped.name in by_name:
                raise ValueError(f"agent {name!r} has two tools named {wrapped.name!r}")
            by_name[wrapped.name] = wrapped
        self.name = name
        self.model = model
        self.instructions = instructions
        self.max_turns = max_turns
        self._tools = by_name
        #: The tool sources (MCP servers) whose tools the agent offers, in the order given.
        self.sources: tuple[ToolSource, ...] = tuple(sources.values())
        #: The typed answer the model is asked for (``None``: a plain text answer).
        self.output = OutputSpec(output_type, agent=name) if output_type is not None else None
        self.version = check_version(f"agent {name!r}", version)
        self._fingerprint: dict[str, Any] | None = None

    #: The fingerprint a run of this agent records on its first row (computed once).
    fingerprint = property(cached_fingerprint)

    @property
    def output_type(self) -> type | None:
        """The type of the agent's final answer (``None``: plain text)."""
        return self.output.type if self.output is not None else None

    @property
    def tools(self) -> list[Tool]:
        """The agent's tools, in the order given."""
        return list(self._tools.values())

    #: A plain agent holds no other runner: its re-entry never reads the run's history.
    nested = False
    kind = "agent"

    @property
    def label(self) -> str:
        """This agent's ``agent_path`` segment as a plain agent: ``agent:<name>``."""
        return child_path(None, self.kind, self.name)

    def tool(self, name: str, *, execution_id: str | None = None) -> Tool:
        """The tool called ``name``; :class:`ToolNotFound` (naming agent, tool and run) if there is none."""
        try:
            return self._tools[name]
        except KeyError:
            raise ToolNotFound(name, agent=self.name, execution_id=execution_id) from None

    def has_tool(self, name: str) -> bool:
        """Whether the agent has a tool called ``name``."""
        return name in self._tools

    def check_tool(self, path: str, own_path: str, name: str, execution_id: str) -> None:
        """Refuse (``ToolNotFound``) a re-entry of tool ``name`` at ``path`` this agent lacks."""
        if path == own_path and not (self.sources and name not in self._tools):
            # A source's tool is checked against what the run recorded, when it connects.
            self.tool(name, execution_id=execution_id)

    def first_messages(self, task: str) -> list[Message]:
        """The conversation of a delegation of ``task`` to this agent: its instructions, the task."""
        messages = [Message("system", self.instructions)] if self.instructions else []
        messages.append(Message("user", task))
        return messages

    def tool_schemas(self) -> list[dict[str, Any]]:
        """The tools as OpenAI-style function schemas, for :meth:`Model.complete`."""
        return [t.schema() for t in self._tools.values()]

    def __repr__(self) -> str:
        version = f", version={self.version!r}" if self.version is not None else ""
        return f"Agent({self.name!r}, tools={list(self._tools)!r}, max_turns={self.max_turns}{version})"


def check_runner_name(what: str, name: object) -> None:
    """Refuse (``ValueError``) a name of an agent, a swarm, a supervisor or a worker role that a
    path segment cannot carry as written (``stores.is_segment_name``) or that has edge spaces."""
    if not is_segment_name(name) or name != str(name).strip():
        raise ValueError(f"{what} name {name!r} must be a non-empty str without '/', ':' or edge spaces")
