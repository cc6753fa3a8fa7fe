"""The peers of ``benchmarks.step_path``: FastAIAgent, LangGraph and DBOS doing the same small refund.

Imported only with ``--peers``; needs the ``bench`` extra (``pip install -e '.[bench]'``). Each peer
uses its documented durable setup with the same offline model decision and the same tool body.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Annotated, Any, TypedDict

os.environ.setdefault("FASTAIAGENT_TRACE_ENABLED", "false")

import asyncpg

from benchmarks._common import PG_DSN
from benchmarks.step_path import ARGS, EXPECTED_ROWS, PROMPT, Contender, answer, charge

__all__ = ["contenders"]


def contenders(backend: str, workdir: Path, expected: str) -> list[Contender]:
    """FastAIAgent untraced, LangGraph and DBOS on ``backend``; ``expected`` is the final answer."""
    return [
        FastAIAgentPeer(backend, workdir, expected),
        LangGraphPeer(backend, workdir, expected),
        DBOSPeer(backend, workdir, expected),
    ]


def _with_search_path(dsn: str, schema: str) -> str:
    return f"{dsn}{'&' if '?' in dsn else '?'}options=-csearch_path%3D{schema}"


async def _drop(sql: str) -> None:
    conn = await asyncpg.connect(PG_DSN)
    try:
        await conn.execute(sql)
    finally:
        await conn.close()


# -------------------------------------------------------------------------------- FastAIAgent


class FastAIAgentPeer(Contender):
    """FastAIAgent 1.94, tracing off; ``SQLiteCheckpointer`` / ``PostgresCheckpointer``."""

    name = "FastAIAgent untraced"
    SCHEMA = "bench_step_fa"

    def __init__(self, backend: str, workdir: Path, expected: str) -> None:
        self.backend = backend
        self._workdir = workdir
        self._expected = expected
        self._cp: Any = None
        self._agent: Any = None

    async def open(self, tag: str) -> None:
        from fastaiagent import Agent, tool
        from fastaiagent.checkpointers import PostgresCheckpointer, SQLiteCheckpointer
        from fastaiagent.testing import FunctionModel

        @tool
        def refund(order: str, amount: int) -> dict[str, Any]:
            """Refund amount cents on order."""
            return charge(order, amount)

        def responder(messages: list[Any]) -> Any:
            last = messages[-1]
            if last.role == "tool":
                return answer(last.content)
            return "", [{"name": "refund", "arguments": dict(ARGS)}]

        if self.backend == "sqlite":
            self._cp = SQLiteCheckpointer(str(self._workdir / f"{tag}-fa.db"))
        else:
            await _drop(f"DROP SCHEMA IF EXISTS {self.SCHEMA} CASCADE")
            self._cp = PostgresCheckpointer(PG_DSN, schema=self.SCHEMA)
        self._cp.setup()
        self._agent = Agent(
            name="refund-bot", llm=FunctionModel(responder), tools=[refund], checkpointer=self._cp
        )

    async def one(self, run_id: str) -> None:
        result = await self._agent.arun(PROMPT, execution_id=run_id)
        if result.status != "completed" or result.output != self._expected:
            raise AssertionError(f"FastAIAgent run {run_id}: {result.status} {result.output!r}")

    async def verify(self, run_ids: list[str]) -> None:
        for run_id in run_ids:
            rows = sorted(self._cp.list(run_id), key=lambda cp: (cp.node_index, cp.created_at))
            if [cp.node_id for cp in rows] != EXPECTED_ROWS:
                raise AssertionError(f"FastAIAgent run {run_id} wrote {[cp.node_id for cp in rows]}")

    async def close(self) -> None:
        if self._cp is not None:
            self._cp.close()
            self._cp = None


# -------------------------------------------------------------------------------- LangGraph


class LangGraphPeer(Contender):
    """LangGraph 1.2: model node + ``ToolNode``; ``AsyncSqliteSaver`` / ``AsyncPostgresSaver`` (pool)."""

    name = "LangGraph"
    SCHEMA = "bench_step_lg"

    def __init__(self, backend: str, workdir: Path, expected: str) -> None:
        self.backend = backend
        self._workdir = workdir
        self._expected = expected
        self._app: Any = None
        self._closers: list[Any] = []

    def _graph(self) -> Any:
        from langchain_core.messages import AIMessage, AnyMessage, ToolMessage
        from langchain_core.tools import tool
        from langgraph.graph import START, StateGraph
        from langgraph.graph.message import add_messages
        from langgraph.prebuilt import ToolNode, tools_condition

        @tool
        async def refund(order: str, amount: int) -> dict[str, Any]:
            """Refund amount cents on order."""
            return charge(order, amount)

        # The functional form: this module's postponed annotations would hide AnyMessage from LangGraph.
        state_type = TypedDict("State", {"messages": Annotated[list[AnyMessage], add_messages]})  # type: ignore[misc]  # noqa: UP013

        async def model(state: dict[str, Any]) -> dict[str, Any]:  # async: no executor hop
            last = state["messages"][-1]
            if isinstance(last, ToolMessage):
                return {"messages": [AIMessage(content=answer(str(last.content)))]}
            call = {"name": "refund", "args": dict(ARGS), "id": "call_0"}
            return {"messages": [AIMessage(content="", tool_calls=[call])]}

        graph = StateGraph(state_type)
        graph.add_node("model", model)
        graph.add_node("tools", ToolNode([refund]))
        graph.add_edge(START, "model")
        graph.add_conditional_edges("model", tools_condition)
        graph.add_edge("tools", "model")
        return graph

    async def open(self, tag: str) -> None:
        if self.backend == "sqlite":
            from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

            context = AsyncSqliteSaver.from_conn_string(str(self._workdir / f"{tag}-lg.db"))
            saver = await context.__aenter__()
            self._closers.append(context)
        else:
            from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
            from psycopg.rows import dict_row
            from psycopg_pool import AsyncConnectionPool

            await _drop(f"DROP SCHEMA IF EXISTS {self.SCHEMA} CASCADE; CREATE SCHEMA {self.SCHEMA}")
            pool = AsyncConnectionPool(
                _with_search_path(PG_DSN, self.SCHEMA),
                min_size=1,
                max_size=20,
                open=False,
                kwargs={"autocommit": True, "prepare_threshold": 0, "row_factory": dict_row},
            )
            await pool.open()
            self._closers.append(pool)
            saver = AsyncPostgresSaver(pool)
        await saver.setup()
        self._app = self._graph().compile(checkpointer=saver)

    async def one(self, run_id: str) -> None:
        from langchain_core.messages import HumanMessage

        state = await self._app.ainvoke(
            {"messages": [HumanMessage(PROMPT)]}, {"configurable": {"thread_id": run_id}}, durability="sync"
        )
        if state["messages"][-1].content != self._expected:
            raise AssertionError(f"LangGraph run {run_id}: {state['messages'][-1]!r}")

    async def verify(self, run_ids: list[str]) -> None:
        for run_id in run_ids[:: max(len(run_ids) // 10, 1)]:
            snapshot = await self._app.aget_state({"configurable": {"thread_id": run_id}})
            if snapshot.next or len(snapshot.values["messages"]) != 4:
                raise AssertionError(f"LangGraph run {run_id} stopped at {snapshot.next}")

    async def close(self) -> None:
        while self._closers:
            closer = self._closers.pop()
            if hasattr(closer, "__aexit__") and not hasattr(closer, "close"):
                await closer.__aexit__(None, None, None)
            else:
                await closer.close()


# -------------------------------------------------------------------------------- DBOS


def _responder(messages: list[dict[str, Any]]) -> dict[str, Any]:
    last = messages[-1]
    if last["role"] == "tool":
        return {"role": "assistant", "content": answer(last["content"])}
    return {
        "role": "assistant",
        "content": "",
        "tool_calls": [{"name": "refund", "arguments": dict(ARGS), "id": "call_0"}],
    }


_dbos_workflow: Any = None


def _register_dbos() -> Any:
    """Declare the DBOS steps and workflow once per process (DBOS keeps a global registry)."""
    global _dbos_workflow
    if _dbos_workflow is not None:
        return _dbos_workflow
    from dbos import DBOS

    @DBOS.step()
    async def model_step(messages: list[dict[str, Any]]) -> dict[str, Any]:
        return _responder(messages)

    @DBOS.step()
    async def refund_step(order: str, amount: int) -> dict[str, Any]:
        return charge(order, amount)

    @DBOS.workflow()
    async def refund_workflow(text: str) -> str:
        messages: list[dict[str, Any]] = [{"role": "user", "content": text}]
        reply = await model_step(messages)
        messages.append(reply)
        for call in reply["tool_calls"]:
            result = await refund_step(**call["arguments"])
            messages.append({"role": "tool", "content": json.dumps(result), "tool_call_id": call["id"]})
        reply = await model_step(messages)
        return str(reply["content"])

    _dbos_workflow = refund_workflow
    return refund_workflow


class DBOSPeer(Contender):
    """DBOS 3.4: a workflow with two model steps and a tool step; SQLite / PostgreSQL system database."""

    name = "DBOS"
    DATABASE = "bench_step_dbos"

    def __init__(self, backend: str, workdir: Path, expected: str) -> None:
        self.backend = backend
        self._workdir = workdir
        self._expected = expected
        self._workflow: Any = None

    async def open(self, tag: str) -> None:
        import logging

        from dbos import DBOS

        self._workflow = _register_dbos()
        if self.backend == "sqlite":
            url = f"sqlite:///{self._workdir / f'{tag}-dbos.sqlite'}"
        else:
            await _drop(f"DROP DATABASE IF EXISTS {self.DATABASE} WITH (FORCE)")
            base = PG_DSN.rsplit("/", 1)[0]
            url = f"{base}/{self.DATABASE}"
        DBOS(
            config={
                "name": "bench-step",
                "system_database_url": url,
                "run_admin_server": False,
                "log_level": "WARNING",
            }
        )
        DBOS.launch()
        logging.getLogger("dbos").setLevel(logging.WARNING)

    async def one(self, run_id: str) -> None:
        from dbos import SetWorkflowID

        with SetWorkflowID(run_id):
            output = await self._workflow(PROMPT)
        if output != self._expected:
            raise AssertionError(f"DBOS run {run_id}: {output!r}")

    async def verify(self, run_ids: list[str]) -> None:
        from dbos import DBOS

        for run_id in run_ids[:: max(len(run_ids) // 10, 1)]:
            steps = await DBOS.list_workflow_steps_async(run_id)
            if len(steps) != 3:
                raise AssertionError(f"DBOS run {run_id} recorded {len(steps)} steps")

    async def close(self) -> None:
        import asyncio
        from concurrent.futures import ThreadPoolExecutor

        from dbos import DBOS

        DBOS.destroy()
        # DBOS put its own executor on the loop and shut it down: give the loop a working one back.
        asyncio.get_running_loop().set_default_executor(ThreadPoolExecutor())
