"""Errors reach the developer through the standard-library logger ``"tether"``.

A tool that raises is a tool error the model reads and a WARNING with its traceback naming the run,
the agent path and the tool; a failed run is an ERROR; leaving the ``ActorSystem`` block while a run
is mid-step is a WARNING naming how to resume it; a sync ``@idempotent`` function called from an
async tool is explained in the log too; step events say what starts, and a tool's end is logged
with its outcome and duration.
"""

from __future__ import annotations

import logging
import re
from pathlib import Path

import anyio
import pytest
from conftest import Backend

from actors import ActorSystem, Agent, idempotent, tool
from actors.models import FunctionModel, Message, ModelReply, ToolCall

pytestmark = pytest.mark.anyio

LIMIT = 30.0


def one_call(name: str, arguments: dict[str, object] | None = None) -> FunctionModel:
    """Turn 0 calls ``name``; then the model answers with what the tool said."""

    def model(messages: list[Message]) -> str | ModelReply:
        if messages[-1].role == "tool":
            return f"model read: {messages[-1].content}"
        return ModelReply(tool_calls=[ToolCall(name, dict(arguments or {}))])

    return FunctionModel(model)


def tether_records(caplog: pytest.LogCaptureFixture, level: int) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == "tether" and r.levelno == level]


async def run_once(backend: Backend, agent: Agent, text: str = "go") -> tuple[str, str | None]:
    store = backend.open()
    await store.setup()
    try:
        async with ActorSystem(store) as system:
            result = await (await system.spawn(agent, text)).result(timeout=10)
            return result.execution_id, result.output if result.status == "completed" else result.error
    finally:
        await store.close()


async def test_a_raising_tool_is_read_by_the_model_and_logged_with_its_traceback(
    store_backend: Backend, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="tether")

    @tool
    def lookup(order: str) -> str:
        """Look an order up."""
        raise KeyError(f"no order {order}")

    agent = Agent("looker", one_call("lookup", {"order": "77"}), tools=[lookup])
    with anyio.fail_after(LIMIT):
        eid, output = await run_once(store_backend, agent)
    assert output == "model read: Tool 'lookup' failed: KeyError: 'no order 77'"
    [warning] = tether_records(caplog, logging.WARNING)
    text = warning.getMessage()
    assert "event='tool raised'" in text
    assert f"execution_id='{eid}'" in text
    assert "agent_path='agent:looker/tool:lookup'" in text and "tool='lookup'" in text
    assert warning.exc_info is not None and warning.exc_info[0] is KeyError
    assert "raise KeyError" in caplog.text  # the traceback reaches the handler's output
    finished = [
        r.getMessage() for r in tether_records(caplog, logging.INFO) if "tool finished" in r.getMessage()
    ]
    assert len(finished) == 1 and "outcome='raised'" in finished[0]
    assert re.search(r"duration_ms=\d+(\.\d+)?", finished[0])


async def test_a_failed_run_logs_an_error(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    def model(messages: list[Message]) -> str:
        raise RuntimeError("provider returned 503")

    agent = Agent("flaky", FunctionModel(model))
    with anyio.fail_after(LIMIT):
        eid, error = await run_once(Backend("sqlite", str(tmp_path / "f.db")), agent)
    assert error == "RuntimeError: provider returned 503"
    [record] = tether_records(caplog, logging.ERROR)
    text = record.getMessage()
    assert "event='run failed'" in text and f"execution_id='{eid}'" in text
    assert "error='RuntimeError: provider returned 503'" in text


async def test_a_cancelled_run_is_not_an_error(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    release = anyio.Event()

    @tool
    async def wait() -> str:
        """Wait."""
        await release.wait()
        return "done"

    agent = Agent("waiter", one_call("wait"), tools=[wait])
    store = Backend("sqlite", str(tmp_path / "c.db")).open()
    await store.setup()
    try:
        with anyio.fail_after(LIMIT):
            async with ActorSystem(store) as system:
                ref = await system.spawn(agent, "go")
                await system.cancel(ref.execution_id, "operator")
    finally:
        await store.close()
    assert tether_records(caplog, logging.ERROR) == []


async def test_leaving_the_system_mid_step_warns_with_the_resume_command(
    store_backend: Backend, caplog: pytest.LogCaptureFixture
) -> None:
    entered = anyio.Event()

    @tool
    async def slow() -> str:
        """Take a long time."""
        entered.set()
        await anyio.sleep(60)
        return "never"

    @tool
    async def quick() -> str:
        """Wait for nothing."""
        return "quick"

    agent = Agent("slowpoke", one_call("slow"), tools=[slow, quick])
    store = store_backend.open()
    await store.setup()
    try:
        with anyio.fail_after(LIMIT):
            async with ActorSystem(store) as system:
                refs = [await system.spawn(agent, "go") for _ in range(2)]
                await entered.wait()
                await anyio.sleep(0.05)  # both runs are inside their tool now
    finally:
        await store.close()
    warnings = [r.getMessage() for r in tether_records(caplog, logging.WARNING)]
    for ref in refs:
        [mine] = [w for w in warnings if f"execution_id='{ref.execution_id}'" in w]
        eid = ref.execution_id
        assert mine.startswith(  # every field, in full
            f"event='run stopped mid-step' execution_id='{eid}' agent_path='agent:slowpoke/tool:slow' "
            "node_id='turn:0/tool:slow' step_type='tool_call' "
            f"resume=\"await system.resume('{eid}') in a process whose ActorSystem has runner 'slowpoke', "
            f'or: tether resume {eid} --runner module:attr" '
        ), mine


async def test_a_sync_idempotent_function_in_an_async_tool_is_explained_in_the_log(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    @idempotent
    def charge(order: str) -> str:
        return f"charged {order}"

    @tool
    async def refund(order: str) -> str:
        """Refund an order."""
        return charge(order)

    agent = Agent("mixed", one_call("refund", {"order": "5"}), tools=[refund])
    with anyio.fail_after(LIMIT):
        _, output = await run_once(Backend("sqlite", str(tmp_path / "s.db")), agent)
    assert output is not None and "not from a worker thread" in output  # the model is told
    [warning] = tether_records(caplog, logging.WARNING)
    text = warning.getMessage()
    assert "tool='refund'" in text
    assert "sync @idempotent function" in text and "make it async" in text  # and so is the developer


async def test_step_events_say_what_starts_and_tools_log_their_end(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="tether")

    @tool
    async def ping() -> str:
        """Ping."""
        await anyio.sleep(0.02)
        return "pong"

    agent = Agent("pinger", one_call("ping"), tools=[ping])
    with anyio.fail_after(LIMIT):
        eid, output = await run_once(Backend("sqlite", str(tmp_path / "p.db")), agent)
    assert output == "model read: pong"
    events = [r.getMessage() for r in tether_records(caplog, logging.INFO) if f"'{eid}'" in r.getMessage()]
    kinds = [re.match(r"event='([^']*)'", e).group(1) for e in events]  # type: ignore[union-attr]
    assert kinds == ["step started", "step started", "tool finished", "step started", "run ended"]
    assert "step_type='llm_call'" in events[0] and "node_id='turn:0'" in events[0]
    assert "step_type='tool_call'" in events[1] and "node_id='turn:0/tool:ping'" in events[1]
    assert "outcome='ok'" in events[2] and "tool='ping'" in events[2]
    duration = float(re.search(r"duration_ms=([\d.]+)", events[2]).group(1))  # type: ignore[union-attr]
    assert 15 <= duration < 10_000
    assert "status='completed'" in events[4]
    assert not any("completed" in e for e in events[:4])  # a step row announces a start
