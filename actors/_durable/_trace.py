"""OpenTelemetry spans of a run, following the GenAI semantic conventions; free when nobody traces.

Each activation of a run (a spawn, a fork, a resume, a recovery) is one ``invoke_agent <runner>``
span (INTERNAL); each model call under it one ``chat <model>`` span (CLIENT) and each tool call one
``execute_tool <tool>`` span, all with ``tether.execution_id``, ``tether.seq`` (the step's row),
``tether.agent_path`` and ``tether.attempt`` (2 and more for a re-issued step).

One run is one trace. The first traced activation records its span as a W3C ``traceparent``
(``00-<trace id>-<span id>-<flags>``) in the snapshot of every row it writes (:data:`TRACE`), and
every later activation, in any process, reads it from the run's newest row, carries it on, and
starts its own span as a child of that first span: a pause that lasts days and resumes on another
machine continues the same trace. The key is carried on by untraced activations too, so a traced
one after them still finds it.

The library depends only on ``opentelemetry-api`` (the extra ``otel``) and never imports it: an
application that configured a tracer provider has imported ``opentelemetry.trace`` already, so
:func:`active_tracer` looks for it in ``sys.modules`` once per activation. Without a configured
provider (the api's proxy) there is no :class:`RunTrace`, and the steps check one attribute.
"""

from __future__ import annotations

import sys
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any, Final

from stores import RECOVER, REENTRY_SEQ, RESUME, Checkpoint, Store

from ..models import Message, Model, ModelReply, ToolCall
from ._events import attempt_of
from ._interrupt import PauseSignal
from ._runlog import TRACE, step_seq
from ._tools import ToolOutcome

if TYPE_CHECKING:
    from opentelemetry.context import Context
    from opentelemetry.trace import Span, Tracer

    from ._result import RunResult

__all__ = ["TRACE", "RunTrace", "active_tracer", "caller_traceparent", "model_name", "rerun_attempt"]

#: The instrumentation scope of tether's spans.
_SCOPE: Final = "tether"

_cached: tuple[object, Tracer] | None = None


def active_tracer() -> Tracer | None:
    """The tracer of the configured tracer provider, or ``None`` when no provider is configured (or
    ``opentelemetry.trace`` was never imported): then nothing is traced."""
    global _cached
    api = sys.modules.get("opentelemetry.trace")
    if api is None:
        return None
    provider = api.get_tracer_provider()
    if isinstance(provider, api.ProxyTracerProvider | api.NoOpTracerProvider):
        return None
    if _cached is None or _cached[0] is not provider:
        _cached = (provider, provider.get_tracer(_SCOPE))
    return _cached[1]


def caller_traceparent() -> str | None:
    """The ``traceparent`` of the caller's current span when a tracer provider is configured and a
    span is recording (an enqueue records it: the run's first activation, in whichever worker,
    starts under it); else ``None``."""
    if active_tracer() is None:
        return None
    from opentelemetry import trace

    span = trace.get_current_span()
    return _traceparent(span) if span.get_span_context().is_valid else None


def _traceparent(span: Span) -> str:
    context = span.get_span_context()
    return f"00-{context.trace_id:032x}-{context.span_id:016x}-{int(context.trace_flags):02x}"


def _parent_context(traceparent: str) -> Context | None:
    """The context of a stored ``traceparent`` (None when it cannot be read)."""
    from opentelemetry import trace

    parts = traceparent.split("-")
    try:
        trace_id, span_id, flags = int(parts[1], 16), int(parts[2], 16), int(parts[3], 16)
    except (IndexError, ValueError):
        return None
    if len(parts) != 4 or not trace_id or not span_id:
        return None
    parent = trace.SpanContext(trace_id, span_id, is_remote=True, trace_flags=trace.TraceFlags(flags))
    return trace.set_span_in_context(trace.NonRecordingSpan(parent))


