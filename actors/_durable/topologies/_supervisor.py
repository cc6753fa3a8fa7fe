"""``Supervisor``: a manager agent that delegates tasks to workers, each run as a child actor.

The manager is an agent at the supervisor's own path; it gets one ``delegate_to_<role>(task)`` tool
per worker. A delegation's row is the manager's tool row (``turn:N/tool:delegate_to_<role>``); the
worker then runs as a child actor at ``<path>/worker:<role>`` on a conversation of its own (its
instructions and the task), and its final answer is the tool's result. A worker that fails is a tool
error the manager reads; one that pauses pauses the run. Re-entry through a delegation's tool row
re-enters the worker at its own newest row after that row, so the same role delegated twice does
two separate pieces of work, and a finished delegation never runs again.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from stores import Checkpoint, child_path

from ...models import Message, ToolCall
from .._agent import Agent, check_runner_name
from .._engine import AgentLevel, level_of
from .._level import Delegation, Level, Next, ReentryRoute
from .._runlog import RunLog
from .._versions import cached_fingerprint, check_version

if TYPE_CHECKING:
    from . import Runner

__all__ = ["Supervisor"]

_DELEGATE = "delegate_to_"


class Supervisor:
    """A ``manager`` agent and its ``workers`` by role (each an Agent, a Swarm or a Supervisor).

    ``version`` names this build of the supervisor (see :class:`~actors.Agent`).
    """

    __slots__ = ("_fingerprint", "manager", "name", "version", "workers")

    nested = True
    kind = "supervisor"
    name: str
    manager: Agent
    workers: dict[str, Runner]
    version: str | None

    def __init__(
        self, name: str, manager: Agent, workers: Mapping[str, Runner], *, version: str | None = None
    ) -> None:
        check_runner_name("supervisor", name)
        if not isinstance(manager, Agent):
            raise TypeError(
                f"supervisor {name!r}: the manager must be an Agent, not {type(manager).__name__}"
            )
        if not workers:
            raise ValueError(f"supervisor {name!r} needs at least one worker")
        for role, worker in workers.items():
            check_runner_name(f"supervisor {name!r}: worker role", role)
            if not hasattr(worker, "kind"):
                raise TypeError(f"supervisor {name!r}: worker {role!r} is not an Agent, Swarm or Supervisor")
            if manager.has_tool(_DELEGATE + role):
                raise ValueError(f"supervisor {name!r}: the manager already has a tool {_DELEGATE + role!r}")
        self.name = name
        self.manager = manager
        self.workers = dict(workers)
        self.version = check_version(f"supervisor {name!r}", version)
        self._fingerprint: dict[str, Any] | None = None

    #: The fingerprint a run of this runner records on its first row: its structure and its
    #: members' definitions (computed once).
    fingerprint = property(cached_fingerprint)

    @property
    def instructions(self) -> str | None:
        """The manager's instructions (the system message of a run of this supervisor)."""
        return self.manager.instructions

    @property
    def label(self) -> str:
        """This runner's ``agent_path`` as a root: ``supervisor:<name>``."""
        return child_path(None, self.kind, self.name)

    def first_messages(self, task: str) -> list[Message]:
        return self.manager.first_messages(task)

    def level(self, rows: RunLog, path: str, root: Any) -> Level:
        """The manager's level at ``path``, with one delegate tool per worker."""
        specials = {_DELEGATE + role: _Delegate(role, worker) for role, worker in self.workers.items()}
        return AgentLevel(agent=self.manager, rows=rows, path=path, specials=specials, runner=root)

    def check_tool(self, path: str, own_path: str, name: str, execution_id: str) -> None:
        """Refuse (``ToolNotFound``) a re-entry of a tool the agent at ``path`` lacks."""
        if path == own_path:
            if not name.startswith(_DELEGATE) or name[len(_DELEGATE) :] not in self.workers:
                self.manager.check_tool(path, own_path, name, execution_id)
            return
        for role, worker in self.workers.items():
            below = child_path(own_path, "worker", role)
            if path == below or path.startswith(below + "/"):
                worker.check_tool(path, below, name, execution_id)
                return

    def __repr__(self) -> str:
        return f"Supervisor({self.name!r}, manager={self.manager.name!r}, workers={list(self.workers)!r})"


class _Delegate:
    """The manager's ``delegate_to_<role>(task)`` tool: runs the worker as a child on ``task``."""

    __slots__ = ("name", "role", "worker")

    def __init__(self, role: str, worker: Runner) -> None:
        self.role = role
        self.worker = worker
        self.name = _DELEGATE + role

    def schema(self) -> dict[str, Any]:
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": f"Delegate a task to the {self.role} worker; returns its final answer.",
                "parameters": {
                    "type": "object",
                    "properties": {"task": {"type": "string", "description": "What the worker should do."}},
                    "required": ["task"],
                },
            },
        }

    async def call(
        self, engine: AgentLevel, row: Checkpoint, call: ToolCall, below: ReentryRoute | None
    ) -> Next | str:
        task = call.arguments.get("task")
        if not isinstance(task, str) or set(call.arguments) - {"task"}:
            return f"Tool '{self.name}' failed: it takes one argument, task (a string)"
        level = level_of(
            self.worker, engine.rows, child_path(engine.path, "worker", self.role), engine.runner
        )
        if below is not None:
            return Delegation(level, lambda: level.reenter(below))
        messages = self.worker.first_messages(task)
        return Delegation(level, lambda: level.begin(messages))
