"""Human-in-the-loop pauses: :func:`interrupt` and the pause signal (the :class:`Resume` decision is a run message).

On a first pass ``interrupt()`` stops the tool by raising :class:`PauseSignal`; the run catches
it, writes the pause, and stops. When the run is resumed, the tool runs again from its start with
the claimed :class:`Resume` bound for that call, and ``interrupt()`` returns it instead.

:class:`PauseSignal` derives from ``BaseException``, not ``Exception``, on purpose: a tool's
broad ``except Exception`` (common around network calls) must not swallow the pause. Like
cancellation, it is meant to pass through user code; do not catch it.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from stores import decode_json as decode
from stores import encode_json as encode

from ._context import current_resume
from ._messages import Resume

__all__ = ["PauseSignal", "interrupt"]


class PauseSignal(BaseException):
    """Raised by :func:`interrupt` to pause the run; carries ``reason`` and the frozen ``context``.

    Internal: the run catches it. It is a ``BaseException`` so ``except Exception`` in a tool lets it through.
    """

    def __init__(self, reason: str, context: dict[str, Any], expires_in: float | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.context = context
        self.expires_in = expires_in

    def __str__(self) -> str:
        return f"interrupt({self.reason!r}): the run pauses here (uncaught outside a run)"


def interrupt(
    reason: str, context: dict[str, Any] | None = None, *, expires_in: float | timedelta | None = None
) -> Resume:
    """Pause the run for a human decision, or return that decision when the run is resumed.

    Call it from inside a tool (sync or async). ``context`` (JSON) is what the approver sees; it is
    frozen as JSON at this call: changing the dict afterwards changes nothing stored. A context that
    is not JSON raises ``SerializationError`` naming its path, before anything pauses.

    On resume the whole tool runs again and every ``interrupt()`` in it returns the same
    :class:`Resume`; so put side effects before the pause behind ``@idempotent``.

    ``expires_in`` (seconds, or a ``timedelta``): a pause still waiting that long after it was
    written is resolved by a fleet sweep as ``Resume(approved=False, metadata={"expired": True})``,
    claimed exactly once like any decision.
    """
    resume = current_resume()
    if resume is not None:
        return resume
    if not isinstance(reason, str):
        raise TypeError(f"interrupt() reason must be a str, not {type(reason).__name__}")
    if context is None:
        context = {}
    if not isinstance(context, dict):
        raise TypeError(f"interrupt() context must be a dict, not {type(context).__name__}")
    seconds = expires_in.total_seconds() if isinstance(expires_in, timedelta) else expires_in
    if seconds is not None and (
        isinstance(seconds, bool) or not isinstance(seconds, int | float) or not 0 < seconds < 1e9
    ):
        raise ValueError(f"interrupt() expires_in must be a positive number of seconds, not {expires_in!r}")
    frozen: dict[str, Any] = decode(encode(context, path="$.context"))
    encode(reason, path="$.reason")
    raise PauseSignal(reason, frozen, None if seconds is None else float(seconds))
