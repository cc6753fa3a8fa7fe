"""The agent loop of one durable run: write a row, then take the step; re-enter at the newest row.

:class:`AgentLevel` is the run actor's state machine, kept apart from the actor so the row logic reads
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
tool X waits            turn:N/tool:X       wait         interrupted       rests; woken: tool X again
tool X took a signal    turn:N/tool:X       signal       completed         tool X goes on (bookkeeping)
tool X's wait ended     turn:N/tool:X       wake         completed         tool X goes on (bookkeeping)
======================  ==================  ===========  ================  ============================

``resume``, ``recover`` and ``fork_origin`` are bookkeeping rows: re-entry reads through them to the
step they name. Every resume validates first, then appends its own row before anything else, so the
unique ``(execution_id, seq)`` key lets exactly one writer win. A tool may pause again after a claim
(rule 7); the calls a pause left behind get the sibling note (rule 6).
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable, Collection, Mapping, Sequence
from typing import Any, Protocol, TypeVar

import msgspec

from stores import (
    FORK_ORIGIN,
    HITL_PAUSE,
    LLM_CALL,
    TOOL_CALL,
    WAIT,
    AlreadyResumed,
    Checkpoint,
    CheckpointError,
    conversation_of,
    tool_node,
    tool_path,
    turn_node,
)

from ..models import Message, ToolCall
from ..models._intake import take_in
from ..models._stream import text_sink
from ..models._types import Transcript
from ._agent import Agent
from ._context import RunStop, bind_run, check_owner
from ._errors import MaxTurnsExceeded, ToolNotFound
from ._events import ATTEMPT_KEY, attempt_of
from ._interrupt import PauseSignal
from ._level import Delegation, Level, Next, PausedSignal, ReentryRoute
from ._messages import (
    Answered,
    Failed,
    Outcome,
    RerunTool,
    Resume,
    RunTool,
    Step,
    TakeTurn,
)
from ._runlog import RunLog, StepAbandoned, step_seq
from ._sources import RECORD, SourceTool, offer, recorded_tools
from ._steering import append_turn
from ._tools import ToolOutcome
from ._trace import rerun_attempt
from ._waits import RestedSignal, StepWaits, WaitSignal

T = TypeVar("T")

__all__ = ["SIBLING_NOTE", "AgentLevel", "Special", "level_of"]

#: What the model reads for a sibling tool call that a pause left behind (rule 6).
SIBLING_NOTE = "[no result: the agent was interrupted before this tool ran; it was not run on resume]"


class Special(Protocol):
    """A tool a topology gives an agent (``delegate_to_<role>``, ``handoff_to_<peer>``)."""

    def schema(self) -> dict[str, Any]:
        """Its OpenAI-style function schema."""
        ...

    async def call(
        self, engine: AgentLevel, row: Checkpoint, call: ToolCall, below: ReentryRoute | None
    ) -> Next | str:
        """Handle ``call`` (its row ``row`` is written); ``below`` is set when a re-entry goes on in
        the child this call started. A ``str`` is the tool's result."""
        ...


