"""Errors of durable runs: a missing runner or tool, a runner of another version or changed under
its run, a pause that needs a decision, a run out of turns, a side effect in doubt; and the
refusals the durable layer words itself with the store's error types (one constructor each).

Each derives from :class:`stores.TetherError` and names the run, runner or tool it is about,
so a message read in a log says what to fix.
"""

from __future__ import annotations

__all__ = [
    "HandoffLimitExceeded",
    "MaxTurnsExceeded",
    "ResumeRequired",
    "RunnerChanged",
    "RunnerNotFound",
    "RunnerVersionMismatch",
    "SideEffectInDoubt",
    "ToolNotFound",
    "held_elsewhere",
    "not_in_store",
    "nothing_to_claim",
    "storable_text",
    "unfit_tool_name",
]

from collections.abc import Sequence
from typing import TypeVar

from stores import AlreadyResumed, Checkpoint, InvalidPath, RunNotFound, TetherError

E = TypeVar("E", bound=TetherError)


def not_in_store(execution_id: str) -> RunNotFound:
    """A request about a run the store has no row of."""
    return RunNotFound(f"run {execution_id!r} has no checkpoints in this store")


def nothing_to_claim(execution_id: str, step: Checkpoint) -> AlreadyResumed:
    """A claim of a run whose newest step is not a pause waiting for its decision."""
    return AlreadyResumed(
        f"run {execution_id!r} has no pending interrupt to claim: its newest step is "
        f"{step.node_id!r} ({step.step_type})"
    )


def held_elsewhere(execution_id: str, refusal: type[E]) -> E:
    """A take of the run refused: another live process (or actor here) holds it."""
    return refusal(f"run {execution_id!r} is owned by another live process or actor")


def unfit_tool_name(name: object, *, agent: str, source: str | None = None) -> InvalidPath:
    """A tool whose name no ``agent_path`` or ``node_id`` can carry, refused before a run writes it."""
    whose = (
        f"tool source {source!r} of agent {agent!r} lists a tool" if source else f"agent {agent!r} has a tool"
    )
    return InvalidPath(
        f"{whose} named {name!r}: a tool name must be a non-empty str without '/' or ':' "
        "(they separate the segments of agent_path and node_id)"
    )


def _of_run(execution_id: str | None) -> str:
    return f" (run {execution_id!r})" if execution_id else ""


class RunnerNotFound(TetherError, LookupError):
    """The rows name a runner (Agent, Swarm, Supervisor) this process was not given."""

    def __init__(
        self, runner: str, *, execution_id: str | None = None, registered: Sequence[str] = ()
    ) -> None:
        known = ", ".join(repr(name) for name in registered) if registered else "none"
        super().__init__(
            f"no runner named {runner!r} is registered in this ActorSystem{_of_run(execution_id)} "
            f"(registered: {known}); pass it in ActorSystem(runners=[...])"
        )
        self.runner = runner
        self.execution_id = execution_id
        self.registered = tuple(registered)


class RunnerVersionMismatch(RunnerNotFound):
    """The run was recorded under a runner version this process was not given: nothing is written
    and the run stays as it was, for a process that has that version (see ``docs/versions.md``)."""

    def __init__(
        self,
        runner: str,
        version: str,
        *,
        execution_id: str | None = None,
        available: Sequence[str | None] = (),
    ) -> None:
        known = ", ".join("unversioned" if v is None else repr(v) for v in available) or "none"
        run = f"run {execution_id!r}" if execution_id else "the run"
        Exception.__init__(
            self,
            f"{run} was recorded under version {version!r} of runner {runner!r}, and this ActorSystem "
            f"has no runner {runner!r} of that version (versions here: {known}); register that "
            "version too in ActorSystem(runners=[...]) to finish it (docs/versions.md)",
        )
        self.runner = runner
        self.version = version
        self.execution_id = execution_id
        self.available = tuple(available)
        self.registered = (runner,) if available else ()


