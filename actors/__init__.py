"""tether's actors: a supervised actor runtime on anyio, and durable AI-agent runs built on it.

A durable run is one actor per ``execution_id``; it writes a checkpoint row before every step, pauses
for a human with :func:`interrupt`, resumes exactly once from any process with the same store, and
re-enters at its newest row after a crash. Store errors are re-exported from :mod:`stores`.

Layout: ``_core/`` is the general actor runtime (actor, context, ref, cell, mailbox, supervision,
registry, ask deadlines, the ``"tether"`` logger) and knows nothing of runs; ``_durable/`` is the
durable-run layer on top of it (Agent, tools, interrupt, idempotent, the run messages, the run log,
the engine, the run actor, runs); ``_system.py`` (``ActorSystem``) is the only module that imports
both; ``models/`` holds the models a run calls; ``events/`` the typed events of ``RunRef.events()``.
Everything public is re-exported here, and its ``__module__`` reads ``actors`` (tracebacks and reprs name ``actors.AlreadyResumed``, not where it
happens to be defined).
"""

from stores import (
    AlreadyResumed,
    CheckpointError,
    IdempotencyError,
    Queue,
    RunExists,
    RunNotFound,
    SerializationError,
    TetherError,
    WriteConflict,
)
from stores import fixup_module_metadata as _fixup_module_metadata

from . import events, models
from ._core import (
    Actor,
    ActorContext,
    ActorCrashed,
    ActorInfo,
    ActorRef,
    ActorStopped,
    AskDeadlock,
    AskTimeout,
    ChildSpec,
    MailboxFull,
    Restart,
    RestartIntensityExceeded,
    RestartStrategy,
    Supervision,
)
from ._durable import (
    Agent,
    Cancel,
    HandoffLimitExceeded,
    MaxTurnsExceeded,
    Recover,
    Resume,
    ResumeRequired,
    RunnerChanged,
    RunnerNotFound,
    RunnerVersionMismatch,
    RunRef,
    RunResult,
    RunSummary,
    Schedule,
    SideEffectInDoubt,
    Signal,
    Supervisor,
    Swarm,
    ToolNotFound,
    current_run,
    idempotency_key,
    idempotent,
    interrupt,
    sleep,
    sleep_until,
    tool,
    wait_signal,
)
from ._system import ActorSystem

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
    "HandoffLimitExceeded",
    "IdempotencyError",
    "MailboxFull",
    "MaxTurnsExceeded",
    "Queue",
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
    "RunSummary",
    "RunnerChanged",
    "RunnerNotFound",
    "RunnerVersionMismatch",
    "Schedule",
    "SerializationError",
    "SideEffectInDoubt",
    "Signal",
    "Supervision",
    "Supervisor",
    "Swarm",
    "TetherError",
    "ToolNotFound",
    "WriteConflict",
    "current_run",
    "idempotency_key",
    "idempotent",
    "interrupt",
    "sleep",
    "sleep_until",
    "tool",
    "wait_signal",
]


_fixup_module_metadata(__name__, globals(), also=["stores"])  # the re-exported errors speak for actors
_fixup_module_metadata(models.__name__, vars(models))
_fixup_module_metadata(events.__name__, vars(events))
del _fixup_module_metadata
