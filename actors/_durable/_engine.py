"""The agent loop of one durable run: write a row, then take the step; re-enter at the newest row.

:class:`RunEngine` is the run actor's state machine, kept apart from the actor so the row logic reads
top to bottom; the rows themselves (``seq``, the writes) go through :class:`~._runlog.RunLog`. The
rules cited below are numbered as in ``docs/durability.md``. The row grammar, as the states the loop
moves through (each row is written before the step it names, rule 1; rules in parentheses):

======================  ==================  ===========  ================  ============================
state                   node_id             step_type    status            from here
======================  ==================  ===========  ================  ============================
model call N            turn:N              llm_call     completed         tool X of turn N, or run_end
tool X of turn N        turn:N/tool:X       tool_call    completed         next tool, or model call N+1
tool X paused (rule 2)  turn:N/tool:X       hitl_pause   interrupted       rests; + pending row, one tx
pause claimed (4, 9)    turn:N/tool:X       resume       completed         tool X again with the Resume
crash recovery (5, 9)   re-entered node_id  recover      completed         the re-entered step
fork                    fork_origin         fork_origin  completed         new model turn, or base step
run ended (8, 11, 12)   run_end             run_end      completed/failed  rests (a failed end resumes)
======================  ==================  ===========  ================  ============================

``resume``, ``recover`` and ``fork_origin`` are bookkeeping rows: re-entry reads through them to the
step they name. Every resume validates first, then appends its own row before anything else, so the
unique ``(execution_id, seq)`` key lets exactly one writer win. A tool may pause again after a claim
(rule 7); the calls a pause left behind get the sibling note (rule 6).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import msgspec

from stores import (
    COMPLETED,
    FAILED,
    FORK_ORIGIN,
    HITL_PAUSE,
    INTERRUPTED,
    LLM_CALL,
    RECOVER,
    RESUME,
    RUN_END,
    TOOL_CALL,
    AlreadyResumed,
    Checkpoint,
    OwnershipLost,
    PendingInterrupt,
    RunExists,
    SerializationError,
    WriteConflict,
)

from .._core import tether_logger
from ..models import Message, ToolCall
from ..models._intake import take_in
from ..models._stream import text_sink
from ..models._types import Transcript
from ._agent import Agent
from ._context import bind_run, check_owner
from ._errors import MaxTurnsExceeded, ResumeRequired
from ._events import ATTEMPT_KEY, attempt_of
from ._interrupt import PauseSignal
from ._messages import (
    Answered,
    Failed,
    Outcome,
    Paused,
    RerunTool,
    Resume,
    RunTool,
    Step,
    TakeTurn,
)
from ._result import RunResult
from ._runlog import RunLog, step_seq

__all__ = ["SIBLING_NOTE", "RunEngine"]

_log = tether_logger()

#: What the model reads for a sibling tool call that a pause left behind (rule 6).
SIBLING_NOTE = "[no result: the agent was interrupted before this tool ran; it was not run on resume]"
#: How often a cancel re-reads the newest row when a step's write races it.
_CANCEL_ATTEMPTS = 5


class _Paused(Exception):
    """Internal: the run paused at a tool; carries its pending row."""

    def __init__(self, pending: PendingInterrupt) -> None:
        super().__init__(pending.execution_id)
        self.pending = pending


class RunEngine:
    """The steps of one activation of one run (a start, a fork, a resume, a recovery).

    An entry point writes the activation's first row and returns its first :data:`Step`; the run
    actor then hands each step to :meth:`step`, which returns the next one or the agent's
    :data:`Outcome`, and the root concludes with :meth:`conclude`. Every row goes through ``rows``,
    the run's log (and ``seq`` allocator).
    """

    def __init__(self, *, agent: Agent, rows: RunLog) -> None:
        self.rows = rows
        self.store = rows.store
        self.agent = agent
        self.execution_id = rows.execution_id
        self.path = agent.label
        self._schemas = agent.tool_schemas()
        # The newest conversation and turn, for the failed marker if an exception escapes a step.
        self._transcript = Transcript()
        self._turn = 0
        # The messages of the newest row stored for this conversation: what a failed marker carries
        # when the conversation since then is refused by the store (the JSON rule, max_row_bytes).
        self._good: list[dict[str, Any]] = []
        # The tool calls of the newest reply, and the row a re-entry re-runs.
        self._calls: list[ToolCall] = []
        self._rerun_row: Checkpoint | None = None
        # The attempt of the next model call (above 1 when re-entry issues a call again).
        self._attempt = 1

    # -- entry points: each writes its first row (if any) and returns the first step -----------------

    async def start(self, messages: Sequence[Message]) -> Step:
        """A fresh run from ``messages`` (``seq`` 0 on a used id raises ``RunExists``)."""
        self.rows.start_at(0)
        self._transcript, self._turn = Transcript(messages), 0
        return TakeTurn(0)

    async def fork(self, base: Checkpoint, appended: Message | None) -> Step:
        """A new run from ``base`` (a step of another run): the ``fork_origin`` row, then re-entry.

        With ``appended`` (the next user message) the fork starts a new model turn at the base's
        turn; without, it re-enters the base step itself (a model turn re-issued or a tool re-run).
        """
        self.rows.start_at(0)
        transcript = Transcript.from_dicts(base.state_snapshot.get("messages", []))
        if appended is not None:
            transcript.append(appended)
        origin = self._row(
            node_id=FORK_ORIGIN,
            step_type=FORK_ORIGIN,
            turn=base.step_index,
            transcript=transcript,
            extra={k: v for k, v in base.state_snapshot.items() if k not in ("messages", "turn")},
            node_input={
                "base_execution_id": base.execution_id,
                "base_node_id": base.node_id,
                "base_step_type": base.step_type,
                "base_node_input": base.node_input,
                "input_appended": appended is not None,
            },
            parent=base.checkpoint_id,
        )
        await self._append(origin)
        return self._reenter_fork(origin)

    async def resume(self, resume: Resume | None) -> Step:
        """Claim the pause with ``resume``, or recover from a crash when ``resume`` is None.

        Validates first (reads the newest row, finds the tool) and only then appends (rule 9).
        """
        entry = await self.store.reentry(self.execution_id)
        step = entry.step
        self.rows.start_at(entry.newest.seq + 1)
        if resume is not None:
            if step.step_type != HITL_PAUSE or step.status != INTERRUPTED:
                raise AlreadyResumed(
                    f"run {self.execution_id!r} has no pending interrupt to claim: its newest step is "
                    f"{step.node_id!r} ({step.step_type})"
                )
            self._check_tool(step)
            claimed = resume.to_dict()
            await self.rows.claim(self.rows.bookkeeping(RESUME, step, claimed))
            return self._reenter(step, claimed, after_pause=True)
        decision = entry.resume
        after_pause = decision is not None
        if step.step_type == HITL_PAUSE and decision is None:
            if await self.store.pending(self.execution_id):
                raise ResumeRequired(self.execution_id, reason=step.interrupt_reason)
            # A cancelled pause has no pending row: the tool runs again and may pause again (rule 7).
        self._check_tool(step)
        await self.rows.append(self.rows.bookkeeping(RECOVER, step, decision))
        if step.step_type == FORK_ORIGIN:
            return self._reenter_fork(step)
        return self._reenter(step, decision, after_pause=after_pause)

    async def cancel(self, reason: str, *, error: str | None = None) -> RunResult:
        """Write the failed ``run_end`` of a cancel (it also drops a pending row, rule 11); its error
        is ``error``, by default ``cancelled: <reason>``.

        A step write racing the marker makes it re-read the newest row and try again.
        """
        error = error if error is not None else f"cancelled: {reason}"
        for _ in range(_CANCEL_ATTEMPTS):
            newest = await self.store.latest(self.execution_id)
            if newest is None:
                return RunResult(execution_id=self.execution_id, status="failed", error=error)
            if newest.step_type == RUN_END and newest.status == COMPLETED:
                raise AlreadyResumed(
                    f"run {self.execution_id!r} already completed; there is nothing to cancel"
                )
            if newest.step_type == RUN_END:
                # Already ended failed (e.g. the step in flight was cancelled and wrote the marker
                # before this Cancel was handled): one marker is enough.
                return RunResult(
                    execution_id=self.execution_id,
                    status="failed",
                    error=newest.state_snapshot.get("run_error"),
                )
            self.rows.start_at(newest.seq + 1)
            snapshot = newest.state_snapshot
            self._good = list(snapshot.get("messages", []))
            self._transcript = Transcript.from_dicts(self._good)
            self._turn = newest.step_index
            try:
                return await self._end(FAILED, error=error, reason=reason)
            except WriteConflict:
                continue
        raise WriteConflict(f"run {self.execution_id!r} kept writing while being cancelled; try again")

    # -- the steps --------------------------------------------------------------------------------

    async def step(self, step: Step) -> Step | Outcome:
        """Take one step; return the next one, or how this agent's work ended.

        A pause is :class:`Paused`; an exception is :class:`Failed` (rule 12), except a lost race or
        a used id, which propagate: that writer stops and writes nothing more.
        """
        try:
            match step:
                case TakeTurn(turn=turn):
                    return await self._take_turn(turn)
                case RunTool(turn=turn, index=index):
                    return await self._run_tool(turn, index)
                case RerunTool(turn=turn, index=index, decision=decision, after_pause=after_pause):
                    return await self._rerun_tool(turn, index, decision, after_pause)
        except _Paused as paused:
            return Paused(paused.pending)
        except (AlreadyResumed, RunExists, OwnershipLost):
            raise
        except Exception as error:
            return Failed(f"{type(error).__name__}: {error}")
        raise TypeError(f"unknown step {step!r}")  # pragma: no cover

    async def conclude(self, outcome: Outcome) -> RunResult:
        """The root's end of the run: the ``run_end`` marker of an answer or a failure, or the pause."""
        match outcome:
            case Paused(pending=pending):
                return RunResult(execution_id=self.execution_id, status="paused", pending=pending)
            case Answered(output=output):
                try:
                    return await self._end(COMPLETED, output=output)
                except (AlreadyResumed, RunExists, OwnershipLost):
                    raise
                except Exception as error:
                    return await self._end(FAILED, error=f"{type(error).__name__}: {error}")
            case Failed(error=error):
                return await self._end(FAILED, error=error)
        raise TypeError(f"unknown outcome {outcome!r}")  # pragma: no cover

    async def _take_turn(self, turn: int) -> Step | Outcome:
        """Model call ``turn``: its row, the call, then the reply's first tool call (or the answer)."""
        transcript = self._transcript
        self._turn = turn
        if turn >= self.agent.max_turns:
            raise MaxTurnsExceeded(
                self.agent.max_turns, agent=self.agent.name, execution_id=self.execution_id
            )
        row = self._row(
            node_id=f"turn:{turn}",
            step_type=LLM_CALL,
            turn=turn,
            transcript=transcript,
            node_input=self._reissue(),
        )
        await self._append(row)
        with text_sink(self.rows.log.text_sink(row)):
            answer = await self.agent.model.complete(transcript.messages, self._schemas)
        reply = take_in(answer, transcript, model=self.agent.model)
        transcript.append(reply.to_message())
        if not reply.tool_calls:
            return Answered(reply.text)
        self._calls = list(reply.tool_calls)
        return RunTool(turn, 0)

    async def _run_tool(self, turn: int, index: int) -> Step:
        """Tool call ``index`` of the reply of ``turn``: a row, then the call; past the last, the next turn."""
        calls = self._calls
        if index >= len(calls):
            return TakeTurn(turn + 1)
        call = calls[index]
        transcript = self._transcript
        row = self._row(
            node_id=f"turn:{turn}/tool:{call.name}",
            step_type=TOOL_CALL,
            turn=turn,
            transcript=transcript,
            extra={"tool_name": call.name, "tool_call_id": call.id},
            node_input=call.arguments,
            tool=call.name,
        )
        await self._append(row)
        transcript.append(await self._call_tool(row, call, None))
        return RunTool(turn, index + 1)

    async def _call_tool(self, row: Checkpoint, call: ToolCall, decision: dict[str, Any] | None) -> Message:
        """Run one tool with the run bound; a pause writes its two rows and stops the run."""
        if not self.agent.has_tool(call.name):
            return _tool_message(
                call, f"Tool '{call.name}' failed: the agent has no tool named {call.name!r}"
            )
        if call.arguments_error is not None:
            return _tool_message(call, f"Tool '{call.name}' got invalid arguments: {call.arguments_error}")
        tool = self.agent.tool(call.name)
        resume = Resume.from_dict(decision) if decision is not None else None
        check_owner(self.store, self.execution_id)  # no tool starts for a run this process lost
        try:
            with bind_run(
                self.execution_id,
                agent_path=row.agent_path,
                store=self.store,
                node_id=row.node_id,
                resume=resume,
                step=step_seq(row),
            ):
                outcome = await tool.invoke(call.arguments)
        except PauseSignal as signal:
            raise await self._pause(row, signal) from None
        except BaseExceptionGroup as group:  # a tool's own task group wraps the signal
            match, rest = group.split(PauseSignal)
            if match is None or rest is not None:
                raise
            raise await self._pause(row, _first_signal(match)) from None
        return _tool_message(call, outcome.content)

    async def _pause(self, row: Checkpoint, signal: PauseSignal) -> _Paused:
        """Write the interrupted row and the pending row (one transaction); the run stops there."""
        return _Paused(await self.rows.pause(row, signal.reason, signal.context))

    # -- re-entry ---------------------------------------------------------------------------------

    def _reenter(self, step: Checkpoint, decision: dict[str, Any] | None, *, after_pause: bool) -> Step:
        """Re-enter at ``step``: re-issue its model turn, or re-run its tool with the saved arguments.

        After a pause, the sibling calls the pause left behind are answered with the note and not
        run (rule 6); after a crash, the siblings that had not started run as the loop would have.
        """
        self._good = list(step.state_snapshot.get("messages", []))
        transcript = Transcript.from_dicts(self._good)
        turn = step.step_index
        self._transcript, self._turn = transcript, turn
        if step.step_type not in (TOOL_CALL, HITL_PAUSE):
            if step.step_type == LLM_CALL and step.node_id != FORK_ORIGIN:
                self._attempt = attempt_of(step) + 1  # the model call is issued again
            return TakeTurn(turn)
        calls, index = _call_of(transcript, step)
        self._calls = calls
        self._rerun_row = step
        return RerunTool(turn, index, decision, after_pause)

    async def _rerun_tool(
        self, turn: int, index: int, decision: dict[str, Any] | None, after_pause: bool
    ) -> Step:
        """The tool step re-entry names, run again with its row's saved arguments."""
        step = self._rerun_row
        assert step is not None
        calls = self._calls
        call = msgspec.structs.replace(calls[index], arguments=dict(step.node_input))
        self._transcript.append(await self._call_tool(step, call, decision))
        if after_pause:
            self._transcript.extend(_tool_message(c, SIBLING_NOTE) for c in calls[index + 1 :])
            return TakeTurn(turn + 1)
        return RunTool(turn, index + 1)

    def _reenter_fork(self, origin: Checkpoint) -> Step:
        """Re-enter a fork's origin: a new model turn when input was appended, else its base step."""
        base = origin.node_input
        if base.get("input_appended") or base.get("base_step_type") not in (TOOL_CALL, HITL_PAUSE):
            return self._reenter(msgspec.structs.replace(origin, step_type=LLM_CALL), None, after_pause=False)
        # The re-run tool writes (and binds) as the tool, like the base row did (rule 3); a pause it
        # records is the fork's own row, with no parent in the base run.
        tool = origin.state_snapshot.get("tool_name")
        step = msgspec.structs.replace(
            origin,
            node_id=base["base_node_id"],
            step_type=TOOL_CALL,
            node_input=base["base_node_input"],
            agent_path=f"{self.path}/tool:{tool}" if isinstance(tool, str) else origin.agent_path,
            parent_checkpoint_id=None,
        )
        return self._reenter(step, None, after_pause=False)

    # -- rows -------------------------------------------------------------------------------------

    async def _end(
        self, status: str, *, output: str | None = None, error: str | None = None, reason: str | None = None
    ) -> RunResult:
        """The ``run_end`` marker (only the root writes it), shielded so a cancel cannot lose it."""
        extra: dict[str, Any] = {"run_status": status}
        if output is not None:
            extra["output"] = output
        if error is not None:
            error = extra["run_error"] = storable_text(error)
        if reason is not None:
            extra["run_reason"] = storable_text(reason)
        row = self._row(
            node_id=RUN_END, step_type=RUN_END, turn=self._turn + 1, transcript=self._transcript, extra=extra
        )
        row.status = status
        try:
            await self.rows.end(row)
        except SerializationError:
            if status != FAILED:
                raise  # the caller ends the run failed instead
            # The conversation since the newest stored row is what the store refused: the marker
            # carries the conversation up to that row, so the run always ends (never stuck).
            kept = {**row.state_snapshot, "messages": self._good}
            await self.rows.end(msgspec.structs.replace(row, state_snapshot=kept))
        if status == FAILED:
            if reason is None:  # a failure, not a cancel: the developer hears of it
                _log.error("run failed", execution_id=self.execution_id, agent_path=self.path, error=error)
            return RunResult(execution_id=self.execution_id, status="failed", error=error)
        return RunResult(execution_id=self.execution_id, status="completed", output=output)

    def _row(
        self,
        *,
        node_id: str,
        step_type: str,
        turn: int,
        transcript: Transcript,
        extra: dict[str, Any] | None = None,
        node_input: dict[str, Any] | None = None,
        tool: str | None = None,
        parent: str | None = None,
    ) -> Checkpoint:
        """A step row of this agent: the transcript and turn as its snapshot, written as the tool
        (``/tool:<name>``) when ``tool`` is given (rule 3)."""
        snapshot: dict[str, Any] = {"messages": transcript.snapshot(), "turn": turn}
        if extra:
            snapshot.update(extra)
        return self.rows.row(
            node_id=node_id,
            step_type=step_type,
            step_index=turn,
            snapshot=snapshot,
            agent_path=f"{self.path}/tool:{tool}" if tool else self.path,
            node_input=node_input,
            parent=parent,
        )

    def _reissue(self) -> dict[str, Any] | None:
        """The ``node_input`` of the next model call's row: its attempt when it is a re-issue."""
        attempt, self._attempt = self._attempt, 1
        return {ATTEMPT_KEY: attempt} if attempt > 1 else None

    async def _append(self, row: Checkpoint) -> None:
        """Append a row of this conversation and remember its messages as the last stored ones."""
        await self.rows.append(row)
        self._good = row.state_snapshot["messages"]

    def _check_tool(self, step: Checkpoint) -> None:
        """Refuse, before writing, a resume whose tool this runner lacks (``ToolNotFound``)."""
        name = step.state_snapshot.get("tool_name")
        if step.step_type in (TOOL_CALL, HITL_PAUSE) and isinstance(name, str):
            self.agent.tool(name, execution_id=self.execution_id)


