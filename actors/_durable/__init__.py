"""Durable runs on the actor runtime: one supervised actor per ``execution_id``, a row before every step.

Built on ``actors._core`` (never the other way) and on ``stores``. The run's messages live in
``_messages``, its rows (``seq`` and the writes) in ``_runlog``, the agent loop in ``_engine``, the run
actor in ``_run_actor``, the public operations in ``_runs`` and the fleet (queue, sweep, claim) in
``_sweep``. The rules and the row grammar the
code cites are those of ``docs/durability.md``.
"""

from ._agent import Agent
from ._context import current_run
from ._errors import (
    HandoffLimitExceeded,
    MaxTurnsExceeded,
    ResumeRequired,
    RunnerChanged,
    RunnerNotFound,
    RunnerVersionMismatch,
    SideEffectInDoubt,
    ToolNotFound,
)
from ._idempotent import idempotency_key, idempotent
from ._interrupt import interrupt
from ._messages import Cancel, Recover, Resume, Signal
from ._queries import RunSummary, list_runs, run_status
from ._result import RunResult
from ._runs import RunRef, Runs
from ._schedules import Schedule
from ._sweep import DEFAULT_MAX_RECOVERIES, FleetWorker
from ._tools import tool
from ._waits import sleep, sleep_until, wait_signal
from .topologies import Runner, Supervisor, Swarm

__all__ = [
    "DEFAULT_MAX_RECOVERIES",
    "Agent",
    "Cancel",
    "FleetWorker",
    "HandoffLimitExceeded",
    "MaxTurnsExceeded",
    "Recover",
    "Resume",
    "ResumeRequired",
    "RunRef",
    "RunResult",
    "RunSummary",
    "Runner",
    "RunnerChanged",
    "RunnerNotFound",
    "RunnerVersionMismatch",
    "Runs",
    "Schedule",
    "SideEffectInDoubt",
    "Signal",
    "Supervisor",
    "Swarm",
    "ToolNotFound",
    "current_run",
    "idempotency_key",
    "idempotent",
    "interrupt",
    "list_runs",
    "run_status",
    "sleep",
    "sleep_until",
    "tool",
    "wait_signal",
]
