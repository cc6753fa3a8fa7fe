"""The internals of ``actors`` that tests and tooling reach: no stability promise.

What the public face (:mod:`actors`, :mod:`actors.models`, :mod:`actors.events`) leaves out and a
white-box test needs: the run context, the run messages, the run log, tools and their sources, the
models' stream and intake helpers, and the modules whose knobs (timeouts, bounds) a test turns with
``monkeypatch`` (named ``<module>_module``). Any name here may change or go in any release.
"""

from actors._core import LazyEvent, LoopTasks, cancel_scope, loop_time, suspending, tether_logger, within
from actors._durable import _idempotent as idempotent_module
from actors._durable import _run_actor as run_actor_module
from actors._durable import _sweep as sweep_module
from actors._durable import _timers as timers_module
from actors._durable import _tool_watch as tool_watch_module
from actors._durable._context import RunContext, bind, bind_run, current_context, current_resume
from actors._durable._engine import SIBLING_NOTE
from actors._durable._idempotent import module_name
from actors._durable._interrupt import PauseSignal
from actors._durable._messages import Reply, Request, ResumeRun, RunMessage, Spawn, SpawnFork
from actors._durable._owned import owned
from actors._durable._runlog import RunLog, StepAbandoned, StepLog
from actors._durable._sources import RECORD, SourceSession, ToolSource
from actors._durable._tools import Tool, ToolOutcome
from actors._replica import KickingOwnedStore, KickingStore, kicking
from actors.models._intake import take_in
from actors.models._stream import text_sink
from actors.models._types import Transcript

__all__ = [
    "RECORD",
    "SIBLING_NOTE",
    "KickingOwnedStore",
    "KickingStore",
    "LazyEvent",
    "LoopTasks",
    "PauseSignal",
    "Reply",
    "Request",
    "ResumeRun",
    "RunContext",
    "RunLog",
    "RunMessage",
    "SourceSession",
    "Spawn",
    "SpawnFork",
    "StepAbandoned",
    "StepLog",
    "Tool",
    "ToolOutcome",
    "ToolSource",
    "Transcript",
    "bind",
    "bind_run",
    "cancel_scope",
    "current_context",
    "current_resume",
    "idempotent_module",
    "kicking",
    "loop_time",
    "module_name",
    "owned",
    "run_actor_module",
    "suspending",
    "sweep_module",
    "take_in",
    "tether_logger",
    "text_sink",
    "timers_module",
    "tool_watch_module",
    "within",
]
