"""``RunResult``: how a run stands when ``RunRef.result()`` returns."""

from typing import Any, Literal

import msgspec

from stores import PendingInterrupt

from ..models import Usage

__all__ = ["RunResult", "RunStatus"]

RunStatus = Literal["completed", "paused", "failed"]


class RunResult(msgspec.Struct, kw_only=True, frozen=True):
    """The outcome of a run so far: it paused (``pending`` says for what), completed or failed.

    ``value`` is the decoded answer of an agent with an ``output_type`` (``output`` holds its JSON
    text): an instance of that type when this process has the runner that finished the run, the
    plain JSON value (dicts and lists) when the result is read from the rows alone; else ``None``.
    ``usage`` sums the tokens the run's model calls were billed for, over all its activations.
    """

    execution_id: str
    status: RunStatus
    output: str | None = None
    pending: PendingInterrupt | None = None
    error: str | None = None
    value: Any = None
    usage: Usage = Usage()
