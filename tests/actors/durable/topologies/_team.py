"""The topology the durability tests run: a Supervisor ``ops`` whose workers are an Agent ``clerk``
and a Swarm ``desk`` (``triage`` -> ``billing`` -> ``closer``), with per-agent counters.

Every model call and tool run appends one line to the ledger file ``$TEAM_LEDGER`` (``model
<agent>``, ``tool <name>``, ``charge <order>``), so counts survive the processes that made them.
``$TEAM_CRASH`` names a crash point at which the process kills itself with ``os._exit(17)``:
``worker_tool`` (clerk's tool), ``manager_after_delegation`` (the manager's model call after the
clerk's delegation returned), ``between_handoffs`` (billing's tool, between the two hops) and
``member_model`` (closer's model call). ``$TEAM_GATES`` puts ``interrupt()`` gates in ``billing``'s
refund (``billing``) or in both the refund and the clerk's tool (``both``).

As a script: ``python _team.py MODE BACKEND TARGET SCHEMA EXECUTION_ID [APPROVER]`` with MODE
``spawn``, ``recover`` or ``resume``; prints one JSON line: status, output, error type, pending path.
"""

from __future__ import annotations

import json
import os
import sys
from collections import Counter
from pathlib import Path

import anyio

from actors import (
    ActorSystem,
    Agent,
    Resume,
    Supervisor,
    Swarm,
    TetherError,
    current_run,
    idempotent,
    interrupt,
    tool,
)
from actors.models import FunctionModel, Message, ModelReply, ToolCall
from stores import PostgresStore, SQLiteStore, Store

ORDER = "1042"
OUTPUT = "ops: clerk: filed 1042 (-) | closed: confirmed refund of 1042 for order 1042"
#: What one run without a crash costs, per agent and tool.
BASELINE = Counter(
    {
        "model boss": 3,
        "model clerk": 2,
        "model triage": 1,
        "model billing": 2,
        "model closer": 2,
        "tool file_report": 1,
        "tool lookup": 1,
        "tool refund": 1,
        "tool confirm": 1,
    }
)


def count(entry: str) -> None:
    with open(os.environ["TEAM_LEDGER"], "a") as ledger:
        ledger.write(entry + "\n")


def counts(ledger: Path) -> Counter[str]:
    """The ledger's lines, counted."""
    return Counter(ledger.read_text().splitlines()) if ledger.exists() else Counter()


def crash_at(point: str) -> None:
    if os.environ.get("TEAM_CRASH") == point:
        os._exit(17)


def gated(who: str) -> bool:
    return os.environ.get("TEAM_GATES") in (who, "both")


def last_tool(messages: list[Message]) -> str | None:
    tools = [m for m in messages if m.role == "tool"]
    return tools[-1].name if tools else None


def model(name: str, decide: object) -> FunctionModel:
    def fn(messages: list[Message]) -> str | ModelReply:
        count(f"model {name}")
        return decide(messages)  # type: ignore[operator, no-any-return]

    return FunctionModel(fn)


def boss(messages: list[Message]) -> str | ModelReply:
    last = last_tool(messages)
    if last is None:
        return ModelReply(tool_calls=[ToolCall("delegate_to_clerk", {"task": f"file report {ORDER}"})])
    if last == "delegate_to_clerk":
        crash_at("manager_after_delegation")
        return ModelReply(tool_calls=[ToolCall("delegate_to_support", {"task": f"refund order {ORDER}"})])
    return "ops: " + " | ".join(m.content for m in messages if m.role == "tool")


@idempotent
def charge(order: str, amount: int) -> str:
    count(f"charge {order}")
    return f"charged {amount} on {order}"


@tool
def file_report(order: str) -> str:
    """File the report of an order."""
    count("tool file_report")
    crash_at("worker_tool")
    approver = "-"
    if gated("both"):
        decision = interrupt("file report", {"order": order})
        approver = str(decision.metadata.get("approver"))
    return f"filed {order} ({approver})"


