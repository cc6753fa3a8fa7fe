"""Tool-call ids a model repeats: made unique when a reply is taken in; re-entry goes by position.

Some servers (Kimi, MiMo, some Gemini adapters) send ``call_0`` for two calls of one reply. The run
must still run each tool once with its own arguments, also when the second call pauses and the run
is resumed in another process (a real child process starts it), and the next request must carry one
answer per call. Rows written before ids were made unique (two calls sharing an id) re-enter at the
right call too: the row's position in its reply decides, not the id.
"""

from __future__ import annotations

import json
import os
import sys
import textwrap
from pathlib import Path
from typing import Any

import anyio
import msgspec
import pytest
from _chat_server import ok, serve
from _model_runs import running
from conftest import Backend

from actors import Agent, Resume, interrupt, tool
from actors.lowlevel import take_in
from actors.models import FunctionModel, Message, ModelError, ModelReply, OpenAIChat, ToolCall
from stores import HITL_PAUSE, Checkpoint, new_id

LIMIT = 20.0
CHILD_LIMIT = 60.0
TESTS_DIR = Path(__file__).resolve().parents[2]

CHILD = textwrap.dedent(
    """
    import sys
    sys.path[:0] = [{tests!r}, {here!r}]
    import anyio
    from conftest import Backend
    from test_repeated_ids import start_in_child
    anyio.run(start_in_child, Backend(*sys.argv[1:3], sys.argv[3] if sys.argv[3] != "-" else ""), sys.argv[4])
    """
)


# -- take_in ----------------------------------------------------------------------------------------


def test_repeats_within_a_reply_get_fresh_ids_and_first_uses_keep_theirs() -> None:
    reply = ModelReply(
        tool_calls=[
            ToolCall("refund", {"order": "A"}, "call_0"),
            ToolCall("notify", {"who": "zoe"}, "call_0"),
            ToolCall("notify", {"who": "max"}, "call_0"),
            ToolCall("log", {}, ""),
        ]
    )
    taken = take_in(reply, [])
    ids = [call.id for call in taken.tool_calls]
    assert ids[:3] == ["call_0", "call_0_2", "call_0_3"]
    assert ids[3].startswith("call_") and len(set(ids)) == 4
    # Everything but the ids is kept, call by call.
    assert [(c.name, c.arguments) for c in taken.tool_calls] == [
        (c.name, c.arguments) for c in reply.tool_calls
    ]


def test_ids_of_earlier_turns_are_not_reused() -> None:
    earlier = [
        Message("user", "hi"),
        Message("assistant", "", [ToolCall("t", {}, "call_0"), ToolCall("t", {}, "call_0_2")]),
        Message("tool", "ok", tool_call_id="call_0", name="t"),
    ]
    taken = take_in(ModelReply(tool_calls=[ToolCall("t", {}, "call_0")]), earlier)
    assert [c.id for c in taken.tool_calls] == ["call_0_3"]
    unique = ModelReply(tool_calls=[ToolCall("t", {}, "call_9")])
    assert take_in(unique, earlier) is unique


def test_a_repeated_mistral_shaped_id_gets_an_id_of_that_shape() -> None:
    taken = take_in(ModelReply(tool_calls=[ToolCall("t", {}, "aB3dE6gH9")] * 2), [])
    first, second = (c.id for c in taken.tool_calls)
    assert first == "aB3dE6gH9" and second != first
    assert len(second) == 9 and second.isalnum()


def test_a_reply_that_is_not_a_model_reply_is_a_model_error() -> None:
    with pytest.raises(ModelError, match="returned a dict, not a ModelReply"):
        take_in({"tool_calls": []}, [], model="m")


# -- a paused run with repeated ids, resumed in another process --------------------------------------


def record(marks: Path, name: str, **fields: Any) -> None:
    with (marks / "calls.jsonl").open("a") as out:
        out.write(json.dumps({"tool": name, "pid": os.getpid(), **fields}) + "\n")