def model_name(model: object) -> str:
    """What ``gen_ai.request.model`` says of ``model``: its ``model`` (an API model name) or its
    ``name``, else its class."""
    for attribute in ("model", "name"):
        value = getattr(model, attribute, None)
        if isinstance(value, str) and value:
            return value
    return type(model).__name__


def _common(execution_id: str, row: Checkpoint, attempt: int) -> dict[str, Any]:
    return {
        "tether.execution_id": execution_id,
        "tether.seq": row.seq,
        "tether.agent_path": row.agent_path or "",
        "tether.attempt": attempt,
    }


class RunTrace:
    """The spans of one activation of one run: its ``invoke_agent`` span and the spans under it.

    A new run's span starts at once (:meth:`begin`, a child of the caller's current span, if any);
    a resumed run's when its newest row is read (its stored ``traceparent`` is the parent). The
    activation's work makes it current in its task (:meth:`enter`) once it has begun, so the
    ``"tether"`` logger's records carry its ids; a model or tool call makes its own span current.
    :meth:`ended` or :meth:`abandon` ends it.
    """

    __slots__ = (
        "_attempt_set",
        "_context",
        "_tracer",
        "execution_id",
        "path",
        "runner",
        "span",
    )

    def __init__(self, tracer: Tracer, *, execution_id: str, runner: str, path: str) -> None:
        self._tracer = tracer
        self.execution_id = execution_id
        self.runner = runner
        self.path = path
        self.span: Span | None = None
        self._context: Context | None = None
        self._attempt_set = False

    def begin(self, traceparent: str | None, *, seq: int, attempt: int = 1) -> str:
        """Start the activation's span, as a child of the run's stored ``traceparent`` (none: of the
        current span); returns the ``traceparent`` the run's rows carry from now on."""
        from opentelemetry import trace

        parent = _parent_context(traceparent) if traceparent is not None else None
        span = self._tracer.start_span(
            f"invoke_agent {self.runner}",
            context=parent,
            kind=trace.SpanKind.INTERNAL,
            attributes={
                "gen_ai.operation.name": "invoke_agent",
                "gen_ai.agent.name": self.runner,
                "tether.execution_id": self.execution_id,
                "tether.seq": seq,
                "tether.agent_path": self.path,
                "tether.attempt": attempt,
            },
        )
        self._attempt_set = attempt > 1
        self.span = span
        self._context = trace.set_span_in_context(span)
        if traceparent is not None and parent is not None:
            return traceparent
        return _traceparent(span)

    def enter(self) -> object:
        """Make the activation's span current (in this task) until :meth:`leave`."""
        from opentelemetry import context

        return context.attach(self._context) if self._context is not None else None

    def leave(self, token: object) -> None:
        if token is not None:
            from opentelemetry import context

            context.detach(token)  # type: ignore[arg-type]

    def reentered(self, attempt: int) -> None:
        """The activation re-enters a step at ``attempt`` (the first level to say so is the one)."""
        if self.span is not None and not self._attempt_set:
            self._attempt_set = True
            self.span.set_attribute("tether.attempt", attempt)

    def ended(self, result: RunResult) -> None:
        """End the activation's span with how the run stands (``failed``: an error status)."""
        from opentelemetry import trace

        span = self.span
        if span is not None:
            span.set_attribute("tether.status", result.status)
            if result.status == "failed":
                span.set_status(trace.StatusCode.ERROR, result.error)
                span.set_attribute("error.type", _error_type(result.error))
            span.end()

    def abandon(self, error: BaseException) -> None:
        """End the activation's span with ``error``: it was refused, failed or stopped."""
        self._fail(error)

    def _fail(self, error: BaseException) -> None:
        span = self.span
        if span is not None:
            _failed(span, error)
            span.end()

    async def chat(
        self, row: Checkpoint, model: Model, messages: Sequence[Message], tools: Sequence[dict[str, Any]]
    ) -> ModelReply:
        """``model.complete(messages, tools)`` (the model call of ``row``) in a ``chat`` span."""
        from opentelemetry import context, trace

        name = model_name(model)
        attributes = _common(self.execution_id, row, attempt_of(row))
        attributes["gen_ai.operation.name"] = "chat"
        attributes["gen_ai.request.model"] = name
        span = self._tracer.start_span(
            f"chat {name}", context=self._context, kind=trace.SpanKind.CLIENT, attributes=attributes
        )
        token = context.attach(trace.set_span_in_context(span))
        try:
            reply = await model.complete(messages, tools)
        except BaseException as error:
            _failed(span, error)
            span.end()
            raise
        finally:
            context.detach(token)
        if isinstance(reply, ModelReply):
            if reply.usage is not None:
                span.set_attribute("gen_ai.usage.input_tokens", reply.usage.input_tokens)
                span.set_attribute("gen_ai.usage.output_tokens", reply.usage.output_tokens)
            span.set_attribute(
                "gen_ai.response.finish_reasons", ("tool_calls" if reply.tool_calls else "stop",)
            )
        span.end()
        return reply

    async def tool(
        self, row: Checkpoint, call: ToolCall, attempt: int, invoke: Callable[[], Awaitable[ToolOutcome]]
    ) -> ToolOutcome:
        """``invoke()`` (the call ``call`` of the tool row ``row``) in an ``execute_tool`` span. A pause
        is not an error; a tool error the model reads is."""
        from opentelemetry import context, trace

        attributes = _common(self.execution_id, row, attempt)
        attributes["tether.seq"] = step_seq(row)  # a paused tool's own row, not its pause's
        attributes["gen_ai.operation.name"] = "execute_tool"
        attributes["gen_ai.tool.name"] = call.name
        attributes["gen_ai.tool.call.id"] = call.id
        attributes["gen_ai.tool.type"] = "function"
        span = self._tracer.start_span(
            f"execute_tool {call.name}",
            context=self._context,
            kind=trace.SpanKind.INTERNAL,
            attributes=attributes,
        )
        token = context.attach(trace.set_span_in_context(span))
        try:
            outcome = await invoke()
        except BaseException as error:
            if _is_pause(error):
                span.add_event("tether.paused")
            else:
                _failed(span, error)
            span.end()
            raise
        finally:
            context.detach(token)
        if not outcome.ok:
            span.set_status(trace.StatusCode.ERROR, outcome.content)
            span.set_attribute("error.type", outcome.error or "tool_error")
        span.end()
        return outcome


