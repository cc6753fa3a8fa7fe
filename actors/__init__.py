"""tether's actors: a supervised actor runtime on anyio, and durable AI-agent runs built on it.

A durable run is one actor per ``execution_id``; it writes a checkpoint row before every step, pauses
for a human with :func:`interrupt`, resumes exactly once from any process with the same store, and
re-enters at its newest row after a crash. Store errors are re-exported from :mod:`stores`.

Layout: ``_core/`` is the general actor runtime (actor, context, ref, cell, mailbox, supervision,
registry, ask deadlines, the ``"tether"`` logger) and knows nothing of runs; ``_durable/`` is the
durable-run layer on top of it (Agent, tools, interrupt, idempotent, the run messages, the run log,
the engine, the run actor, runs); ``_system.py`` (``ActorSystem``) is the only module that imports
both; ``models/`` holds the models a run calls. Everything public is re-exported here, and its
``__module__`` reads ``actors`` (tracebacks and reprs name ``actors.AlreadyResumed``, not where it
happens to be defined).
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
    MaxTurnsExceeded,
    Recover,
    Resume,
    ResumeRequired,
    RunnerNotFound,
    RunRef,
    RunResult,
    ToolNotFound,
    current_run,
    idempotent,
    interrupt,
    tool,
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


def _fixup_module_metadata(module_name: str, namespace: dict[str, object]) -> None:
    """Make every public class and function here report ``module_name`` as its ``__module__``.

    Names defined in a private module of this package or of :mod:`stores` (the re-exported errors)
    are rewritten; anything else is left alone. Modules that define a public ``msgspec.Struct`` do not
    postpone annotations, since msgspec resolves string annotations in the module ``__module__`` names.
    """
    for name in namespace["__all__"]:  # type: ignore[attr-defined]
        obj = namespace[name]
        origin = getattr(obj, "__module__", None)
        if not isinstance(origin, str) or origin == module_name:
            continue
        if isinstance(obj, type) or callable(obj):
            if origin.startswith(f"{module_name}._") or origin.split(".")[0] == "stores":
                obj.__module__ = module_name


_fixup_module_metadata(__name__, globals())
del _fixup_module_metadata