class AgentLevel(Level):
    """An agent's level: its model turns and tool calls, as steps (the row grammar above).

    ``specials`` are the tools a topology adds (``delegate_to_<role>``, ``handoff_to_<peer>``):
    their row is written like any tool's, then the special decides (a child to run, a handoff).
    """

    def __init__(
        self,
        *,
        agent: Agent,
        rows: RunLog,
        path: str | None = None,
        specials: Mapping[str, Special] | None = None,
        runner: Any = None,
    ) -> None:
        super().__init__(rows=rows, path=path or agent.label, runner=runner if runner is not None else agent)
        self.agent = agent
        self._specials: Mapping[str, Special] = specials or {}
        self._schemas = self._offer_schemas()
        # The tools of the agent's sources this activation offers (None: not listed yet), whether
        # they are listed afresh (a new conversation) or as the run recorded them, and the list
        # to record on the next row.
        self._offered: dict[str, SourceTool] | None = None
        self._fresh = False
        self._unrecorded: list[dict[str, Any]] | None = None
        # The tool calls of the newest reply, the row a re-entry re-runs, the re-entry below this
        # level (a delegation in flight), and the call a started child answers.
        self._calls: list[ToolCall] = []
        self._rerun_row: Checkpoint | None = None
        self._below: ReentryRoute | None = None
        self._waiting: tuple[ToolCall, int, int, bool] | None = None
        # The attempt of the next model call (above 1 when re-entry issues a call again).
        self._attempt = 1

    async def begin(self, messages: Sequence[Message]) -> Next:
        self._transcript, self._turn = Transcript(messages), 0
        self._fresh = True
        return TakeTurn(0)

    async def opening(self, messages: Sequence[Message], *, queued: bool = False) -> Next | None:
        if self.agent.max_turns < 1:
            return None  # the first step refuses the run (MaxTurnsExceeded)
        if self.agent.sources and not queued:
            return None  # the first step writes it, in the activation, once the tools are listed
        # (A queued run's row is written now, without its sources' tools: the worker that takes it
        # lists them, as for a run with none recorded, and records them on its next row.)
        self.rows.start_at(0)
        await self.begin(messages)
        row = self._turn_row(0)
        await self._append(row)
        return TakeTurn(0, row)

    async def reenter(self, route: ReentryRoute) -> Next:
        step = route.step
        if conversation_of(step.agent_path) == self.path:
            return self._reenter(step, route.decision, after_pause=route.after_pause)
        # The step is deeper: this level's newest row is the delegation it is in.
        own = await route.own_rows(self.path)
        if (
            not own
            or own[-1].step_type != TOOL_CALL
            or own[-1].state_snapshot.get("tool_name") not in self._specials
        ):
            raise CheckpointError(
                f"run {self.execution_id!r}: {self.path!r} has no delegation row above {step.agent_path!r}"
            )
        self._below = route.below(own[-1].seq)
        return self._reenter(own[-1], None, after_pause=route.after_pause)

    def _step(self, step: Step) -> Awaitable[Next]:
        if self.agent.sources and self._offered is None:
            return self._offered_step(step)
        match step:
            case TakeTurn(turn=turn, row=row):
                return self._take_turn(turn, row)
            case RunTool(turn=turn, index=index):
                return self._run_tool(turn, index)
            case RerunTool(turn=turn, index=index, decision=decision, after_pause=after_pause):
                return self._rerun_tool(turn, index, decision, after_pause)
        raise TypeError(f"unknown step {step!r}")  # pragma: no cover

    async def _offered_step(self, step: Step) -> Next:
        """``step``, once the sources' tools this activation offers are listed."""
        await self._offer(None if self._fresh else self.path)
        return await self._step(step)

    async def _take_turn(self, turn: int, row: Checkpoint | None = None) -> Step | Outcome:
        """Model call ``turn``: its row (unless ``row`` is written already), the call, then the
        reply's first tool call (or the answer)."""
        transcript = self._transcript
        self._turn = turn
        if row is None:
            row = await append_turn(self, self._turn_row(turn))
        trace = self.rows.trace
        with text_sink(self.rows.log.text_sink(row)):
            if trace is None:
                answer = await self.agent.model.complete(transcript.messages, self._schemas)
            else:
                answer = await trace.chat(row, self.agent.model, transcript.messages, self._schemas)
        usage = getattr(answer, "usage", None)
        if usage is not None:
            self.rows.bill(usage)  # the next row carries it (it was billed)
        reply = take_in(answer, transcript, model=self.agent.model, into=transcript)
        if not reply.tool_calls:
            output = self.agent.output
            if output is None:
                return Answered(reply.text)
            value, retry = output.check(reply.text, transcript.messages, agent=self.agent.name)
            if retry is None:
                assert value is not None
                return Answered(value)
            transcript.append(Message("user", retry))  # sent back: its own model turn
            return TakeTurn(turn + 1)
        self._calls = list(reply.tool_calls)
        return RunTool(turn, 0)

    async def _prepare(self, step: Checkpoint) -> None:
        """List the sources' tools before a resume or a recovery of this agent writes (a recorded
        tool a source no longer lists raises ``ToolNotFound``, and nothing is written)."""
        if self.agent.sources and conversation_of(step.agent_path) == self.path:
            await self._offer(self.path)
            name = step.state_snapshot.get("tool_name")
            if step.step_type in (TOOL_CALL, HITL_PAUSE, WAIT) and isinstance(name, str):
                if not self.agent.has_tool(name) and name not in (self._offered or {}):
                    raise ToolNotFound(name, agent=self.agent.name, execution_id=self.execution_id)

    async def _offer(self, recorded_at: str | None) -> None:
        """Connect the agent's sources and take the tools to offer: as recorded by the agent at
        ``recorded_at`` in the run's rows, or (``None``, or nothing recorded) as listed now."""
        connections = self.rows.sources
        if connections is None:
            raise RuntimeError(
                f"agent {self.agent.name!r} has tool sources but its activation has no connections"
            )
        recorded = None
        if recorded_at is not None:
            recorded = await recorded_tools(self.store, self.execution_id, recorded_at)
        record, offered = await offer(
            self.agent.sources,
            (t.name for t in self.agent.tools),
            connections,
            recorded,
            agent=self.agent.name,
            execution_id=self.execution_id,
        )
        if recorded is None:
            self._unrecorded = record
        self._offered = offered
        self._schemas = self._offer_schemas(offered.values())

    def _offer_schemas(self, offered: Collection[SourceTool] = ()) -> list[dict[str, Any]]:
        """What the model is offered: the agent's tools, its sources', a topology's, and the
        output type's ``response_format`` entry."""
        schemas = self.agent.tool_schemas()
        if offered:
            schemas.extend(t.schema() for t in offered)
        if self._specials:
            schemas.extend(special.schema() for special in self._specials.values())
        if self.agent.output is not None:
            schemas.append(self.agent.output.entry)
        return schemas

    def _record(self, row: Checkpoint) -> None:
        """Record on ``row`` (a model or tool row) the sources' tools listed afresh, once."""
        if self._unrecorded is not None:
            row.state_snapshot[RECORD], self._unrecorded = self._unrecorded, None

    def _turn_row(self, turn: int) -> Checkpoint:
        """The ``turn:N`` row of model call ``turn`` (``MaxTurnsExceeded`` past the agent's turns)."""
        if turn >= self.agent.max_turns:
            raise MaxTurnsExceeded(
                self.agent.max_turns, agent=self.agent.name, execution_id=self.execution_id
            )
        # The attempt of a re-issued call is on its row (its first issue's row has none).
        attempt, self._attempt = self._attempt, 1
        row = self._row(
            node_id=turn_node(turn),
            step_type=LLM_CALL,
            turn=turn,
            transcript=self._transcript,
            node_input={ATTEMPT_KEY: attempt} if attempt > 1 else None,
        )
        if self._unrecorded is not None:
            self._record(row)
        return row

    async def _run_tool(self, turn: int, index: int) -> Next:
        """Tool call ``index`` of the reply of ``turn``: a row, then the call; past the last, the next turn."""
        calls = self._calls
        if index >= len(calls):
            return TakeTurn(turn + 1)
        call = calls[index]
        transcript = self._transcript
        row = self._row(
            node_id=tool_node(turn, call.name),
            step_type=TOOL_CALL,
            turn=turn,
            transcript=transcript,
            extra={"tool_name": call.name, "tool_call_id": call.id},
            node_input=call.arguments,
            tool=call.name,
        )
        if self._unrecorded is not None:
            self._record(row)
        await self._append(row)
        if call.name in self._specials:
            return await self._special(row, call, turn, index, None, after_pause=False)
        transcript.append(await self._call_tool(row, call, None))
        return RunTool(turn, index + 1)

    async def _special(
        self,
        row: Checkpoint,
        call: ToolCall,
        turn: int,
        index: int,
        below: ReentryRoute | None,
        *,
        after_pause: bool,
    ) -> Next:
        """A topology's tool: a child to run (its outcome answers the call), a text, or an outcome
        that ends this agent's work (a handoff)."""
        if call.arguments_error is not None:
            content = f"Tool '{call.name}' got invalid arguments: {call.arguments_error}"
            return self._answered(call, turn, index, content, after_pause=after_pause)
        result = await self._specials[call.name].call(self, row, call, below)
        if isinstance(result, Delegation):
            self._waiting = (call, turn, index, after_pause)
            return result
        if isinstance(result, str):
            return self._answered(call, turn, index, result, after_pause=after_pause)
        return result

    async def _after_child(self, outcome: Outcome) -> Next:
        """A delegation's outcome: the worker's answer (or its failure, as a tool error) is the tool's
        result; its pause pauses this agent too."""
        if self._waiting is None:
            raise TypeError(f"{self.path!r} started no child; got {outcome!r}")
        call, turn, index, after_pause = self._waiting
        self._waiting = None
        match outcome:
            case Answered(output=output):
                content = output
            case Failed(error=error):
                content = f"Tool '{call.name}' failed: {error}"
            case _:
                return outcome  # a pause (or any other end) at a deeper level ends this level's work too
        return self._answered(call, turn, index, content, after_pause=after_pause)

    def _answered(self, call: ToolCall, turn: int, index: int, content: str, *, after_pause: bool) -> Step:
        self._transcript.append(_tool_message(call, content))
        if after_pause:
            self._transcript.extend(_tool_message(c, SIBLING_NOTE) for c in self._calls[index + 1 :])
            return TakeTurn(turn + 1)
        return RunTool(turn, index + 1)

    def end_reply(self, call: ToolCall, content: str, note: str) -> list[Message]:
        """End this agent's reply at ``call`` (a handoff): its result is ``content``, the calls after
        it get ``note``; returns the conversation so far."""
        calls = self._calls
        index = next((i for i, c in enumerate(calls) if c.id == call.id), len(calls))
        self._transcript.append(_tool_message(call, content))
        self._transcript.extend(_tool_message(c, note) for c in calls[index + 1 :])
        return list(self._transcript.messages)

    async def _call_tool(
        self, row: Checkpoint, call: ToolCall, decision: dict[str, Any] | None, attempt: int = 1
    ) -> Message:
        """Run one tool with the run bound (its ``attempt``: above 1 when it runs again); a pause
        writes its two rows and stops the run."""
        tool: Any = self._offered.get(call.name) if self._offered else None
        if tool is None:
            try:
                tool = self.agent.tool(call.name)
            except ToolNotFound:
                return _tool_message(
                    call, f"Tool '{call.name}' failed: the agent has no tool named {call.name!r}"
                )
        if call.arguments_error is not None:
            return _tool_message(call, f"Tool '{call.name}' got invalid arguments: {call.arguments_error}")
        resume = Resume.from_dict(decision) if decision is not None else None
        check_owner(self.store, self.execution_id)  # no tool starts for a run this process lost
        stopped = RunStop()
        try:
            with bind_run(
                self.execution_id,
                agent_path=row.agent_path,
                store=self.store,
                node_id=row.node_id,
                resume=resume,
                shared=self.rows.shared,
                step=step_seq(row),
                outage_grace=self.rows.grace,
                stopped=stopped,
                waits=StepWaits(self.rows, row),
            ):
                invoke: Callable[[], Awaitable[ToolOutcome]] = functools.partial(tool.invoke, call.arguments)
                trace = self.rows.trace
                if trace is not None:
                    invoke = functools.partial(trace.tool, row, call, attempt, invoke)
                watch = self.rows.tool_watch
                outcome = await (invoke() if watch is None else watch.run(self.store, row, stopped, invoke))
        except PauseSignal as signal:
            raise await self._pause(row, signal) from None
        except WaitSignal as wait:
            raise await self._rest(row, wait) from None
        except StepAbandoned as abandoned:  # the store stayed unusable under an @idempotent call
            raise abandoned.lost from None
        except BaseExceptionGroup as group:  # a tool's own task group wraps the signal
            lost, _ = group.split(StepAbandoned)
            if lost is not None:
                raise _first_abandoned(lost).lost from None
            waits, others = group.split(WaitSignal)
            if waits is not None and others is None:
                raise await self._rest(row, _first_of(waits, WaitSignal)) from None
            match, rest = group.split(PauseSignal)
            if match is None or rest is not None:
                raise
            raise await self._pause(row, _first_of(match, PauseSignal)) from None
        return _tool_message(call, outcome.content)

    async def _pause(self, row: Checkpoint, signal: PauseSignal) -> PausedSignal:
        """Write the interrupted row and the pending row (one transaction); the run stops there."""
        return PausedSignal(await self.rows.pause(row, signal.reason, signal.context, signal.expires_in))

    async def _rest(self, row: Checkpoint, wait: WaitSignal) -> RestedSignal:
        """Write the ``wait`` row (the run rests; no pending row); the run stops there."""
        await self.rows.rest(row, wait.reason, wait.context, wait.name, wait.wake_at)
        return RestedSignal(wait.name, wait.wake_at)

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
        if step.step_type not in (TOOL_CALL, HITL_PAUSE, WAIT):
            if step.step_type == LLM_CALL and step.node_id != FORK_ORIGIN:
                self._attempt = attempt_of(step) + 1  # the model call is issued again
                if self.rows.trace is not None:
                    self.rows.trace.reentered(self._attempt)
            return TakeTurn(turn)
        calls, index = _call_of(transcript, step)
        self._calls = calls
        self._rerun_row = step
        return RerunTool(turn, index, decision, after_pause)

    async def _rerun_tool(
        self, turn: int, index: int, decision: dict[str, Any] | None, after_pause: bool
    ) -> Next:
        """The tool step re-entry names, run again with its row's saved arguments."""
        step = self._rerun_row
        assert step is not None
        calls = self._calls
        call = msgspec.structs.replace(calls[index], arguments=dict(step.node_input))
        if call.name in self._specials:
            below, self._below = self._below, None
            return await self._special(step, call, turn, index, below, after_pause=after_pause)
        attempt = 1
        if self.rows.trace is not None:
            attempt = await rerun_attempt(self.store, step)
            self.rows.trace.reentered(attempt)
        self._transcript.append(await self._call_tool(step, call, decision, attempt))
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
            agent_path=tool_path(self.path, tool) if isinstance(tool, str) else origin.agent_path,
            parent_checkpoint_id=None,
        )
        return self._reenter(step, None, after_pause=False)


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


def _first_abandoned(group: BaseExceptionGroup[StepAbandoned]) -> StepAbandoned:
    for error in group.exceptions:
        if isinstance(error, BaseExceptionGroup):
            return _first_abandoned(error)
        return error
    raise AssertionError("split() returned an empty group")  # pragma: no cover


def _first_of(group: BaseExceptionGroup[Any], kind: type[T]) -> T:
    for error in group.exceptions:
        if isinstance(error, kind):
            return error
        if isinstance(error, BaseExceptionGroup):
            return _first_of(error, kind)
    raise AssertionError("split() returned a group without the signal")  # pragma: no cover


def level_of(runner: Any, rows: RunLog, path: str, root: Any) -> Level:
    """The level of ``runner`` (an Agent, a Swarm or a Supervisor) at ``path`` of a run of ``root``."""
    if isinstance(runner, Agent):
        return AgentLevel(agent=runner, rows=rows, path=path, runner=root)
    level: Level = runner.level(rows, path, root)
    return level
