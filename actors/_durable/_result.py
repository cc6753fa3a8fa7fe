"""``RunResult``: how a run stands when ``RunRef.result()`` returns."""

from typing import Literal

import msgspec

from stores import PendingInterrupt

__all__ = ["RunResult", "RunStatus"]

RunStatus = Literal["completed", "paused", "failed"]


class RunResult(msgspec.Struct, kw_only=True, frozen=True):
    """The outcome of a run so far: it paused (``pending`` says for what), completed or failed."""

    execution_id: str
    status: RunStatus
    output: str | None = None
    pending: PendingInterrupt | None = None
    error: str | None = None
