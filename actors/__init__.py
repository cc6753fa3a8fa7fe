"""tether's actors: a supervised actor runtime on anyio, and durable AI-agent runs built on it.

A durable run is one actor per ``execution_id``; it writes a checkpoint row before every step, pauses
for a human with :func:`interrupt`, resumes exactly once from any process with the same store, and
re-enters at its newest row after a crash. Store errors are re-exported from :mod:`stores`.
"""

from stores import (
    AlreadyResumed,
    CheckpointError,
    IdempotencyError,
    RunExists,
    RunNotFound,
    SerializationError,
    TetherError,
    WriteConflict,
)

from ._actor import Actor, ActorContext
from ._agent import Agent
from ._context import current_run
from ._errors import (
    ActorCrashed,
    ActorStopped,
    AskDeadlock,
    AskTimeout,
    MailboxFull,
    RestartIntensityExceeded,
)
from ._idempotent import idempotent
from ._interrupt import Resume, interrupt
from ._ref import ActorInfo, ActorRef
from ._result import RunResult
from ._run import Cancel, Recover
from ._run_errors import MaxTurnsExceeded, ResumeRequired, RunnerNotFound, ToolNotFound
from ._runs import RunRef
from ._supervision import ChildSpec, Restart, RestartStrategy, Supervision
from ._system import ActorSystem
from ._tools import tool

__all__ = [
    "Actor",
    "ActorContext",
    "ActorCrashed",
    "ActorInfo",
    "ActorRef",
    "ActorStopped",
    "ActorSystem",
    "Agent",
    "AlreadyResumed",
    "AskDeadlock",
    "AskTimeout",
    "Cancel",
    "CheckpointError",
    "ChildSpec",
    "IdempotencyError",
    "MailboxFull",
    "MaxTurnsExceeded",
    "Recover",
    "Restart",
    "RestartIntensityExceeded",
    "RestartStrategy",
    "Resume",
    "ResumeRequired",
    "RunExists",
    "RunNotFound",
    "RunRef",
    "RunResult",
    "RunnerNotFound",
    "SerializationError",
    "Supervision",
    "TetherError",
    "ToolNotFound",
    "WriteConflict",
    "current_run",
    "idempotent",
    "interrupt",
    "tool",
]