@tool
def lookup(order: str) -> str:
    """Look an order up."""
    count("tool lookup")
    return f"order {order}: 20 EUR"


@tool
def refund(order: str, amount: int) -> str:
    """Refund an order."""
    count("tool refund")
    crash_at("between_handoffs")
    charge(order, amount)
    approver = "-"
    if gated("billing"):
        decision = interrupt("approve refund", {"order": order, "amount": amount})
        approver = str(decision.metadata.get("approver"))
    run = current_run()
    assert run is not None
    run.shared["refunded"] = order
    return f"refunded {order} ({approver})"


@tool
def confirm() -> str:
    """Confirm what the run's shared state says was refunded."""
    count("tool confirm")
    run = current_run()
    assert run is not None
    return f"confirmed refund of {run.shared.get('refunded')} for order {run.shared.get('order')}"


def clerk(messages: list[Message]) -> str | ModelReply:
    if last_tool(messages) is None:
        return ModelReply(tool_calls=[ToolCall("file_report", {"order": ORDER})])
    return "clerk: " + messages[-1].content


def triage(messages: list[Message]) -> str | ModelReply:
    return ModelReply(
        tool_calls=[
            ToolCall("lookup", {"order": ORDER}),
            ToolCall("handoff_to_billing", {"reason": "a refund", "context": {"order": ORDER}}),
        ]
    )


def billing(messages: list[Message]) -> str | ModelReply:
    if last_tool(messages) == "handoff_to_billing":
        return ModelReply(tool_calls=[ToolCall("refund", {"order": ORDER, "amount": 20})])
    return ModelReply(tool_calls=[ToolCall("handoff_to_closer", {"reason": "refunded"})])


def closer(messages: list[Message]) -> str | ModelReply:
    if last_tool(messages) == "handoff_to_closer":
        crash_at("member_model")
        return ModelReply(tool_calls=[ToolCall("confirm", {})])
    return "closed: " + messages[-1].content


def team() -> Supervisor:
    """A fresh build of the ``ops`` topology."""
    desk = Swarm(
        "desk",
        [
            Agent("triage", model("triage", triage), tools=[lookup], instructions="You sort requests."),
            Agent("billing", model("billing", billing), tools=[refund], instructions="You refund."),
            Agent("closer", model("closer", closer), tools=[confirm]),
        ],
        handoffs={"triage": ["billing"], "billing": ["closer"]},
    )
    manager = Agent("boss", model("boss", boss), instructions="You run operations.")
    clerk_agent = Agent("clerk", model("clerk", clerk), tools=[file_report], instructions="You file.")
    return Supervisor("ops", manager, {"clerk": clerk_agent, "support": desk})


def open_store(backend: str, target: str, schema: str) -> Store:
    return SQLiteStore(target) if backend == "sqlite" else PostgresStore(target, schema=schema)


async def main(
    mode: str, backend: str, target: str, schema: str, execution_id: str, approver: str = ""
) -> None:
    runner = team()
    async with open_store(backend, target, schema) as store, ActorSystem(store, runners=[runner]) as system:
        try:
            if mode == "spawn":
                result = await (await system.spawn(runner, "run ops", execution_id=execution_id)).result(
                    timeout=60
                )
            elif mode == "resume":
                decision = Resume(approved=True, metadata={"approver": approver})
                result = await system.resume(execution_id, decision, timeout=60)
            else:
                result = await system.resume(execution_id, timeout=60)
        except TetherError as error:
            print(json.dumps({"status": "refused", "error": type(error).__name__}), flush=True)
            return
        pending = result.pending.agent_path if result.pending is not None else None
        print(json.dumps({"status": result.status, "output": result.output, "pending": pending}), flush=True)


if __name__ == "__main__":
    anyio.run(main, *sys.argv[1:], backend=os.environ.get("TETHER_TEST_LOOP", "asyncio"))
