"""``Swarm``: peers that hand control to each other over one conversation, each hop a child actor.

The active member runs as a child actor at ``<path>/agent:<name>``; an Agent member gets one
``handoff_to_<peer>`` tool per peer its allow-list names. Calling it ends the member's reply (the
calls after it get the sibling note); the swarm then writes the ``handoff:N`` row at its own path
(``{from, to, reason}`` in ``node_input``, the hop's ``context`` merged into the run's ``shared``)
and starts the peer on the same conversation, under the peer's own instructions. A member that
answers ends the swarm. Re-entry finds the active member from the deepest row's path and re-enters
it at its own newest row after the newest hop; a newest ``handoff`` row starts its target afresh.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from stores import HANDOFF, Checkpoint, child_path, conversation_of, handoff_node, parse_path

from ...models import Message, ToolCall
from ...models._types import Transcript
from .._agent import Agent, check_runner_name
from .._engine import SIBLING_NOTE, AgentLevel, level_of
from .._errors import HandoffLimitExceeded
from .._level import Delegation, Level, Next, ReentryRoute
from .._messages import HandedOff, Outcome
from .._runlog import RunLog
from .._versions import cached_fingerprint, check_version

if TYPE_CHECKING:
    from . import Runner

__all__ = ["Swarm"]

_HANDOFF = "handoff_to_"


class Swarm:
    """Members (Agents, Swarms or Supervisors) that hand control to each other.

    ``entry`` names the first member (default: the first); ``handoffs`` maps a member to the peers it
    may hand off to (default: every peer; a member the mapping omits hands off to no one); a hop past
    ``max_handoffs`` in one invocation fails the swarm with ``HandoffLimitExceeded``. ``version``
    names this build of the swarm (see :class:`~actors.Agent`).
    """

    __slots__ = ("_fingerprint", "_members", "entry", "handoffs", "max_handoffs", "name", "version")

    nested = True
    kind = "swarm"
    name: str
    entry: str
    handoffs: dict[str, tuple[str, ...]]
    max_handoffs: int
    version: str | None

    def __init__(
        self,
        name: str,
        agents: Sequence[Runner],
        *,
        entry: str | None = None,
        handoffs: Mapping[str, Sequence[str]] | None = None,
        max_handoffs: int = 10,
        version: str | None = None,
    ) -> None:
        check_runner_name("swarm", name)
        members: dict[str, Runner] = {}
        for agent in agents:
            if not hasattr(agent, "kind"):
                raise TypeError(f"swarm {name!r}: a member is an Agent, Swarm or Supervisor, not {agent!r}")
            member_name = agent.name
            if member_name in members:
                raise ValueError(f"swarm {name!r} has two members named {member_name!r}")
            members[member_name] = agent
        if not members:
            raise ValueError(f"swarm {name!r} needs at least one member")
        if isinstance(max_handoffs, bool) or not isinstance(max_handoffs, int) or max_handoffs < 0:
            raise ValueError(f"swarm {name!r}: max_handoffs must be an int >= 0, not {max_handoffs!r}")
        first = entry if entry is not None else next(iter(members))
        if first not in members:
            raise ValueError(f"swarm {name!r}: entry {first!r} is not a member ({list(members)})")
        allowed: dict[str, tuple[str, ...]] = {}
        for member in members:
            peers = (
                tuple(p for p in members if p != member)
                if handoffs is None
                else tuple(handoffs.get(member, ()))
            )
            for peer in peers:
                if peer not in members or peer == member:
                    raise ValueError(f"swarm {name!r}: {member!r} may not hand off to {peer!r}")
            allowed[member] = peers
        if handoffs is not None:
            for member in handoffs:
                if member not in members:
                    raise ValueError(f"swarm {name!r}: handoffs names {member!r}, not a member")
        for member, peers in allowed.items():
            agent = members[member]
            if isinstance(agent, Agent) and any(agent.has_tool(_HANDOFF + p) for p in peers):
                raise ValueError(f"swarm {name!r}: member {member!r} already has a handoff_to_ tool")
        self.name = name
        self._members = members
        self.entry = first
        self.handoffs = allowed
        self.max_handoffs = max_handoffs
        self.version = check_version(f"swarm {name!r}", version)
        self._fingerprint: dict[str, Any] | None = None

    #: The fingerprint a run of this runner records on its first row: its structure and its
    #: members' definitions (computed once).
    fingerprint = property(cached_fingerprint)

    @property
    def agents(self) -> list[Runner]:
        """The members, in the order given."""
        return list(self._members.values())

    @property
    def instructions(self) -> str | None:
        """None: each member speaks under its own instructions."""
        return None

    @property
    def label(self) -> str:
        """This runner's ``agent_path`` as a root: ``swarm:<name>``."""
        return child_path(None, self.kind, self.name)

    def first_messages(self, task: str) -> list[Message]:
        return [Message("user", task)]

    def level(self, rows: RunLog, path: str, root: Any) -> Level:
        return SwarmLevel(self, rows=rows, path=path, runner=root)

    def member_path(self, path: str, member: str) -> str:
        return child_path(path, "agent", member)

    def check_tool(self, path: str, own_path: str, name: str, execution_id: str) -> None:
        """Refuse (``ToolNotFound``) a re-entry of a tool the member at ``path`` lacks."""
        for member, agent in self._members.items():
            below = self.member_path(own_path, member)
            if path == below or path.startswith(below + "/"):
                if path == below and name.startswith(_HANDOFF):
                    return
                agent.check_tool(path, below, name, execution_id)
                return

    def member(self, name: str) -> Runner:
        return self._members[name]

    def __repr__(self) -> str:
        return f"Swarm({self.name!r}, agents={list(self._members)!r}, entry={self.entry!r})"


