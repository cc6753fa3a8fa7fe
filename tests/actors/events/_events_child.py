"""A child process for the events tests: it drives one leg of a run and prints the leg's events.

Usage: ``python _events_child.py MODE BACKEND TARGET SCHEMA EXECUTION_ID [BASE_URL]``; every event is printed as
one NDJSON line (``actors.events.encode_event``) the moment it is read, then ``END``.

MODE ``leg1``: spawn the approval run and print the spawn ref's events (they end at the pause).
``leg2``: resume the pause from here and print the send ref's events (they end at the run's end).
``follow``: the events of ``system.ref(id)`` from the run's next row (a run this process does not
drive), after ``READY`` once the stream has fixed where it starts. ``stream``: spawn the streaming run, printing text deltas too; its
model streams three chunks, then hangs (the test kills this process). ``recover``: crash recovery
of the streaming run from here, with text deltas; the model streams its whole answer.
``openai`` / ``openai-recover``: the same two legs with ``OpenAIChat(stream=True)`` against the
server at BASE_URL (the test's server decides where the stream stops), and a ``lookup`` tool.
"""

from __future__ import annotations

import sys

import anyio

from actors import ActorSystem, Agent, Recover, Resume, RunRef, interrupt, tool
from actors.events import encode_event
from actors.models import FunctionModel, Message, ModelReply, OpenAIChat, ToolCall
from stores import PostgresStore, SQLiteStore, Store

CHUNKS = ["The ", "refund ", "is ", "on ", "its ", "way."]


def approval_agent() -> Agent:
    """Turn 0: two tools (one raises); turn 1: a refund that pauses; turn 2: the answer."""

    @tool
    async def lookup(order: str) -> str:
        """Look an order up."""
        return f"order {order}: 30 EUR"

    @tool
    def flaky() -> str:
        """A tool that raises."""
        raise RuntimeError("the inventory service is down")

    @tool
    def refund(amount: int) -> str:
        """Refund, after a manager's approval."""
        return f"approved={interrupt('manager_approval', {'amount': amount}).approved}"

    async def model(messages: list[Message]) -> str | ModelReply:
        await anyio.sleep(0.05)  # a model call takes time: the events come while the run goes on
        turns = sum(1 for m in messages if m.role == "assistant")
        if turns == 0:
            return ModelReply(tool_calls=[ToolCall("lookup", {"order": "A-1"}), ToolCall("flaky", {})])
        if turns == 1:
            return ModelReply(tool_calls=[ToolCall("refund", {"amount": 30})])
        return f"Done: {messages[-1].content}"

    return Agent("approver", FunctionModel(model), tools=[lookup, flaky, refund])


def streaming_agent(hang: bool) -> Agent:
    """One model call that streams its answer; with ``hang`` it stops after three chunks."""

    async def model(messages: list[Message]):  # type: ignore[no-untyped-def]
        for index, chunk in enumerate(CHUNKS):
            if hang and index == 3:
                await anyio.sleep(120)  # killed here, mid-stream
            await anyio.sleep(0.02)
            yield chunk

    return Agent("streamer", FunctionModel(model))


def openai_agent(base_url: str) -> Agent:
    @tool
    def lookup(order: str) -> str:
        """Look an order up."""
        return f"order {order}: 30 EUR"

    model = OpenAIChat("test-model", base_url=base_url, api_key="test-key", stream=True, max_retries=0)
    return Agent("streamer", model, tools=[lookup])


async def print_events(ref: RunRef, *, tokens: bool = False, ready: bool = False) -> None:
    async with ref.events(tokens=tokens) as events:
        if ready:
            print("READY", flush=True)  # the stream has fixed its start: the next leg may begin
        async for event in events:
            print(encode_event(event).decode(), flush=True)
    print("END", flush=True)


async def main(
    mode: str, backend: str, target: str, schema: str, execution_id: str, base_url: str = ""
) -> None:
    store: Store = SQLiteStore(target) if backend == "sqlite" else PostgresStore(target, schema=schema)
    if mode.startswith("openai"):
        runner = openai_agent(base_url)
    elif mode in ("stream", "recover"):
        runner = streaming_agent(hang=mode == "stream")
    else:
        runner = approval_agent()
    with anyio.fail_after(90):
        async with store, ActorSystem(store, runners=[runner]) as system:
            if mode == "leg1":
                await print_events(await system.spawn(runner, "refund order A-1", execution_id=execution_id))
            elif mode == "leg2":
                await print_events(await system.send(execution_id, Resume(approved=True)))
            elif mode == "follow":
                await print_events(system.ref(execution_id), ready=True)
            elif mode in ("stream", "openai"):
                ref = await system.spawn(runner, "where is my refund?", execution_id=execution_id)
                await print_events(ref, tokens=True)
            elif mode in ("recover", "openai-recover"):
                await print_events(await system.send(execution_id, Recover()), tokens=True)


if __name__ == "__main__":
    anyio.run(main, *sys.argv[1:7])
