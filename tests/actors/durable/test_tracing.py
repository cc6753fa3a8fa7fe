"""OpenTelemetry spans of runs (``docs/observability.md``), read from the real SDK's exporters.

A run against a loopback chat-completions server that reports usage gives one ``invoke_agent`` span
per activation, a ``chat`` span per model call and an ``execute_tool`` span per tool call, with the
GenAI attributes and tether's own, the children under the activation's span. One run is one trace:
paused in one process and resumed in another (real child processes, each exporting), or killed
with SIGKILL and recovered elsewhere, every span shares the run's trace id, and the step that runs
again carries ``tether.attempt`` 2. Errors set the span status; without a tracer provider nothing is
recorded or stored. The ``"tether"`` logger's records carry the run's fields and the span's ids.
"""

from __future__ import annotations

import json
import logging
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode
from opentelemetry.util._once import Once

from actors import ActorSystem, Agent, Resume, Supervisor, interrupt, tool
from actors.lowlevel import tether_logger
from actors.models import FunctionModel, Message, ModelReply, OpenAIChat, ToolCall, Usage
from stores import SQLiteStore

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "models"))
from _chat_server import ChatServer, Reply, completion, serve

pytestmark = pytest.mark.anyio

LIMIT = 60.0
CHILD = Path(__file__).with_name("_tracing_child.py")
CALL_ID = "call_refund_1"


