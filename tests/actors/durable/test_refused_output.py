"""Model output the store refuses ends the run; a bad tool call behaves the same with or without a crash.

A reply the JSON rule refuses (NaN in tool arguments, a NUL or a lone surrogate in the answer) is a
``ModelError``; content over ``max_row_bytes`` (an answer, or a tool's result that the next row
would hold) is ``RowTooLarge``. In every case the run fails with a ``run_end`` marker that names the cause and carries the
conversation up to the newest row that was stored, so it is never stuck, and a resume ends it the same
way again. Tool-call arguments that are not a JSON object are a tool error the model reads, checked
before the tool row is written, so a process killed right after that row recovers to the same answer.
Both backends.
"""

from __future__ import annotations

import math
import os
import sys
import textwrap
from pathlib import Path
from typing import Any

import anyio
import pytest
from conftest import Backend

from actors import ActorSystem, Agent, tool
from actors.models import FunctionModel, Message, ModelReply, ToolCall
from stores import Checkpoint, Store

pytestmark = pytest.mark.anyio

LIMIT = 30.0
HERE = Path(__file__).resolve().parent
TESTS_DIR = HERE.parents[1]


@tool
def refund(order: str, amount: float = 0.0) -> str:
    """Refund an order."""
    return f"refunded {order}"


@tool
def huge_result() -> str:
    """A tool whose result is larger than the store's row limit."""
    return "y" * 6000


def _model(first: ModelReply | str) -> FunctionModel:
    """``first`` on the first turn, then an answer saying what the tool said."""

    def reply(messages: list[Message]) -> ModelReply | str:
        if messages[-1].role == "tool":
            return f"done: {messages[-1].content}"
        return first

    return FunctionModel(reply)


CASES: list[tuple[str, ModelReply | str, str]] = [
    (
        "nan-arguments",
        ModelReply(tool_calls=[ToolCall("refund", {"order": "A1", "amount": math.nan})]),
        "ModelError: model FunctionModel",
    ),
    ("nul-answer", "all done\x00", "a string contains a NUL character"),
    ("surrogate-answer", "all done \ud83d", "lone surrogate"),
]


async def _failed_marker(store: Store, execution_id: str) -> tuple[Checkpoint, list[Checkpoint]]:
    rows = await store.history(execution_id)
    marker = rows[-1]
    assert marker.step_type == "run_end" and marker.status == "failed", [r.node_id for r in rows]
    return marker, rows


@pytest.mark.parametrize(("label", "first", "cause"), CASES, ids=[c[0] for c in CASES])
async def test_refused_model_output_fails_the_run_with_a_marker(
    store_backend: Backend, label: str, first: ModelReply | str, cause: str
) -> None:
    agent = Agent("refusing", _model(first), tools=[refund])
    store = store_backend.open()
    with anyio.fail_after(LIMIT):
        async with store, ActorSystem(store, runners=[agent]) as system:
            result = await (await system.spawn(agent, "refund A1", execution_id=label)).result(timeout=10)
            assert result.status == "failed" and result.error is not None
            assert cause in result.error and "ModelError" in result.error, result.error
            marker, rows = await _failed_marker(store, label)
            assert [r.node_id for r in rows] == ["turn:0", "run_end"]
            assert marker.state_snapshot["run_error"] == result.error
            # The marker carries the conversation of the newest stored row, not the refused reply.
            assert marker.state_snapshot["messages"] == rows[0].state_snapshot["messages"]
            # Never stuck: a resume steps over the failed marker, asks the model again, ends again.
            again = await system.resume(label, timeout=10)
            assert again.status == "failed" and cause in (again.error or "")
            assert [r.step_type for r in await store.history(label)][-3:] == [
                "recover",
                "llm_call",
                "run_end",
            ]


async def test_content_over_max_row_bytes_fails_the_run_with_a_marker(store_backend: Backend) -> None:
    agent = Agent("verbose", _model("x" * 6000))
    store = store_backend.open(max_row_bytes=4096)
    with anyio.fail_after(LIMIT):
        async with store, ActorSystem(store, runners=[agent]) as system:
            result = await (await system.spawn(agent, "talk", execution_id="big")).result(timeout=10)
            assert result.status == "failed" and result.error is not None
            assert result.error.startswith("RowTooLarge: ") and "4096" in result.error, result.error
            marker, rows = await _failed_marker(store, "big")
            assert marker.state_snapshot["messages"] == rows[0].state_snapshot["messages"]