def repeated_id_agent(marks: Path, seen: list[list[Message]] | None = None) -> Agent:
    """One reply, two calls, one id: ``refund`` runs, ``notify`` pauses for an approval first."""

    @tool
    def refund(order: str, amount: int) -> str:
        """Refund an order."""
        record(marks, "refund", order=order, amount=amount)
        return f"refunded {order}"

    @tool
    def notify(customer: str) -> str:
        """Tell a customer (needs approval)."""
        decision = interrupt("approve_notify", {"customer": customer})
        record(marks, "notify", customer=customer, approved=decision.approved)
        return f"notified {customer}"

    def model(messages: list[Message]) -> str | ModelReply:
        if seen is not None:
            seen.append(messages)
        if messages[-1].role == "tool":
            return "done: " + " | ".join(m.content for m in messages if m.role == "tool")
        return ModelReply(
            tool_calls=[
                ToolCall("refund", {"order": "A-1", "amount": 5}, "call_0"),
                ToolCall("notify", {"customer": "zoe"}, "call_0"),
            ]
        )

    return Agent("repeater", FunctionModel(model), tools=[refund, notify])


async def start_in_child(backend: Backend, execution_id: str) -> None:
    """The child's part: start the run, which pauses at ``notify``; the process then exits."""
    agent = repeated_id_agent(Path(os.environ["TETHER_TEST_MARKS"]))
    async with running(backend, agent) as (_, system):
        ref = await system.spawn(agent, "refund and tell", execution_id=execution_id)
        result = await ref.result(timeout=30)
    print(result.status)


def calls_made(marks: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (marks / "calls.jsonl").read_text().splitlines()]


def check_final_request(seen: list[list[Message]]) -> None:
    """The model's last turn reads two calls with distinct ids and exactly one answer to each."""
    (messages,) = seen
    (assistant,) = [m for m in messages if m.role == "assistant"]
    ids = [c.id for c in assistant.tool_calls]
    assert ids == ["call_0", "call_0_2"]
    answers = [(m.tool_call_id, m.name, m.content) for m in messages if m.role == "tool"]
    assert answers == [("call_0", "refund", "refunded A-1"), ("call_0_2", "notify", "notified zoe")]


@pytest.mark.anyio
async def test_repeated_ids_pause_in_one_process_resume_in_another(
    store_backend: Backend, tmp_path: Path
) -> None:
    marks = tmp_path / "marks"
    marks.mkdir()
    code = CHILD.format(tests=str(TESTS_DIR), here=str(Path(__file__).parent))
    with anyio.fail_after(CHILD_LIMIT):
        child = await anyio.run_process(
            [sys.executable, "-c", code, *store_backend.child_args(), "dup-ids"],
            env={**os.environ, "TETHER_TEST_MARKS": str(marks)},
            check=False,
        )
    assert child.returncode == 0 and child.stdout.decode().split() == ["paused"], child.stderr.decode()
    child_calls = calls_made(marks)
    assert [(c["tool"], c["order"], c["amount"]) for c in child_calls] == [("refund", "A-1", 5)]

    seen: list[list[Message]] = []
    agent = repeated_id_agent(marks, seen)
    with anyio.fail_after(LIMIT):
        async with running(store_backend, agent) as (_, system):
            result = await system.resume("dup-ids", Resume(approved=True), timeout=10)
            rows = await system.history("dup-ids")
    assert result.status == "completed", result
    assert result.output == "done: refunded A-1 | notified zoe"
    # Each tool ran once, with its own arguments: refund in the child, notify (approved) here.
    assert calls_made(marks) == [
        *child_calls,
        {"tool": "notify", "pid": os.getpid(), "customer": "zoe", "approved": True},
    ]
    assert child_calls[0]["pid"] != os.getpid()
    check_final_request(seen)
    tool_rows = [r for r in rows if r.node_id.startswith("turn:0/tool:")]
    assert [(r.node_id, r.step_type, r.state_snapshot.get("tool_call_id")) for r in tool_rows] == [
        ("turn:0/tool:refund", "tool_call", "call_0"),
        ("turn:0/tool:notify", "tool_call", "call_0_2"),
        ("turn:0/tool:notify", "hitl_pause", "call_0_2"),
        ("turn:0/tool:notify", "resume", None),
    ]


# -- rows written before ids were made unique -------------------------------------------------------