def _is_pause(error: BaseException) -> bool:
    """Whether ``error`` is a tool's pause (``interrupt()``), also inside an exception group."""
    if isinstance(error, BaseExceptionGroup):
        match, rest = error.split(PauseSignal)
        return match is not None and rest is None
    return isinstance(error, PauseSignal)


def _failed(span: Span, error: BaseException) -> None:
    from opentelemetry import trace

    span.record_exception(error)
    span.set_status(trace.StatusCode.ERROR, f"{type(error).__name__}: {error}")
    span.set_attribute("error.type", type(error).__qualname__)


def _error_type(error: str | None) -> str:
    """The exception's name a failed run's error starts with (``MaxTurnsExceeded: ...``)."""
    head = (error or "").partition(":")[0]
    return head if head.isidentifier() else "run_failed"


async def rerun_attempt(store: Store, step: Checkpoint) -> int:
    """The attempt of the tool step ``step`` that a resume or a recovery runs again: 1 and the
    number of ``resume``/``recover`` rows that re-entered it (read from the run's history; this is
    asked only when the run is traced)."""
    rows = await store.history(step.execution_id)
    by_seq = {row.seq: row for row in rows}
    target = step_seq(step)
    count = 0
    for row in rows:
        if row.step_type not in (RECOVER, RESUME):
            continue
        seq = row.node_input.get(REENTRY_SEQ)
        named = by_seq.get(seq) if isinstance(seq, int) else None
        if named is not None and step_seq(named) == target:
            count += 1
    return 1 + count
