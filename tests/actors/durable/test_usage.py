"""Token usage of runs: read from every reply of a loopback chat-completions server (streamed replies
too), carried as a running total on the run's rows, summed by ``RunResult.usage`` and
``RunSummary.usage`` over every activation of the run, a re-issued call counted as billed.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from conftest import Backend

from actors import ActorSystem, Agent, Resume, interrupt, tool
from actors.models import FunctionModel, Message, ModelReply, OpenAIChat, ToolCall, Usage

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "models"))
from _chat_server import ChatServer, Reply, completion, serve

pytestmark = pytest.mark.anyio

LIMIT = 60.0


@pytest.fixture
def server() -> Iterator[ChatServer]:
    yield from serve()


def tokens(prompt: int, generated: int) -> dict[str, int]:
    return {"prompt_tokens": prompt, "completion_tokens": generated, "total_tokens": prompt + generated}


def chunk(delta: dict[str, Any], finish_reason: str | None = None) -> dict[str, Any]:
    return {
        "id": "c",
        "object": "chat.completion.chunk",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason}],
    }


def reply(message: dict[str, Any], finish: str, usage: dict[str, int], *, stream: bool) -> Reply:
    """One answer with its usage: a completion, or the same answer streamed (the usage in the last
    chunk, as ``stream_options.include_usage`` asks)."""
    if not stream:
        return Reply(body={**completion(message, finish), "usage": usage})
    deltas: list[Any] = []
    if message.get("content"):
        head, space, rest = message["content"].partition(" ")
        deltas = [chunk({"content": head + space}), chunk({"content": rest})]
    for index, call in enumerate(message.get("tool_calls") or []):
        deltas.append(chunk({"tool_calls": [{"index": index, **call}]}))
    return Reply(chunks=[*deltas, chunk({}, finish), {"id": "c", "choices": [], "usage": usage}, "[DONE]"])


def call(name: str, arguments: str = "{}") -> dict[str, Any]:
    return {"id": f"call_{name}", "type": "function", "function": {"name": name, "arguments": arguments}}


@tool
def lookup(order: str) -> str:
    """Look an order up."""
    return f"order {order}: 30 EUR"


@pytest.mark.parametrize("stream", [False, True], ids=["completion", "streamed"])
async def test_result_and_status_sum_the_usage_of_every_reply(
    store_backend: Backend, server: ChatServer, stream: bool
) -> None:
    server.script = [
        reply(
            {"role": "assistant", "tool_calls": [call("lookup", '{"order": "A-1"}')]},
            "tool_calls",
            tokens(40, 9),
            stream=stream,
        ),
        reply(
            {"role": "assistant", "tool_calls": [call("lookup", '{"order": "B-2"}')]},
            "tool_calls",
            tokens(61, 8),
            stream=stream,
        ),
        reply({"role": "assistant", "content": "Both cost 30 EUR."}, "stop", tokens(83, 6), stream=stream),
    ]
    agent = Agent("usage", OpenAIChat("m", base_url=server.base_url, stream=stream), tools=[lookup])
    store = store_backend.open()
    async with store, ActorSystem(store, runners=[agent]) as system:
        with anyio.fail_after(LIMIT):
            result = await (await system.spawn(agent, "What do A-1 and B-2 cost?", execution_id="u")).result()
        summary = await system.status("u")
        [listed] = await system.runs(runner="usage")
        rows = await system.history("u")
    expected = Usage(input_tokens=40 + 61 + 83, output_tokens=9 + 8 + 6)
    assert result.status == "completed" and result.output == "Both cost 30 EUR."
    assert result.usage == expected and summary.usage == expected and listed.usage == expected
    assert all(
        body.get("stream_options") == ({"include_usage": True} if stream else None)
        for body in server.bodies()
    )
    # Each row carries the total of the replies before it: a call's usage lands on the row that
    # follows its reply (the row of its first tool, or the next turn's, or the run_end).
    totals = [(row.node_id, row.state_snapshot.get("usage")) for row in rows]
    assert totals == [
        ("turn:0", None),
        ("turn:0/tool:lookup", {"input_tokens": 40, "output_tokens": 9}),
        ("turn:1", {"input_tokens": 40, "output_tokens": 9}),
        ("turn:1/tool:lookup", {"input_tokens": 101, "output_tokens": 17}),
        ("turn:2", {"input_tokens": 101, "output_tokens": 17}),
        ("run_end", {"input_tokens": 184, "output_tokens": 23}),
    ]


async def test_usage_goes_on_across_a_pause_and_a_reissued_call(store_backend: Backend) -> None:
    """A FunctionModel may report usage too. The run pauses (its total so far in its status), is
    resumed, fails on a reply it cannot store (billed all the same), and is resumed again: the call
    issued again counts a second time, as it was billed twice."""

    @tool
    def refund(amount: int) -> str:
        """Refund, after approval."""
        return f"approved={interrupt('approval', {'amount': amount}).approved}"

    replies = iter(
        [
            ModelReply(
                tool_calls=[ToolCall("refund", {"amount": 5})], usage=Usage(input_tokens=10, output_tokens=2)
            ),
            ModelReply("bad \x00 text", usage=Usage(input_tokens=20, output_tokens=3)),
            ModelReply("Refunded.", usage=Usage(input_tokens=20, output_tokens=4)),
        ]
    )

    def model(messages: list[Message]) -> ModelReply:
        return next(replies)

    agent = Agent("billed", FunctionModel(model), tools=[refund])
    store = store_backend.open()
    async with store, ActorSystem(store, runners=[agent]) as system:
        with anyio.fail_after(LIMIT):
            paused = await (await system.spawn(agent, "Refund 5", execution_id="b")).result()
            assert paused.status == "paused" and paused.usage == Usage(input_tokens=10, output_tokens=2)
            assert (await system.status("b")).usage == paused.usage
            failed = await system.resume("b", Resume(approved=True))
            assert failed.status == "failed" and "cannot store" in (failed.error or "")
            assert failed.usage == Usage(input_tokens=30, output_tokens=5)
            assert (await system.status("b")).usage == failed.usage
            done = await system.resume("b")
        summary = await system.status("b")
    assert done.status == "completed" and done.output == "Refunded."
    assert done.usage == summary.usage == Usage(input_tokens=50, output_tokens=9)


async def test_a_model_that_reports_no_usage_leaves_the_rows_as_they_were(store_backend: Backend) -> None:
    agent = Agent("quiet", FunctionModel(lambda messages: "hello"))
    store = store_backend.open()
    async with store, ActorSystem(store, runners=[agent]) as system:
        result = await (await system.spawn(agent, "hi", execution_id="q")).result()
        rows = await system.history("q")
        summary = await system.status("q")
    assert result.usage == summary.usage == Usage()
    assert all("usage" not in row.state_snapshot for row in rows)