class SwarmLevel(Level):
    """A swarm's level: it writes the hops; its active member runs as a child actor."""

    def __init__(self, swarm: Swarm, *, rows: RunLog, path: str, runner: Any) -> None:
        super().__init__(rows=rows, path=path, runner=runner)
        self.swarm = swarm
        self._active = swarm.entry
        self._visited: list[str] = [swarm.entry]
        self._hops = 0

    async def begin(self, messages: Sequence[Message]) -> Next:
        self._transcript = Transcript([m for m in messages if m.role != "system"])
        return self._member(self.swarm.entry, None)

    async def reenter(self, route: ReentryRoute) -> Next:
        step = route.step
        if conversation_of(step.agent_path) == self.path:
            if step.step_type != HANDOFF:
                raise TypeError(f"swarm {self.path!r} wrote no row {step.node_id!r}")
            self._from_hop(step)
            return self._member(self._active, None)
        segments = parse_path(step.agent_path or "")
        depth = len(parse_path(self.path))
        member = segments[depth][1]
        hops = [row for row in await route.own_rows(self.path) if row.step_type == HANDOFF]
        if hops:
            self._from_hop(hops[-1])
        self._active = member
        return self._member(member, route.below(hops[-1].seq if hops else route.after))

    def _from_hop(self, row: Checkpoint) -> None:
        snapshot = row.state_snapshot
        self._transcript = Transcript.from_dicts(snapshot.get("messages", []))
        self._hops = int(snapshot.get("hops", 0))
        self._visited = list(snapshot.get("visited", [self.swarm.entry]))
        self._active = str(row.node_input["to"])
        self._turn = row.step_index

    def _member(self, name: str, below: ReentryRoute | None) -> Delegation:
        runner = self.swarm.member(name)
        path = self.swarm.member_path(self.path, name)
        level: Level
        if isinstance(runner, Agent):
            peers = self.swarm.handoffs[name]
            specials = {_HANDOFF + peer: _Handoff(peer) for peer in peers}
            level = AgentLevel(agent=runner, rows=self.rows, path=path, specials=specials, runner=self.runner)
        else:
            level = level_of(runner, self.rows, path, self.runner)
        if below is not None:
            return Delegation(level, lambda: level.reenter(below))
        messages: list[Message] = []
        instructions = runner.instructions
        if instructions:
            messages.append(Message("system", instructions))
        messages.extend(self._transcript.messages)
        return Delegation(level, lambda: level.begin(messages))

    async def _after_child(self, outcome: Outcome) -> Next:
        if not isinstance(outcome, HandedOff):
            return outcome  # the member answered, paused or failed: so did the swarm
        source = self._active
        if self._hops >= self.swarm.max_handoffs:
            raise HandoffLimitExceeded(
                self.swarm.max_handoffs,
                swarm=self.swarm.name,
                path=[*self._visited, outcome.to],
                execution_id=self.execution_id,
            )
        self.rows.shared.update(outcome.context)
        self._transcript = Transcript([m for m in outcome.messages if m.role != "system"])
        self._hops += 1
        self._visited.append(outcome.to)
        number = self.rows.hops.get(self.path, 0)
        self.rows.hops[self.path] = number + 1
        self._turn = number
        row = self.rows.row(
            node_id=handoff_node(number),
            step_type=HANDOFF,
            step_index=number,
            snapshot={
                "messages": self._transcript.snapshot(),
                "turn": number,
                "hops": self._hops,
                "visited": list(self._visited),
            },
            agent_path=self.path,
            node_input={"from": source, "to": outcome.to, "reason": outcome.reason},
        )
        await self._append(row)
        self._active = outcome.to
        return self._member(outcome.to, None)


class _Handoff:
    """A member's ``handoff_to_<peer>(reason, context)`` tool: ends its reply and hands over."""

    __slots__ = ("name", "peer")

    def __init__(self, peer: str) -> None:
        self.peer = peer
        self.name = _HANDOFF + peer

    def schema(self) -> dict[str, Any]:
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": f"Hand control of the conversation to {self.peer}.",
                "parameters": {
                    "type": "object",
                    "properties": {
                        "reason": {"type": "string", "description": "Why the peer should take over."},
                        "context": {"type": "object", "description": "Facts to add to the shared state."},
                    },
                },
            },
        }

    async def call(
        self, engine: AgentLevel, row: Checkpoint, call: ToolCall, below: ReentryRoute | None
    ) -> Next | str:
        reason = call.arguments.get("reason", "")
        context = call.arguments.get("context", {})
        extra = set(call.arguments) - {"reason", "context"}
        if not isinstance(reason, str) or not isinstance(context, dict) or extra:
            return f"Tool '{self.name}' failed: it takes reason (a string) and context (an object)"
        messages = engine.end_reply(call, f"handed off to {self.peer}", SIBLING_NOTE)
        return HandedOff(self.peer, reason, context, messages)
