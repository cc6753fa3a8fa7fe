"""The actor runtime: actors, refs, bounded mailboxes, supervision, the keyed registry, ask deadlines.

Nothing here knows about durable runs (``actors._durable`` builds on this package, never the other
way). What the durable layer needs from the runtime it reaches through this face: the
:class:`ActorRuntime` (``deliver`` to a keyed actor), :class:`Failable` mailbox items and
``ActorContext.passivate()``. Every log event goes to the standard-library logger ``"tether"``.
"""

from ._actor import Actor, ActorContext, make_spec
from ._errors import (
    ActorCrashed,
    ActorStopped,
    AskDeadlock,
    AskTimeout,
    MailboxFull,
    RestartIntensityExceeded,
)
from ._event import LazyEvent
from ._log import LOGGER, tether_logger
from ._mailbox import Failable
from ._primitives import (
    LoopTasks,
    cancel_scope,
    loop_time,
    new_event,
    running_asyncio_loop,
    shielded,
    suspending,
    within,
)
from ._ref import ActorInfo, ActorRef
from ._runtime import ActorRuntime
from ._supervision import ChildSpec, Restart, RestartStrategy, Supervision

__all__ = [
    "LOGGER",
    "Actor",
    "ActorContext",
    "ActorCrashed",
    "ActorInfo",
    "ActorRef",
    "ActorRuntime",
    "ActorStopped",
    "AskDeadlock",
    "AskTimeout",
    "ChildSpec",
    "Failable",
    "LazyEvent",
    "LoopTasks",
    "MailboxFull",
    "Restart",
    "RestartIntensityExceeded",
    "RestartStrategy",
    "Supervision",
    "cancel_scope",
    "loop_time",
    "make_spec",
    "new_event",
    "running_asyncio_loop",
    "shielded",
    "suspending",
    "tether_logger",
    "within",
]