async def test_a_tool_result_the_store_refuses_fails_the_run_with_a_marker(store_backend: Backend) -> None:
    agent = Agent(
        "huge-tool", _model(ModelReply(tool_calls=[ToolCall("huge_result", {})])), tools=[huge_result]
    )
    store = store_backend.open(max_row_bytes=4096)
    with anyio.fail_after(LIMIT):
        async with store, ActorSystem(store, runners=[agent]) as system:
            result = await (await system.spawn(agent, "go", execution_id="huge-tool")).result(timeout=10)
            assert result.status == "failed" and (result.error or "").startswith("RowTooLarge: "), (
                result.error
            )
            marker, rows = await _failed_marker(store, "huge-tool")
            assert [r.node_id for r in rows] == ["turn:0", "turn:0/tool:huge_result", "run_end"]
            assert marker.state_snapshot["messages"] == rows[1].state_snapshot["messages"]


# -- tool-call arguments that are not an object ------------------------------------------------------------

LIST_CALLS = ModelReply(tool_calls=[ToolCall("refund", [1, 2]), ToolCall("refund", {"order": "B2"})])  # type: ignore[arg-type]


def list_agent() -> Agent:
    return Agent("lister", _model(LIST_CALLS), tools=[refund])


CRASH_CHILD = textwrap.dedent(
    """
    import os, sys
    sys.path[:0] = [{tests!r}, {here!r}]
    import anyio
    from conftest import Backend
    from test_refused_output import crash_after_tool_row
    anyio.run(crash_after_tool_row, Backend(*sys.argv[1:3], sys.argv[3] if sys.argv[3] != "-" else ""), sys.argv[4], backend=os.environ.get("TETHER_TEST_LOOP", "asyncio"))
    """
)


def _killing(store: Store) -> Store:
    """``store`` with an ``append`` that kills the process right after the first tool row commits."""
    original = store.append

    async def append(row: Checkpoint) -> None:
        await original(row)
        if row.step_type == "tool_call":
            os._exit(23)

    store.append = append  # type: ignore[method-assign]
    return store


async def crash_after_tool_row(backend: Backend, execution_id: str) -> None:
    """The child: run the agent on a store that dies right after the bad call's tool row."""
    agent = list_agent()
    store = _killing(backend.open())
    async with store, ActorSystem(store, runners=[agent]) as system:
        await (await system.spawn(agent, "refund", execution_id=execution_id)).result(timeout=30)
    raise SystemExit("the store was supposed to kill this process")


async def _wait_unlocked(backend: Backend, execution_id: str) -> None:
    probe = backend.open()
    async with probe:
        for _ in range(500):
            if await probe.try_lock(execution_id):
                await probe.unlock(execution_id)
                return
            await anyio.sleep(0.01)
    pytest.fail("the ownership lock is still held 5 s after its owner died")


def _tool_answers(rows: list[Checkpoint]) -> list[Any]:
    messages = rows[-1].state_snapshot["messages"]
    return [(m["name"], m["content"]) for m in messages if m["role"] == "tool"]


async def test_arguments_that_are_not_an_object_behave_the_same_with_a_crash(
    store_backend: Backend,
) -> None:
    agent = list_agent()
    with anyio.fail_after(60):
        store = store_backend.open()
        async with store, ActorSystem(store, runners=[agent]) as system:
            calm = await (await system.spawn(agent, "refund", execution_id="calm")).result(timeout=10)
            calm_rows = await store.history("calm")
        assert calm.status == "completed"
        expected = [
            (
                "refund",
                "Tool 'refund' got invalid arguments: the arguments must be a JSON object, not a list",
            ),
            ("refund", "refunded B2"),
        ]
        assert _tool_answers(calm_rows) == expected
        assert calm_rows[1].node_input == {}  # the tool row never held the list

        code = CRASH_CHILD.format(tests=str(TESTS_DIR), here=str(HERE))
        child = await anyio.run_process(
            [sys.executable, "-c", code, *store_backend.child_args(), "crashed"], check=False
        )
        assert child.returncode == 23, child.stderr.decode()
        await _wait_unlocked(store_backend, "crashed")
        store = store_backend.open()
        async with store, ActorSystem(store, runners=[agent]) as system:
            assert [r.node_id for r in await store.history("crashed")] == ["turn:0", "turn:0/tool:refund"]
            crashed = await system.resume("crashed", timeout=10)
            crashed_rows = await store.history("crashed")
    assert crashed.status == "completed" and crashed.output == calm.output
    assert _tool_answers(crashed_rows) == expected
