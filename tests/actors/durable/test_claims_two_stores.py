"""Claims in two stores of one process: each store's pause is its own.

Two stores in one process (two SQLite files, or two schemas of one PostgreSQL database) each hold a
paused run under the same ``execution_id``. Resuming both at once must see both win: they are two
runs that happen to share a name, and a claim in one database says nothing about the other. The
in-process single flight that spares racing claimers of one pause their round trip must therefore
be keyed by the database as well as the run.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import AsyncExitStack
from pathlib import Path

import anyio
import pytest
from conftest import Backend, drop_pg_schema

from actors import ActorSystem, Agent, Resume, RunResult, interrupt, tool
from actors.models import FunctionModel, Message, ModelReply, ToolCall
from stores import Store

pytestmark = pytest.mark.anyio

RUN = "same-id"


@pytest.fixture
def second_target(store_backend: Backend, tmp_path: Path) -> Iterator[Backend]:
    """A second database of the same backend: another file, or another schema."""
    if store_backend.name == "sqlite":
        yield Backend("sqlite", str(tmp_path / "second.db"))
        return
    schema = f"t_{uuid.uuid4().hex}"
    try:
        yield Backend("postgres", store_backend.target, schema)
    finally:
        drop_pg_schema(schema)


def _agent(ran: list[str]) -> Agent:
    @tool
    def gate(where: str) -> str:
        """Pauses for a decision, then records where it ran."""
        decision = interrupt("approve", {"where": where})
        ran.append(where)
        return f"{where}: approved={decision.approved}"

    def model(messages: list[Message]) -> ModelReply | str:
        if messages[-1].role == "tool":
            return str(messages[-1].content)
        return ModelReply(tool_calls=[ToolCall("gate", {"where": str(messages[-1].content)})])

    return Agent("two-stores", FunctionModel(model), tools=[gate])


async def test_racing_resumes_of_one_id_in_two_stores_both_win(
    store_backend: Backend, second_target: Backend
) -> None:
    ran: list[str] = []
    agent = _agent(ran)
    stores: list[Store] = [store_backend.open(), second_target.open()]
    results: dict[int, RunResult] = {}
    with anyio.fail_after(60):
        async with AsyncExitStack() as stack:
            systems = []
            for n, store in enumerate(stores):
                await stack.enter_async_context(store)
                system = await stack.enter_async_context(ActorSystem(store, runners=[agent]))
                systems.append(system)
                paused = await (await system.spawn(agent, f"db{n}", execution_id=RUN)).result(timeout=20)
                assert paused.status == "paused"

            async def resume(n: int) -> None:
                results[n] = await systems[n].resume(RUN, Resume(approved=True), timeout=20)

            async with anyio.create_task_group() as group:
                for n in range(2):
                    group.start_soon(resume, n)
    assert {n: (r.status, r.output) for n, r in results.items()} == {
        0: ("completed", "db0: approved=True"),
        1: ("completed", "db1: approved=True"),
    }
    assert sorted(ran) == ["db0", "db1"]
