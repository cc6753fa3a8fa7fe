"""What a stopping system says about the runs it waits for (Ctrl-C, leaving the block), and Ctrl-C
reaching the event loop at once while a thread runs.

A run mid-step gets the shutdown's bound to reach its next row; an async step is cancelled then
(and says how to resume the run as it stops), but a sync tool runs in a thread that nothing can
interrupt, so the stop waits until that tool returns (or its ``timeout`` ends it). For those the
operator is told at once, per run: where it stands, for how long it has been there, how long the
stop waits for it, and how to resume it afterwards.

A signal may be taken by any thread of the process (a sync tool's, the store's); Python runs its
handler in the main thread only once that thread runs again, and an asyncio loop asleep in its
selector does not wake for it, so Ctrl-C would wait for the tool to end before anything is said.
:class:`SignalWake` gives Python a wakeup fd (as trio does for its own loop) and wakes the loop
whenever a byte arrives on it.
"""

from __future__ import annotations

import signal
import socket
import threading
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Final

import anyio
import anyio.from_thread
import anyio.lowlevel

from stores import TOOL_CALL, Store, parse_path

from .._core import tether_logger
from ._agent import Agent
from .topologies import Runner, Supervisor, Swarm

if TYPE_CHECKING:
    from ._tools import Tool

__all__ = ["SignalWake", "report_stop"]

_log = tether_logger()

#: Bound on reading the newest rows of the runs a stop waits for.
_READ_TIMEOUT: Final = 2.0


def _tools_named(runner: Runner, name: str) -> list[Tool]:
    """The tools called ``name`` anywhere in ``runner`` (an agent, a swarm's members, a
    supervisor's manager and workers)."""
    match runner:
        case Agent():
            return [t for t in runner.tools if t.name == name]
        case Swarm():
            return [t for member in runner.agents for t in _tools_named(member, name)]
        case Supervisor():
            found = _tools_named(runner.manager, name)
            for worker in runner.workers.values():
                found += _tools_named(worker, name)
            return found
    return []


def _sync_tool(runner: Runner, tool_name: str | None) -> Tool | None:
    """The sync tool called ``tool_name`` in ``runner``, if the step in flight is one."""
    if tool_name is None:
        return None
    return next((t for t in _tools_named(runner, tool_name) if not t.is_async), None)


async def report_stop(store: Store, runs: Iterable[tuple[str, Runner]], bound: float) -> None:
    """A WARNING per run (``execution_id``, its runner) whose step in flight is a sync tool, which
    the stop cannot interrupt: where it is, since when, that the stop waits until the tool returns
    (past ``bound``), and how to resume it. Reads each run's newest row, bounded. A run in any
    other step stops within ``bound`` and says so itself as it stops."""
    now = datetime.now(UTC)
    with anyio.CancelScope(shield=True), anyio.move_on_after(_READ_TIMEOUT):
        for execution_id, runner in runs:
            try:
                newest = await store.latest(execution_id)
                segments = parse_path(newest.agent_path) if newest and newest.agent_path else []
            except Exception:  # a row that cannot be read: nothing to say about it
                continue
            if newest is None or newest.step_type != TOOL_CALL or not segments or segments[-1][0] != "tool":
                continue
            tool = _sync_tool(runner, segments[-1][1])
            if tool is None:
                continue
            limit = "no timeout" if tool.timeout is None else f"its timeout: {tool.timeout:g} s"
            _log.warning(
                "stopping: waiting for a run mid-step",
                execution_id=execution_id,
                agent_path=newest.agent_path,
                node_id=newest.node_id,
                running_for=f"{(now - newest.created_at).total_seconds():.1f} s",
                waits=(
                    f"until its sync tool {tool.name!r} returns ({limit}), past the {bound:g} s a stop "
                    "gives: a tool in a thread cannot be interrupted; Ctrl-C again ends the process now"
                ),
                resume=(
                    f"the run stays recoverable: tether resume {execution_id} --runner module:attr "
                    f"(runner {runner.name!r}), or any worker's sweep"
                ),
            )


def _nothing() -> None:
    """Run on the loop to wake it: the main thread then runs the pending signal handler."""


class SignalWake:
    """While open, a signal taken by any thread wakes the event loop at once (so Ctrl-C cancels the
    main task then, not when a thread next hands a result back). Does nothing off the main thread
    or when a wakeup fd is already set (trio sets its own; so does asyncio's ``add_signal_handler``)."""

    def __init__(self) -> None:
        self._write: socket.socket | None = None

    def open(self) -> None:
        """Set the wakeup fd and start the daemon thread that relays its bytes to the loop."""
        if threading.current_thread() is not threading.main_thread():
            return
        read, write = socket.socketpair()
        write.setblocking(False)
        try:
            previous = signal.set_wakeup_fd(write.fileno(), warn_on_full_buffer=False)
        except ValueError:  # not the main thread of the main interpreter
            previous = None
        if previous != -1:
            if previous is not None:
                signal.set_wakeup_fd(previous)
            read.close()
            write.close()
            return
        self._write = write
        token = anyio.lowlevel.current_token()
        threading.Thread(target=_relay, args=(read, token), name="tether-signal-wake", daemon=True).start()

    def close(self) -> None:
        """Unset the wakeup fd (leaving one set since by someone else) and end the relay thread."""
        write, self._write = self._write, None
        if write is None:
            return
        current = signal.set_wakeup_fd(-1)
        if current != write.fileno():
            signal.set_wakeup_fd(current)
        write.close()  # the relay reads the end of the stream and exits


def _relay(read: socket.socket, token: anyio.lowlevel.EventLoopToken) -> None:
    """Wake the loop for every signal byte, until the write end closes or the loop is gone."""
    with read:
        while read.recv(64):
            try:
                anyio.from_thread.run_sync(_nothing, token=token)
            except Exception:  # the loop has ended: nothing left to wake
                return