@pytest.fixture
def server() -> Iterator[ChatServer]:
    yield from serve()


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    """A configured tracer provider exporting to memory, for this test only (the api's globals are
    reset afterwards, as the OpenTelemetry test utilities do, so other tests run untraced)."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    try:
        yield exporter
    finally:
        provider.shutdown()
        trace._TRACER_PROVIDER_SET_ONCE = Once()
        trace._TRACER_PROVIDER = None


def usage(prompt: int, completion_tokens: int) -> dict[str, int]:
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt + completion_tokens,
    }


def calls_refund(tokens: dict[str, int]) -> Reply:
    call = {
        "id": CALL_ID,
        "type": "function",
        "function": {"name": "refund", "arguments": '{"order": "A-1"}'},
    }
    body = completion({"role": "assistant", "content": None, "tool_calls": [call]}, "tool_calls")
    return Reply(body={**body, "usage": tokens})


def answers(text: str, tokens: dict[str, int]) -> Reply:
    return Reply(body={**completion({"role": "assistant", "content": text}), "usage": tokens})


@tool
def refund(order: str) -> str:
    """Refund an order."""
    return f"refunded {order}"


def refunder(base_url: str, *, stream: bool = False) -> Agent:
    return Agent("refunder", OpenAIChat("test-model", base_url=base_url, stream=stream), tools=[refund])


def by_name(finished: Any) -> dict[str, list[ReadableSpan]]:
    out: dict[str, list[ReadableSpan]] = {}
    for span in finished:
        out.setdefault(span.name, []).append(span)
    return out


async def test_a_run_with_one_tool_gives_its_genai_spans_under_the_run_span(
    spans: InMemorySpanExporter, server: ChatServer, sqlite_path: Path
) -> None:
    server.script = [calls_refund(usage(11, 7)), answers("Refunded A-1.", usage(23, 5))]
    agent = refunder(server.base_url)
    async with SQLiteStore(sqlite_path) as store, ActorSystem(store, runners=[agent]) as system:
        with anyio.fail_after(LIMIT):
            result = await (await system.spawn(agent, "Refund order A-1", execution_id="traced")).result()
        rows = await system.history("traced")
    assert result.status == "completed" and result.output == "Refunded A-1."

    named = by_name(spans.get_finished_spans())
    assert sorted((name, len(found)) for name, found in named.items()) == [
        ("chat test-model", 2),
        ("execute_tool refund", 1),
        ("invoke_agent refunder", 1),
    ]
    [run] = named["invoke_agent refunder"]
    first, second = sorted(named["chat test-model"], key=lambda s: s.attributes["tether.seq"])
    [tool_span] = named["execute_tool refund"]
    assert run.kind == SpanKind.INTERNAL and run.parent is None
    assert run.attributes["gen_ai.operation.name"] == "invoke_agent"
    assert run.attributes["tether.seq"] == 0 and run.attributes["tether.attempt"] == 1
    for child in (first, second, tool_span):
        assert child.parent is not None and child.parent.span_id == run.context.span_id
        assert child.context.trace_id == run.context.trace_id
        assert child.attributes["tether.execution_id"] == "traced"
        assert child.attributes["tether.attempt"] == 1
        assert child.status.status_code == StatusCode.UNSET
    for chat, seq, tokens, reason in ((first, 0, (11, 7), "tool_calls"), (second, 2, (23, 5), "stop")):
        assert chat.kind == SpanKind.CLIENT
        assert chat.attributes["gen_ai.operation.name"] == "chat"
        assert chat.attributes["gen_ai.request.model"] == "test-model"
        assert (
            chat.attributes["tether.seq"] == seq and chat.attributes["tether.agent_path"] == "agent:refunder"
        )
        got = (chat.attributes["gen_ai.usage.input_tokens"], chat.attributes["gen_ai.usage.output_tokens"])
        assert got == tokens
        assert chat.attributes["gen_ai.response.finish_reasons"] == (reason,)
    assert tool_span.attributes["gen_ai.operation.name"] == "execute_tool"
    assert tool_span.attributes["gen_ai.tool.name"] == "refund"
    assert tool_span.attributes["gen_ai.tool.call.id"] == CALL_ID
    assert tool_span.attributes["tether.seq"] == 1
    assert tool_span.attributes["tether.agent_path"] == "agent:refunder/tool:refund"
    # The spans nest in time as in the tree: the tool runs between the two model calls.
    assert first.end_time <= tool_span.start_time <= tool_span.end_time <= second.start_time
    assert run.start_time <= first.start_time and second.end_time <= run.end_time
    # The run's rows carry its trace: the run span's traceparent, on every row.
    parent = f"00-{run.context.trace_id:032x}-{run.context.span_id:016x}-"
    assert all(row.state_snapshot["trace"].startswith(parent) for row in rows)


async def test_errors_set_the_span_status(
    spans: InMemorySpanExporter, server: ChatServer, sqlite_path: Path
) -> None:
    @tool
    def refund(order: str) -> str:
        """Refund an order (the payment system is down)."""
        raise ConnectionError("payments unreachable")

    server.script = [calls_refund(usage(3, 2)), Reply(400, {"error": {"message": "bad request"}})]
    agent = Agent("refunder", OpenAIChat("test-model", base_url=server.base_url), tools=[refund])
    async with SQLiteStore(sqlite_path) as store, ActorSystem(store, runners=[agent]) as system:
        with anyio.fail_after(LIMIT):
            result = await (await system.spawn(agent, "Refund order A-1")).result()
    assert result.status == "failed" and "bad request" in (result.error or "")

    named = by_name(spans.get_finished_spans())
    [tool_span] = named["execute_tool refund"]
    assert tool_span.status.status_code == StatusCode.ERROR
    assert "payments unreachable" in (tool_span.status.description or "")
    assert tool_span.attributes["error.type"] == "raised"
    ok, failed = sorted(named["chat test-model"], key=lambda s: s.attributes["tether.seq"])
    assert ok.status.status_code == StatusCode.UNSET
    assert failed.status.status_code == StatusCode.ERROR and failed.attributes["error.type"] == "ModelError"
    assert [event.name for event in failed.events] == ["exception"]
    [run] = named["invoke_agent refunder"]
    assert run.status.status_code == StatusCode.ERROR and "bad request" in (run.status.description or "")
    assert run.attributes["error.type"] == "ModelError"


async def test_without_a_tracer_provider_nothing_is_recorded_or_stored(sqlite_path: Path) -> None:
    """The api is imported (this module imports the SDK) but no provider is configured: the run's
    rows are those of an untraced run, and no span is made."""
    assert isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider)

    def model(messages: list[Message]) -> str | ModelReply:
        if messages[-1].role == "tool":
            return "done"
        return ModelReply(tool_calls=[ToolCall("refund", {"order": "A-1"})])

    agent = Agent("plain", FunctionModel(model), tools=[refund])
    async with SQLiteStore(sqlite_path) as store, ActorSystem(store, runners=[agent]) as system:
        result = await (await system.spawn(agent, "Refund order A-1", execution_id="plain")).result()
        rows = await system.history("plain")
    assert result.status == "completed" and result.usage == Usage()
    assert [row.node_id for row in rows] == ["turn:0", "turn:0/tool:refund", "turn:1", "run_end"]
    assert all("trace" not in row.state_snapshot and "usage" not in row.state_snapshot for row in rows)


async def test_the_tether_logger_records_carry_the_run_and_the_span(
    spans: InMemorySpanExporter, sqlite_path: Path
) -> None:
    records: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record)

    def model(messages: list[Message]) -> str | ModelReply:
        if messages[-1].role == "tool":
            return "done"
        return ModelReply(tool_calls=[ToolCall("refund", {"order": "A-1"})])

    logger = logging.getLogger("tether")
    handler, level = Keep(), logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        agent = Agent("logged", FunctionModel(model), tools=[refund])
        async with SQLiteStore(sqlite_path) as store, ActorSystem(store, runners=[agent]) as system:
            await (await system.spawn(agent, "Refund order A-1", execution_id="logged")).result()
        tether_logger().info("outside", execution_id="x")
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)

    named = by_name(spans.get_finished_spans())
    [run] = named["invoke_agent logged"]
    [tool_span] = named["execute_tool refund"]
    steps = [r for r in records if r.getMessage().startswith("event='step started'")]
    assert [(r.execution_id, r.seq, r.agent_path) for r in steps] == [  # type: ignore[attr-defined]
        ("logged", 0, "agent:logged"),
        ("logged", 1, "agent:logged/tool:refund"),
        ("logged", 2, "agent:logged"),
    ]
    for record in steps:  # logged while the run's span is the current one
        assert record.trace_id == f"{run.context.trace_id:032x}"  # type: ignore[attr-defined]
        assert record.span_id == f"{run.context.span_id:016x}"  # type: ignore[attr-defined]
    [finished] = [r for r in records if r.getMessage().startswith("event='tool finished'")]
    assert finished.span_id == f"{tool_span.context.span_id:016x}"  # type: ignore[attr-defined]
    assert (finished.execution_id, finished.seq) == ("logged", 1)  # type: ignore[attr-defined]
    # Outside any span the ids are None (the fields are always there, for formatters).
    [outside] = [r for r in records if r.getMessage().startswith("event='outside'")]
    assert (outside.execution_id, outside.seq, outside.trace_id, outside.span_id) == ("x", None, None, None)  # type: ignore[attr-defined]


# -- across processes: one trace ---------------------------------------------------------------------


class Leg:
    """One leg of a run in a child process, its spans exported to a file of its own."""

    def __init__(self, tmp_path: Path, name: str) -> None:
        self.spans_file = tmp_path / f"{name}.spans"
        self.process: anyio.abc.Process | None = None

    async def start(self, mode: str, db: Path, base_url: str, execution_id: str) -> Leg:
        argv = [sys.executable, str(CHILD), mode, str(db), str(self.spans_file), base_url, execution_id]
        self.process = await anyio.open_process(argv)
        return self

    async def finish(self) -> list[Any]:
        assert self.process is not None and self.process.stdout is not None
        out = b""
        async for chunk in self.process.stdout:
            out += chunk
        assert await self.process.wait() == 0
        return json.loads(out.decode().strip().splitlines()[-1])

    def spans(self) -> list[dict[str, Any]]:
        if not self.spans_file.exists():
            return []
        return [json.loads(line) for line in self.spans_file.read_text().splitlines() if line.strip()]


def named(found: list[dict[str, Any]], name: str) -> list[dict[str, Any]]:
    return [span for span in found if span["name"] == name]


async def test_paused_in_one_process_resumed_in_another_is_one_trace(
    server: ChatServer, tmp_path: Path
) -> None:
    db = tmp_path / "tether.db"
    server.script = [calls_refund(usage(11, 7)), answers("Refunded A-1.", usage(23, 5))]
    with anyio.fail_after(LIMIT):
        first = await Leg(tmp_path, "first").start("pause", db, server.base_url, "one-trace")
        assert await first.finish() == ["paused", 11, 7]
        second = await Leg(tmp_path, "second").start("resume", db, server.base_url, "one-trace")
        assert await second.finish() == ["completed", 34, 12]

    before, after = first.spans(), second.spans()
    assert [s["name"] for s in before] == ["chat test-model", "execute_tool refund", "invoke_agent refunder"]
    assert [s["name"] for s in after] == ["execute_tool refund", "chat test-model", "invoke_agent refunder"]
    assert len({s["context"]["trace_id"] for s in before + after}) == 1
    [run1], [run2] = named(before, "invoke_agent refunder"), named(after, "invoke_agent refunder")
    # The second activation is a child of the first one's span, its steps children of its own.
    assert run1["parent_id"] is None and run2["parent_id"] == run1["context"]["span_id"]
    assert all(s["parent_id"] == run1["context"]["span_id"] for s in before if s is not run1)
    assert all(s["parent_id"] == run2["context"]["span_id"] for s in after if s is not run2)
    # The paused tool is no error; the tool run again after the approval is its attempt 2.
    [paused] = named(before, "execute_tool refund")
    assert paused["status"]["status_code"] == "UNSET" and paused["attributes"]["tether.attempt"] == 1
    assert [event["name"] for event in paused["events"]] == ["tether.paused"]
    [approved] = named(after, "execute_tool refund")
    assert approved["attributes"]["tether.attempt"] == 2
    assert approved["attributes"]["tether.seq"] == paused["attributes"]["tether.seq"] == 1
    assert run2["attributes"]["tether.attempt"] == 2


async def test_a_tool_killed_by_sigkill_runs_again_as_attempt_2_in_the_same_trace(
    server: ChatServer, tmp_path: Path
) -> None:
    db = tmp_path / "tether.db"
    server.script = [calls_refund(usage(11, 7)), answers("Refunded A-1.", usage(23, 5))]
    with anyio.fail_after(LIMIT):
        killed = await Leg(tmp_path, "killed").start("kill-tool", db, server.base_url, "killed-tool")
        assert killed.process is not None and await killed.process.wait() == -9
        recovered = await Leg(tmp_path, "recovered").start("recover", db, server.base_url, "killed-tool")
        assert await recovered.finish() == ["completed", 34, 12]

    before, after = killed.spans(), recovered.spans()
    # The killed process ended only its model call's span; the recovery re-runs the tool.
    assert [s["name"] for s in before] == ["chat test-model"]
    assert [s["name"] for s in after] == ["execute_tool refund", "chat test-model", "invoke_agent refunder"]
    assert len({s["context"]["trace_id"] for s in before + after}) == 1
    [again] = named(after, "execute_tool refund")
    assert again["attributes"]["tether.attempt"] == 2 and again["attributes"]["tether.seq"] == 1
    [chat] = named(after, "chat test-model")
    assert chat["attributes"]["tether.attempt"] == 1 and chat["attributes"]["tether.seq"] == 3


async def test_a_model_call_cut_by_sigkill_is_reissued_as_attempt_2_in_the_same_trace(
    server: ChatServer, tmp_path: Path
) -> None:
    db = tmp_path / "tether.db"
    # The first answer is held back: the child is killed while it waits for it.
    server.script = [
        Reply(body=completion({"role": "assistant", "content": "late"}), delay=30),
        calls_refund(usage(11, 7)),
        answers("Refunded A-1.", usage(23, 5)),
    ]
    with anyio.fail_after(LIMIT):
        killed = await Leg(tmp_path, "killed").start("plain", db, server.base_url, "killed-chat")
        while not server.requests:  # noqa: ASYNC110 (the server's thread records the request)
            await anyio.sleep(0.02)
        assert killed.process is not None
        killed.process.kill()
        await killed.process.wait()
        recovered = await Leg(tmp_path, "recovered").start("recover", db, server.base_url, "killed-chat")
        assert await recovered.finish() == ["completed", 34, 12]
        store = SQLiteStore(db)
        async with store:
            first_row = (await store.history("killed-chat"))[0]

    assert killed.spans() == []  # nothing had ended in the killed process
    after = recovered.spans()
    [run] = named(after, "invoke_agent refunder")
    stored = first_row.state_snapshot["trace"].split("-")
    assert {s["context"]["trace_id"] for s in after} == {f"0x{stored[1]}"}
    assert run["parent_id"] == f"0x{stored[2]}"  # the killed activation's span
    reissued, answer = sorted(named(after, "chat test-model"), key=lambda s: s["attributes"]["tether.seq"])
    assert reissued["attributes"]["tether.attempt"] == 2
    assert reissued["attributes"]["gen_ai.usage.input_tokens"] == 11
    assert answer["attributes"]["tether.attempt"] == 1
    assert run["attributes"]["tether.attempt"] == 2


async def test_a_run_spawned_inside_a_span_starts_its_trace_under_it(
    spans: InMemorySpanExporter, sqlite_path: Path
) -> None:
    agent = Agent("answers", FunctionModel(lambda messages: "hello"))
    async with SQLiteStore(sqlite_path) as store, ActorSystem(store, runners=[agent]) as system:
        with trace.get_tracer("app").start_as_current_span("POST /refunds") as request:
            ref = await system.spawn(agent, "hi")
        await ref.result()
    [run] = by_name(spans.get_finished_spans())["invoke_agent answers"]
    assert run.parent is not None and run.parent.span_id == request.get_span_context().span_id
    assert run.context.trace_id == request.get_span_context().trace_id


DOC = Path(__file__).resolve().parents[3] / "docs" / "observability.md"


@pytest.mark.parametrize("loop", ["asyncio", "trio"])
def test_the_observability_page_example_runs(tmp_path: Path, loop: str) -> None:
    """The page's example exports its spans to the console and prints the run's usage."""
    [example] = re.findall(r"```python\n(.*?)```", DOC.read_text(), flags=re.DOTALL)
    if loop == "trio":
        example = example.replace("anyio.run(main)", 'anyio.run(main, backend="trio")')
    script = tmp_path / "example.py"
    script.write_text(example)
    done = subprocess.run(
        [sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    names = re.findall(r'^    "name": "([^"]+)"', done.stdout, flags=re.MULTILINE)
    assert names == ["chat scripted", "execute_tool refund", "chat scripted", "invoke_agent refund-bot"]
    assert done.stdout.rstrip().endswith("completed Usage(input_tokens=92, output_tokens=15)")


async def test_a_supervisors_workers_trace_under_the_run_span(
    spans: InMemorySpanExporter, sqlite_path: Path
) -> None:
    """A topology is one run: its workers' model calls (in their own actors) are spans of the run's
    activation, told apart by their agent path."""

    def manager(messages: list[Message]) -> str | ModelReply:
        if any(m.role == "tool" for m in messages):
            return "reported"
        return ModelReply(tool_calls=[ToolCall("delegate_to_research", {"task": "look"})])

    worker = Agent("research", FunctionModel(lambda messages: "found it", name="worker-model"))
    lead = Supervisor(
        "lead", Agent("manager", FunctionModel(manager, name="lead-model")), {"research": worker}
    )
    async with SQLiteStore(sqlite_path) as store, ActorSystem(store, runners=[lead]) as system:
        with anyio.fail_after(LIMIT):
            result = await (await system.spawn(lead, "report")).result()
    assert result.output == "reported"
    found = spans.get_finished_spans()
    [run] = [s for s in found if s.name == "invoke_agent lead"]
    chats = [(s.name, s.attributes["tether.agent_path"]) for s in found if s.name.startswith("chat ")]
    assert chats == [
        ("chat lead-model", "supervisor:lead"),
        ("chat worker-model", "supervisor:lead/worker:research"),
        ("chat lead-model", "supervisor:lead"),
    ]
    assert all(s.context.trace_id == run.context.trace_id for s in found)
    assert all(
        s.parent is not None and s.parent.span_id == run.context.span_id for s in found if s is not run
    )


async def test_a_claimed_pause_and_an_enqueued_run_keep_their_trace(
    spans: InMemorySpanExporter, sqlite_path: Path
) -> None:
    """A claim (no runner needed) writes its resume row with the run's trace and usage, so the
    worker that drives the run on continues the trace; an enqueued run's trace starts under the
    enqueuer's span, whichever worker takes it."""

    @tool
    def refund(order: str) -> str:
        """Refund, after approval."""
        return f"approved={interrupt('approval', {'order': order}).approved}"

    def model(messages: list[Message]) -> ModelReply:
        if messages[-1].role == "tool":
            return ModelReply("done", usage=Usage(input_tokens=5, output_tokens=1))
        return ModelReply(
            tool_calls=[ToolCall("refund", {"order": "A-1"})], usage=Usage(input_tokens=3, output_tokens=2)
        )

    agent = Agent("claimed", FunctionModel(model), tools=[refund])
    async with SQLiteStore(sqlite_path) as store, ActorSystem(store, runners=[agent]) as system:
        with anyio.fail_after(LIMIT):
            await (await system.spawn(agent, "Refund A-1", execution_id="claimed")).result()
            await system.claim("claimed", Resume(approved=True))
            claimed = (await system.history("claimed"))[-1]
            assert (await system.status("claimed")).usage == Usage(input_tokens=3, output_tokens=2)
            done = await system.resume("claimed")
            with trace.get_tracer("app").start_as_current_span("POST /queue") as request:
                queued = await system.enqueue(agent, "Refund B-2")
            assert await system.sweep() == 1
    assert claimed.step_type == "resume" and "trace" in claimed.state_snapshot
    assert done.usage == Usage(input_tokens=8, output_tokens=3)
    found = spans.get_finished_spans()
    first, second, third = (s for s in found if s.name == "invoke_agent claimed")
    assert first.context.trace_id == second.context.trace_id != third.context.trace_id
    assert second.parent is not None and second.parent.span_id == first.context.span_id
    assert third.parent is not None and third.parent.span_id == request.get_span_context().span_id
    assert third.attributes["tether.execution_id"] == queued