def storable_text(text: str) -> str:
    """``text`` as the JSON rule keeps it: a NUL or a lone surrogate (an exception's message may hold
    one) written as its escape, so a marker's error can always be stored."""
    if "\x00" in text:
        text = text.replace("\x00", "\\x00")
    if text.isascii():
        return text
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def _tool_message(call: ToolCall, content: str) -> Message:
    return Message("tool", content, tool_call_id=call.id, name=call.name)


def _call_of(transcript: Transcript, step: Checkpoint) -> tuple[list[ToolCall], int]:
    """The calls of the reply a tool row belongs to, and which of them the row is for.

    The row's own conversation says it: the newest assistant message with calls, followed by the
    answers of the calls before this one. So the call is found by its position, never by an id a
    model chose (ids may repeat in old rows); the row's tool name must agree.
    """
    messages = transcript.messages
    for start in range(len(messages) - 1, -1, -1):
        message = messages[start]
        if message.role == "assistant" and message.tool_calls:
            index = sum(1 for m in messages[start + 1 :] if m.role == "tool")
            calls = list(message.tool_calls)
            if index < len(calls) and calls[index].name == step.state_snapshot.get("tool_name"):
                return calls, index
            break
    raise AlreadyResumed(f"run {step.execution_id!r}: row {step.node_id!r} names no tool call to re-enter")


def _first_signal(group: BaseExceptionGroup[PauseSignal]) -> PauseSignal:
    for error in group.exceptions:
        if isinstance(error, PauseSignal):
            return error
        if isinstance(error, BaseExceptionGroup):
            return _first_signal(error)
    raise AssertionError("split() returned a group without a PauseSignal")  # pragma: no cover
