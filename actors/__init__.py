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

import inspect
import sys

import msgspec

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


def _fixup_module_metadata(module_name: str, namespace: dict[str, object]) -> None:
    """Make every public class and function of ``namespace`` report ``module_name`` as its module.

    Names defined in a private module of this package or in :mod:`stores` (the re-exported errors)
    are rewritten; anything else is left alone. A class's own string annotations are evaluated first,
    in the module that defined it, because msgspec (and ``typing.get_type_hints``) would otherwise look
    them up in ``module_name``, which does not hold those names. A name that module imports only for
    type checking stays a string (a ``msgspec.Struct`` must not have one: decoding it would fail).
    """
    for name in namespace["__all__"]:  # type: ignore[attr-defined]
        obj = namespace[name]
        origin = getattr(obj, "__module__", None)
        if not isinstance(origin, str) or origin == module_name or not callable(obj):
            continue
        if not (origin.startswith(f"{module_name}._") or origin.split(".")[0] == "stores"):
            continue
        if isinstance(obj, type):
            scope = vars(sys.modules[origin])
            resolved: dict[str, object] = {}
            for key, annotation in inspect.get_annotations(obj).items():
                try:
                    resolved[key] = eval(annotation, scope) if isinstance(annotation, str) else annotation
                except NameError:
                    if issubclass(obj, msgspec.Struct):
                        raise
                    resolved[key] = annotation
            if resolved:
                obj.__annotations__ = resolved
        obj.__module__ = module_name


_fixup_module_metadata(__name__, globals())
_fixup_module_metadata(models.__name__, vars(models))
_fixup_module_metadata(events.__name__, vars(events))
del _fixup_module_metadata
