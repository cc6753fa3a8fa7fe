"""What OpenAIChat makes of replies as real servers send them, on a loopback server of the tests' own.

Why a reply ended (``refusal``, ``content_filter``, ``length``): a model error naming it, the run
fails and can be resumed, the reason is logged. Content as a list of parts (Mistral's reasoning
models): the text parts joined, the others left out and logged. Tool-call arguments that cannot be
used (not JSON, NaN or infinity, not an object, too deep): a tool error the model reads, the tool
not run, the run going on.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from _chat_server import ChatServer, ok, serve
from _model_runs import running
from conftest import Backend

from actors import Agent, tool
from actors.models import Message, ModelError, ModelReply, OpenAIChat

pytestmark = pytest.mark.anyio
LIMIT = 20.0
HI = [Message("user", "hi")]


@pytest.fixture
def server() -> Iterator[ChatServer]:
    yield from serve()


def client(server: ChatServer, **kw: Any) -> OpenAIChat:
    return OpenAIChat("test-model", base_url=server.base_url, backoff=0.01, **kw)


def call(name: str, arguments: str, call_id: str) -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


# -- why a reply ended ------------------------------------------------------------------------------


async def test_refusal_content_filter_and_length_are_model_errors_naming_the_reason(
    server: ChatServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="tether")
    server.script = [
        ok({"role": "assistant", "content": None, "refusal": "I can't help with that."}),
        ok({"role": "assistant", "content": [{"type": "refusal", "refusal": "Not this."}]}),
        ok({"role": "assistant", "content": ""}, "content_filter"),
        ok({"role": "assistant", "content": "The refund policy says that cus"}, "length"),
        ok({"role": "assistant", "tool_calls": [call("refund", '{"order_id": "10', "c1")]}, "length"),
    ]
    errors: list[ModelError] = []
    async with client(server) as model:
        for _ in range(5):
            with anyio.fail_after(LIMIT), pytest.raises(ModelError) as info:
                await model.complete(HI)
            errors.append(info.value)
    assert [e.reason for e in errors] == ["refusal", "refusal", "content_filter", "length", "length"]
    assert str(errors[0]) == "the model refused to answer: I can't help with that."
    assert str(errors[1]) == "the model refused to answer: Not this."
    assert "content filter" in str(errors[2]) and "'content_filter'" in str(errors[2])
    assert "cut off at the token limit (finish_reason 'length')" in str(errors[3])
    assert "accept_truncated=True" in str(errors[4])
    logged = [r for r in caplog.records if r.name == "tether" and r.levelno == logging.WARNING]
    assert len(logged) == 5
    for error, record in zip(errors, logged, strict=True):
        assert f"reason={error.reason!r}" in record.getMessage(), record.getMessage()


async def test_a_cut_off_answer_is_taken_when_accepted(server: ChatServer) -> None:
    server.script = [
        ok({"role": "assistant", "content": "The refund policy says that cus"}, "length"),
        ok({"role": "assistant", "tool_calls": [call("refund", '{"order_id": "10', "c1")]}, "length"),
    ]
    async with client(server, accept_truncated=True) as model:
        with anyio.fail_after(LIMIT):
            assert await model.complete(HI) == ModelReply("The refund policy says that cus")
            (cut,) = (await model.complete(HI)).tool_calls
    assert cut.arguments == {} and cut.arguments_text == '{"order_id": "10'
    assert cut.arguments_error is not None and "not valid JSON" in cut.arguments_error


async def test_a_refused_run_fails_naming_the_reason_and_resumes(
    server: ChatServer, store_backend: Backend
) -> None:
    server.script = [
        ok({"role": "assistant", "content": None, "refusal": "I can't help with that."}),
        ok({"role": "assistant", "content": "Here is the summary."}),
    ]
    async with client(server) as model:
        agent = Agent("summarizer", model)
        with anyio.fail_after(LIMIT):
            async with running(store_backend, agent) as (_, system):
                failed = await (await system.spawn(agent, "summarize", execution_id="r1")).result(timeout=10)
                assert failed.status == "failed"
                assert failed.error == "ModelError: the model refused to answer: I can't help with that."
                (end,) = [r for r in await system.history("r1") if r.step_type == "run_end"]
                assert end.state_snapshot["run_error"] == failed.error
                again = await system.resume("r1", timeout=10)
    assert again.status == "completed" and again.output == "Here is the summary."


# -- content as a list of parts ---------------------------------------------------------------------


async def test_content_parts_are_joined_and_other_parts_left_out(
    server: ChatServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="tether")
    parts = [
        {"type": "thinking", "thinking": [{"type": "text", "text": "The user greets me."}]},
        {"type": "text", "text": "Hello"},
        {"type": "text", "text": ", world"},
        {"type": "image_url", "image_url": {"url": "data:,"}},
    ]
    server.script = [ok({"role": "assistant", "content": parts})]
    async with client(server) as model:
        with anyio.fail_after(LIMIT):
            assert await model.complete(HI) == ModelReply("Hello, world")
    (note,) = [r.getMessage() for r in caplog.records if "content parts left out" in r.getMessage()]
    assert "types='thinking, image_url'" in note


# -- tool-call arguments that cannot be used --------------------------------------------------------

BAD_ARGUMENTS = {
    "c_text": ("{not json", "not valid JSON"),
    "c_nan": ('{"order_id": "1", "amount": NaN}', "NaN or infinity"),
    "c_inf": ('{"order_id": "1", "amount": -Infinity}', "NaN or infinity"),
    "c_big": ('{"order_id": "1", "amount": 1e400}', "NaN or infinity"),
    "c_list": ('["1", 5]', "a JSON list, not an object"),
    "c_deep": ('{"a": ' + "[" * 20000 + "]" * 20000 + "}", "nested too deeply"),
    "c_wide": ('{"order_id": "1", "amount": 99999999999999999999999}', "does not fit in 64 bits"),
}


async def test_unusable_arguments_are_a_tool_error_the_model_reads(
    server: ChatServer, store_backend: Backend, tmp_path: Path
) -> None:
    ran: list[tuple[str, float]] = []

    @tool
    def refund(order_id: str, amount: float) -> str:
        """Refund an order."""
        ran.append((order_id, amount))
        return f"refunded {order_id}"

    calls = [call("refund", text, call_id) for call_id, (text, _) in BAD_ARGUMENTS.items()]
    calls.append(call("refund", '{"order_id": "ok", "amount": 2.5}', "c_good"))
    server.script = [
        ok({"role": "assistant", "content": None, "tool_calls": calls}, "tool_calls"),
        ok({"role": "assistant", "content": "One refund went through."}),
    ]
    async with client(server) as model:
        agent = Agent("refunder", model, tools=[refund])
        with anyio.fail_after(LIMIT):
            async with running(store_backend, agent) as (_, system):
                result = await (await system.spawn(agent, "refund", execution_id="r1")).result(timeout=10)
    assert result.status == "completed", result
    assert result.output == "One refund went through."
    assert ran == [("ok", 2.5)]  # only the good call ran
    second = server.requests[1].body["messages"]
    answers = {m["tool_call_id"]: m["content"] for m in second if m["role"] == "tool"}
    assert answers.pop("c_good") == "refunded ok"
    assert list(answers) == list(BAD_ARGUMENTS)
    for call_id, (_, why) in BAD_ARGUMENTS.items():
        assert answers[call_id].startswith("Tool 'refund' got invalid arguments: "), answers[call_id]
        assert why in answers[call_id], (call_id, answers[call_id])
    # The calls go back as the model wrote them.
    (assistant,) = [m for m in second if m["role"] == "assistant"]
    assert [c["function"]["arguments"] for c in assistant["tool_calls"]] == [
        c["function"]["arguments"] for c in calls
    ]
