"""Errors of the actor runtime.

Each derives from :class:`stores.TetherError`, so ``except TetherError`` catches every error
tether raises on purpose.
"""

from __future__ import annotations

from stores import TetherError

__all__ = [
    "ActorCrashed",
    "ActorStopped",
    "AskDeadlock",
    "AskTimeout",
    "MailboxFull",
    "RestartIntensityExceeded",
]


class MailboxFull(TetherError):
    """``send_nowait`` found the actor's bounded mailbox full."""


class AskTimeout(TetherError, TimeoutError):
    """An ``ask`` got no reply within its ``timeout``."""


class ActorStopped(TetherError):
    """The actor stopped (or was stopping) before it could take or answer the message."""


class ActorCrashed(TetherError):
    """The actor's handler raised; the handler's exception is the ``__cause__``."""

    def __init__(self, message: str, *, actor_id: str = "") -> None:
        super().__init__(message)
        self.actor_id = actor_id


class RestartIntensityExceeded(ActorCrashed):
    """A supervising node saw more restarts than ``max_restarts`` within ``within`` seconds.

    It stopped its children and failed to its own parent; the child's last error is the ``__cause__``.
    When it reaches the system, the ``ActorSystem`` block stops every actor and raises it.
    """


class AskDeadlock(ActorStopped):
    """An actor asked itself from inside its own handler: the reply could never come.

    It subclasses :class:`ActorStopped` because, from the caller's view, the target cannot answer.
    """
