"""``RunResult``: how a run stands when ``RunRef.result()`` returns."""

from datetime import datetime
from typing import Any, Literal

import msgspec

from stores import COMPLETED, INTERRUPTED, RUN_END, WAIT, WAKE_AT, Checkpoint, PendingInterrupt, Store

from ..models import Usage
from ._output import OUTPUT_TYPE, plain_value
from ._runlog import usage_of

__all__ = ["RunResult", "RunStatus", "resting_result"]

RunStatus = Literal["completed", "paused", "waiting", "failed"]


class RunResult(msgspec.Struct, kw_only=True, frozen=True):
    """The outcome of a run so far: it paused (``pending`` says for what), rests at a wait
    (``waiting``: a tool's ``wait_signal`` or ``sleep``; ``wake_at`` is its time, if any),
    completed or failed.

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
    wake_at: datetime | None = None


async def resting_result(store: Store, newest: Checkpoint) -> RunResult | None:
    """How the run stands if ``newest`` is a resting row (its end, a pause or a wait); else ``None``."""
    execution_id, snapshot = newest.execution_id, newest.state_snapshot
    usage = usage_of(snapshot)
    if newest.step_type == RUN_END:
        if newest.status == COMPLETED:
            output = snapshot.get("output")
            value = plain_value(output) if snapshot.get(OUTPUT_TYPE) else None
            return RunResult(
                execution_id=execution_id, status="completed", output=output, value=value, usage=usage
            )
        error = snapshot.get("run_error")
        return RunResult(execution_id=execution_id, status="failed", error=error, usage=usage)
    if newest.step_type == WAIT:
        found = snapshot.get(WAKE_AT)
        wake_at = datetime.fromisoformat(found) if isinstance(found, str) else None
        return RunResult(execution_id=execution_id, status="waiting", wake_at=wake_at, usage=usage)
    if newest.status == INTERRUPTED:
        found_pending = await store.pending(execution_id)
        pending = found_pending[0] if found_pending else None
        return RunResult(execution_id=execution_id, status="paused", pending=pending, usage=usage)
    return None
