"""``agent_path`` and ``node_id``: built and read here only (rule 3 and the row grammar of docs/durability.md).

An ``agent_path`` is segments ``<kind>:<name>`` joined by ``/``: ``agent:<name>`` for a plain agent or a
swarm member, ``swarm:<s>``, ``supervisor:<s>``, ``worker:<role>``, and a trailing ``tool:<name>`` for
a tool. A ``node_id`` names the step: ``turn:N``, ``turn:N/tool:X``, ``handoff:N``, ``fork_origin``
or ``run_end``. Writers build both with the functions below; readers split them with
:func:`parse_path` and :func:`parse_node_id`, which refuse anything else with :class:`InvalidPath`.
"""

from __future__ import annotations

from typing import Final, NamedTuple

from ._errors import InvalidPath
from ._model import FORK_ORIGIN, RUN_END

__all__ = [
    "PATH_KINDS",
    "NodeId",
    "child_path",
    "conversation_of",
    "handoff_node",
    "is_segment_name",
    "parse_node_id",
    "parse_path",
    "tool_node",
    "tool_path",
    "turn_node",
]

#: The segment kinds of an ``agent_path``.
PATH_KINDS: Final = frozenset({"agent", "swarm", "supervisor", "worker", "tool"})
_TOOL: Final = "tool"
_TOOL_PREFIX: Final = "tool:"
#: What a name in a path may not hold: ``/`` ends a segment, ``:`` ends a segment's kind.
_SEPARATORS: Final = ("/", ":")


class NodeId(NamedTuple):
    """A parsed ``node_id``: ``kind`` is ``turn``, ``handoff``, ``fork_origin`` or ``run_end``;
    ``number`` the turn or hop (``None`` for the markers); ``tool`` the tool of a tool step."""

    kind: str
    number: int | None = None
    tool: str | None = None


def _segment(kind: str, name: str) -> str:
    """``<kind>:<name>``. Only ``/`` is refused here: a reader splits a segment at its first ``:``,
    so a name the model made up (``functions:lookup``) is still carried and read back, and its
    tool call is answered as an unknown tool rather than failing the run. Names a program
    declares are held to :func:`is_segment_name`."""
    if kind not in PATH_KINDS:
        raise InvalidPath(f"unknown path segment kind {kind!r}: use one of {sorted(PATH_KINDS)}")
    if not isinstance(name, str) or not name or "/" in name:
        raise InvalidPath(f"a {kind} name must be a non-empty string without '/', not {name!r}")
    return f"{kind}:{name}"


def is_segment_name(name: object) -> bool:
    """Whether ``name`` can name a segment (an agent, a member, a tool) and read back as written:
    a non-empty str without ``/`` or ``:``."""
    return isinstance(name, str) and bool(name) and not any(sep in name for sep in _SEPARATORS)


def child_path(parent: str | None, kind: str, name: str) -> str:
    """``parent`` extended by the segment ``<kind>:<name>`` (``parent`` ``None`` or ``""``: a root)."""
    segment = _segment(kind, name)
    return f"{parent}/{segment}" if parent else segment


def tool_path(agent_path: str | None, tool: str) -> str:
    """The path of ``tool`` called by the agent at ``agent_path``."""
    return child_path(agent_path, _TOOL, tool)


def parse_path(agent_path: str) -> tuple[tuple[str, str], ...]:
    """The ``(kind, name)`` segments of ``agent_path``; a tool may only be the last one."""
    if not isinstance(agent_path, str) or not agent_path:
        raise InvalidPath(f"an agent_path must be a non-empty string, not {agent_path!r}")
    segments: list[tuple[str, str]] = []
    parts = agent_path.split("/")
    for index, part in enumerate(parts):
        kind, sep, name = part.partition(":")
        if not sep or kind not in PATH_KINDS or not name:
            raise InvalidPath(f"segment {part!r} of agent_path {agent_path!r} is not <kind>:<name>")
        if kind == _TOOL and index != len(parts) - 1:
            raise InvalidPath(f"agent_path {agent_path!r} has a tool segment before its end")
        segments.append((kind, name))
    return tuple(segments)


def conversation_of(agent_path: str | None) -> str:
    """The conversation a row belongs to: its agent path without a trailing ``/tool:<name>``.

    On every write (the message log is kept per conversation), so it only splits off the tail.
    """
    if not agent_path:
        return ""
    head, sep, tail = agent_path.rpartition("/")
    if tail.startswith(_TOOL_PREFIX):
        return head if sep else ""
    return agent_path


def turn_node(turn: int) -> str:
    """The ``node_id`` of model call ``turn``."""
    return f"turn:{_number(turn)}"


def tool_node(turn: int, tool: str) -> str:
    """The ``node_id`` of ``tool`` called in ``turn``."""
    return f"turn:{_number(turn)}/{_segment(_TOOL, tool)}"


def handoff_node(hop: int) -> str:
    """The ``node_id`` of a Swarm's hop number ``hop``."""
    return f"handoff:{_number(hop)}"


def parse_node_id(node_id: str) -> NodeId:
    """Split a ``node_id`` of the row grammar into its parts."""
    if node_id in (FORK_ORIGIN, RUN_END):
        return NodeId(node_id)
    head, sep, tail = node_id.partition("/") if isinstance(node_id, str) else ("", "", "")
    kind, colon, number = head.partition(":")
    if colon and kind in ("turn", "handoff") and number.isdigit() and number.isascii():
        if not sep:
            return NodeId(kind, int(number))
        tool_kind, tool_sep, tool = tail.partition(":")
        if kind == "turn" and tool_sep and tool_kind == _TOOL and tool and "/" not in tool:
            return NodeId(kind, int(number), tool)
    raise InvalidPath(
        f"node_id {node_id!r} is not turn:N, turn:N/tool:X, handoff:N, {FORK_ORIGIN} or {RUN_END}"
    )


def _number(value: int) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise InvalidPath(f"a turn or hop number must be an int >= 0, not {value!r}")
    return value
