"""The protocol of a run actor, in one module: :class:`Resume` and every message a run takes.

The wire messages are ``msgspec`` tagged unions with stable tags (``spawn``, ``fork``, ``resume``,
``recover``, ``cancel``), handled with ``match``. :class:`Resume`, :class:`Recover` and
:class:`Cancel` are public (``system.send(execution_id, Cancel("..."))``). :class:`Request` carries
one of them to the run actor with the :class:`Reply` slot its sender waits on (in-process only).
"""

from collections.abc import Callable
from datetime import datetime
from typing import Any

import msgspec

from stores import Checkpoint, PendingInterrupt, SerializationError
from stores import decode_json as decode
from stores import encode_json as encode

from .._core import Failable, LazyEvent
from ..models import Message
from ._result import RunResult

__all__ = [
    "Answered",
    "Cancel",
    "Failed",
    "GiveUp",
    "HandedOff",
    "Outcome",
    "Paused",
    "Recover",
    "Reply",
    "Request",
    "RerunTool",
    "Resume",
    "ResumeRun",
    "RunMessage",
    "RunTool",
    "Signal",
    "Spawn",
    "SpawnFork",
    "Step",
    "TakeTurn",
    "Waiting",
    "Wake",
    "WorkDone",
]


class Resume(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """A human's decision on a paused run: ``approved``, plus free-form JSON ``metadata``
    (e.g. ``{"approver": "alice"}``).

    Checked when built, so a malformed decision never uses up a pause: ``approved`` must be a bool
    (not ``"yes"``, ``1`` or ``None``) and ``metadata`` a dict with str keys and JSON values, else
    ``TypeError`` naming what was wrong. Unknown fields are refused too: ``Resume(approved=True,
    data=1)`` raises ``TypeError``; decoding a stored dict that breaks any of this raises
    ``msgspec.ValidationError``.
    """

    approved: bool
    metadata: dict[str, Any] = {}

    def __post_init__(self) -> None:
        if type(self.approved) is not bool:
            raise TypeError(f"Resume(approved=...) takes a bool, not {type(self.approved).__name__}")
        if not isinstance(self.metadata, dict):
            raise TypeError(
                f"Resume(metadata=...) takes a dict (a JSON object), not {type(self.metadata).__name__}"
            )
        try:
            encode(self.metadata, path="$.metadata")
        except SerializationError as exc:
            raise TypeError(f"Resume(metadata=...) is not a JSON object: {exc}") from None

    def to_dict(self) -> dict[str, Any]:
        """The JSON form stored in a ``resume`` row's ``node_input`` (tuples in the metadata become lists)."""
        return {"approved": self.approved, "metadata": decode(encode(self.metadata, path="$.metadata"))}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Resume":
        """Read :meth:`to_dict`'s form back (strictly: types checked, unknown keys refused)."""
        return msgspec.convert(data, cls)


class Signal(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """A message into a run: ``name`` and a JSON ``payload``, kept in the run's inbox (in the store)
    until a row of the run consumes it. ``Signal("message", "text")`` steers the conversation: the
    text is a user message at the run's next model turn. A tool takes one with
    :func:`~actors.wait_signal`. The payload is checked against the JSON rule when sent."""

    name: str
    payload: Any = None

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise TypeError(f"Signal(name=...) takes a non-empty str, not {self.name!r}")


class Spawn(msgspec.Struct, tag="spawn", frozen=True):
    """Start a fresh run from ``messages`` (their JSON forms)."""

    messages: list[dict[str, Any]]


class SpawnFork(msgspec.Struct, tag="fork", frozen=True):
    """Start a fork from ``base`` (a step of another run), with an optional next user message."""

    base: Checkpoint
    appended: dict[str, Any] | None = None


class ResumeRun(msgspec.Struct, tag="resume", frozen=True):
    """Claim the run's pause with ``resume``."""

    resume: Resume


class Recover(msgspec.Struct, tag="recover", frozen=True):
    """Crash recovery: re-enter the run at its newest row (a paused run needs a ``Resume`` instead)."""


class Cancel(msgspec.Struct, tag="cancel", frozen=True):
    """End the run with a failed ``run_end`` marker (reason ``cancelled`` by default)."""

    reason: str = "cancelled"


class GiveUp(msgspec.Struct, tag="give_up", frozen=True):
    """End a run that was recovered too often without a new step: a failed ``run_end`` whose error
    is ``error`` (reason ``max_recoveries``). Sent by the fleet's sweep."""

    error: str


class Wake(msgspec.Struct, tag="wake", frozen=True):
    """Wake a run resting at a ``wait`` row (its signal came, or its time): the tool that waits
    runs again from the top. Nothing happens when the run no longer rests there, or is not due."""


RunMessage = Spawn | SpawnFork | ResumeRun | Recover | Cancel | GiveUp | Wake
"""Every message a run actor takes (a tagged union: decode with ``msgspec.json.decode(..., type=RunMessage)``)."""


class TakeTurn(msgspec.Struct, tag="take_turn", frozen=True):
    """A step of the run itself: write the ``turn:N`` row and call the model (``row``: the row is
    written already, by the caller of ``spawn``; only the call is left)."""

    turn: int
    row: Checkpoint | None = None


class RunTool(msgspec.Struct, tag="run_tool", frozen=True):
    """A step of the run itself: write the row of tool call ``index`` of turn ``turn``, then run it
    (past the reply's last call: the next turn)."""

    turn: int
    index: int


class RerunTool(msgspec.Struct, tag="rerun_tool", frozen=True):
    """Re-entry at a tool row: run call ``index`` of turn ``turn`` again with its saved arguments and
    ``decision`` (a claimed ``Resume``); after a pause its later siblings get the note (rule 6)."""

    turn: int
    index: int
    decision: dict[str, Any] | None = None
    after_pause: bool = False


Step = TakeTurn | RunTool | RerunTool
"""The steps of a level, taken one at a time; a run's actor handles its other messages meanwhile."""


class WorkDone(msgspec.Struct, tag="work_done", frozen=True):
    """The task of a level's work reports to its actor (in-process only): what the work gave
    (``value``), the ``error`` that ended it, or ``cut``: the run cancelled it (a cancel, a hand-off
    to the fleet, a lost lock), with what it wrote written."""

    value: Any = None
    error: Any = None
    cut: bool = False


class Answered(msgspec.Struct, tag="answered", frozen=True):
    """An agent (or a topology) answered: ``output`` is its final text."""

    output: str


class Paused(msgspec.Struct, tag="paused", frozen=True):
    """A tool at some depth paused: its ``hitl_pause`` row and ``pending`` row are written."""

    pending: PendingInterrupt


class Waiting(msgspec.Struct, tag="waiting", frozen=True):
    """A tool at some depth rests (``wait_signal``, ``sleep``): its ``wait`` row is written; the
    run is woken when ``name``'s signal comes or at ``wake_at``."""

    name: str | None = None
    wake_at: datetime | None = None


class Failed(msgspec.Struct, tag="failed", frozen=True):
    """An agent failed; ``error`` names the exception (``"MaxTurnsExceeded: ..."``)."""

    error: str


class HandedOff(msgspec.Struct, tag="handed_off", frozen=True):
    """A swarm member handed control to its peer ``to``; ``messages`` is the conversation so far."""

    to: str
    reason: str
    context: dict[str, Any]
    messages: list[Message]


Outcome = Answered | Paused | Waiting | Failed | HandedOff
"""How a level of a run ended its work: what a child reports to its parent, what the root concludes from."""


class Reply:
    """Where the outcome of one message to a run lands; ``RunRef.result()`` waits on it.

    ``started`` is set once the run is owned and its first row is down (or the message was refused),
    so ``spawn`` can raise ``RunExists`` itself.
    """

    __slots__ = ("done", "error", "on_settle", "result", "started")

    def __init__(self) -> None:
        # Most replies are never awaited unset (a spawn's first row is down before ``spawn`` checks).
        self.started = LazyEvent()
        self.done = LazyEvent()
        self.result: RunResult | None = None
        self.error: BaseException | None = None
        #: Called once it is settled (the system then forgets it: see ``Runs._track``).
        self.on_settle: Callable[[], None] | None = None

    def settle(self, result: RunResult | None, error: BaseException | None) -> None:
        self.result, self.error = result, error
        self.started.set()
        self.done.set()
        on_settle, self.on_settle = self.on_settle, None
        if on_settle is not None:
            on_settle()


class Request(Failable):
    """A message for a run actor and the reply slot of whoever sent it (in-process only)."""

    __slots__ = ("message", "reply")

    def __init__(self, message: RunMessage, reply: Reply) -> None:
        self.message = message
        self.reply = reply

    def fail(self, error: BaseException) -> None:
        """Settle the reply with ``error`` (waiters on ``started`` and ``done`` wake), if unsettled."""
        if not self.reply.done.is_set():
            self.reply.settle(None, error)