def _with_shared_id(row: Checkpoint, execution_id: str) -> Checkpoint:
    """``row`` as an older version wrote it: every call of the run named ``call_0``, its own ids new."""
    text = json.dumps(msgspec.to_builtins(row.state_snapshot)).replace('"call_0_2"', '"call_0"')
    return msgspec.structs.replace(
        row,
        execution_id=execution_id,
        checkpoint_id=new_id(),
        parent_checkpoint_id=None,
        state_snapshot=json.loads(text),
    )


@pytest.mark.anyio
async def test_old_rows_with_a_shared_id_re_enter_the_call_at_their_position(
    store_backend: Backend, tmp_path: Path
) -> None:
    marks = tmp_path / "marks"
    marks.mkdir()
    seen: list[list[Message]] = []
    agent = repeated_id_agent(marks, seen)
    with anyio.fail_after(LIMIT):
        async with running(store_backend, agent) as (store, system):
            first = await (await system.spawn(agent, "refund and tell", execution_id="new")).result(
                timeout=10
            )
            assert first.status == "paused"
            (pending,) = await store.pending("new")
            # The same history, as rows that share one id between the two calls.
            for row in await system.history("new"):
                old = _with_shared_id(row, "old")
                if row.step_type == HITL_PAUSE:
                    await store.append_pause(old, msgspec.structs.replace(pending, execution_id="old"))
                else:
                    await store.append(old)
            (old_pause,) = [r for r in await system.history("old") if r.step_type == HITL_PAUSE]
            assert old_pause.state_snapshot["tool_call_id"] == "call_0"
            del seen[:]
            result = await system.resume("old", Resume(approved=True), timeout=10)
    assert result.status == "completed", result
    assert result.output == "done: refunded A-1 | notified zoe"
    # refund ran once (on the first pass) and was not re-entered with notify's arguments.
    assert [(c["tool"], c.get("order"), c.get("customer")) for c in calls_made(marks)] == [
        ("refund", "A-1", None),
        ("notify", None, "zoe"),
    ]
    (messages,) = seen
    answers = [(m.name, m.content) for m in messages if m.role == "tool"]
    assert answers == [("refund", "refunded A-1"), ("notify", "notified zoe")]


# -- the same reply from a server, through OpenAIChat ---------------------------------------------


@pytest.mark.anyio
async def test_a_server_repeating_an_id_gets_one_answer_per_call(
    store_backend: Backend, tmp_path: Path
) -> None:
    marks = tmp_path / "marks"
    marks.mkdir()
    server_calls = [
        {
            "id": "call_0",
            "type": "function",
            "function": {"name": "refund", "arguments": '{"order":"A-1","amount":5}'},
        },
        {
            "id": "call_0",
            "type": "function",
            "function": {"name": "notify", "arguments": '{"customer":"zoe"}'},
        },
    ]
    for server in serve():
        server.script = [
            ok({"role": "assistant", "content": None, "tool_calls": server_calls}, "tool_calls"),
            ok({"role": "assistant", "content": "Refunded and told."}),
        ]
        tools = repeated_id_agent(marks).tools
        async with OpenAIChat("kimi-like", base_url=server.base_url, backoff=0.01) as model:
            agent = Agent("repeater", model, tools=tools)
            for leg in ("pause", "resume"):  # two systems on two store instances: two activations
                with anyio.fail_after(LIMIT):
                    async with running(store_backend, agent) as (_, system):
                        if leg == "pause":
                            ref = await system.spawn(agent, "refund and tell", execution_id="srv")
                            assert (await ref.result(timeout=10)).status == "paused"
                        else:
                            result = await system.resume("srv", Resume(approved=True), timeout=10)
        bodies = server.bodies()
    assert result.status == "completed" and result.output == "Refunded and told."
    assert [(c["tool"], c.get("order"), c.get("customer")) for c in calls_made(marks)] == [
        ("refund", "A-1", None),
        ("notify", None, "zoe"),
    ]
    messages = bodies[1]["messages"]
    (assistant,) = [m for m in messages if m["role"] == "assistant"]
    assert [c["id"] for c in assistant["tool_calls"]] == ["call_0", "call_0_2"]
    assert [(m["tool_call_id"], m["content"]) for m in messages if m["role"] == "tool"] == [
        ("call_0", "refunded A-1"),
        ("call_0_2", "notified zoe"),
    ]