class RunnerChanged(RunnerNotFound):
    """The run's runner version is registered, but its code changed under the run in a way the step
    to re-enter cannot survive: that step's tool is gone or its schema changed. Nothing is written;
    give the changed code a new ``version`` and keep the old one registered until its runs end."""

    def __init__(
        self, runner: str, version: str, tool: str, change: str, *, execution_id: str | None = None
    ) -> None:
        run = f"run {execution_id!r}" if execution_id else "the run"
        Exception.__init__(
            self,
            f"runner {runner!r} version {version!r} changed under {run}: the step it "
            f"re-enters calls tool {tool!r}, which {change}; register the code the run started with "
            "under that version, and the changed code under a new version (docs/versions.md)",
        )
        self.runner = runner
        self.version = version
        self.tool = tool
        self.change = change
        self.execution_id = execution_id
        self.registered = (runner,)


class ToolNotFound(TetherError, LookupError):
    """A tool is looked up by a name the agent does not have (e.g. on resume after a rename)."""

    def __init__(self, tool: str, *, agent: str | None = None, execution_id: str | None = None) -> None:
        who = f"agent {agent!r}" if agent else "the agent"
        super().__init__(f"{who} has no tool named {tool!r}{_of_run(execution_id)}")
        self.tool = tool
        self.agent = agent
        self.execution_id = execution_id


class ResumeRequired(TetherError):
    """A paused run was resumed without a ``Resume``: a human decision is needed to go on."""

    def __init__(self, execution_id: str, *, reason: str | None = None) -> None:
        why = f" (reason: {reason!r})" if reason else ""
        super().__init__(
            f"run {execution_id!r} is paused{why}; resume it with a decision: "
            f"system.resume({execution_id!r}, Resume(approved=...))"
        )
        self.execution_id = execution_id
        self.reason = reason


class MaxTurnsExceeded(TetherError):
    """An agent used all of its ``max_turns`` model calls without a final answer."""

    def __init__(self, max_turns: int, *, agent: str | None = None, execution_id: str | None = None) -> None:
        who = f"agent {agent!r}" if agent else "the agent"
        super().__init__(f"{who} reached max_turns={max_turns} without a final answer{_of_run(execution_id)}")
        self.max_turns = max_turns
        self.agent = agent
        self.execution_id = execution_id


class HandoffLimitExceeded(TetherError):
    """A swarm hop went past the swarm's ``max_handoffs`` (counted per invocation of the swarm)."""

    def __init__(
        self, max_handoffs: int, *, swarm: str, path: Sequence[str], execution_id: str | None = None
    ) -> None:
        super().__init__(
            f"swarm {swarm!r} exceeded max_handoffs={max_handoffs} (hops: {' -> '.join(path)})"
            f"{_of_run(execution_id)}"
        )
        self.max_handoffs = max_handoffs
        self.swarm = swarm
        self.path = list(path)
        self.execution_id = execution_id


class SideEffectInDoubt(TetherError):
    """An ``@idempotent(at_most_once=True)`` call found its intent recorded and no result: an earlier
    attempt started the body and never stored its result (a crash, a cancel, or an exception), so its
    side effect may or may not have happened. The body is not run again; reconcile with the external
    system by :attr:`key` (what ``idempotency_key()`` returned inside that attempt)."""

    def __init__(self, function: str, key: str, *, execution_id: str) -> None:
        super().__init__(
            f"@idempotent(at_most_once=True) function {function!r} may already have run in run "
            f"{execution_id!r}: its intent was recorded but no result (idempotency key {key!r}); "
            f"it is not run again: check the external system for that key"
        )
        self.function = function
        self.key = key
        self.execution_id = execution_id


def storable_text(text: str) -> str:
    """``text`` as the JSON rule keeps it: a NUL or a lone surrogate (an exception's message may hold
    one) written as its escape, so a marker's error can always be stored."""
    if "\x00" in text:
        text = text.replace("\x00", "\\x00")
    if text.isascii():
        return text
    return text.encode("utf-8", "backslashreplace").decode("utf-8")
