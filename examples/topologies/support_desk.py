"""A Supervisor -> Swarm -> Agent topology: an operations manager, a support desk of two peers, a refund
that waits for a human.

``ops`` (a Supervisor) has a manager, ``boss``, and one worker, ``support``: a Swarm where ``triage``
looks the order up and hands off to ``billing``, whose ``refund`` tool asks for approval with
``interrupt()``. The run pauses with one pending row naming that deep tool
(``supervisor:ops/worker:support/agent:billing/tool:refund``); a ``Resume`` continues it, in this
process or any other with the same store. Offline: the models are deterministic ``FunctionModel``s.

Run: ``python examples/topologies/support_desk.py`` (a scratch SQLite file; ``--db PATH`` to keep it;
``--backend trio`` for anyio's trio loop).
"""

from __future__ import annotations

import argparse
import tempfile
from collections.abc import Callable
from pathlib import Path

import anyio

from actors import ActorSystem, Agent, Resume, Supervisor, Swarm, current_run, idempotent, interrupt, tool
from actors.models import FunctionModel, Message, ModelReply, ToolCall
from stores import SQLiteStore

ORDER = "1042"
TASK = f"Customer asks for a refund of order {ORDER}"


def build(count: Callable[[str], None] = lambda what: None) -> Supervisor:
    """A fresh build of the ``ops`` topology; ``count`` hears of every model call and tool run
    (``"model <agent>"``, ``"tool <name>"``)."""

    @idempotent
    def charge(order: str, amount: int) -> str:
        """The side effect: one charge per run, however often the tool runs."""
        count("charge")
        return f"charged {amount} EUR back on {order}"

    @tool
    def lookup(order: str) -> str:
        """Look an order up."""
        count("tool lookup")
        return f"order {order}: 20 EUR, paid"

    @tool
    def refund(order: str, amount: int) -> str:
        """Refund an order, once a human approved it."""
        count("tool refund")
        decision = interrupt("approve refund", {"order": order, "amount": amount})
        if not decision.approved:
            return f"refund of {order} rejected"
        receipt = charge(order, amount)
        run = current_run()
        if run is not None:
            run.shared["refunded"] = order
        return f"{receipt} (approved by {decision.metadata.get('approver', '?')})"

    def model(name: str, decide: Callable[[list[Message]], str | ModelReply]) -> FunctionModel:
        def fn(messages: list[Message]) -> str | ModelReply:
            count(f"model {name}")
            return decide(messages)

        return FunctionModel(fn)

    def boss(messages: list[Message]) -> str | ModelReply:
        if messages[-1].role == "tool":
            return f"Done: {messages[-1].content}"
        return ModelReply(tool_calls=[ToolCall("delegate_to_support", {"task": TASK})])

    def triage(messages: list[Message]) -> str | ModelReply:
        return ModelReply(
            tool_calls=[
                ToolCall("lookup", {"order": ORDER}),
                ToolCall("handoff_to_billing", {"reason": "a refund", "context": {"order": ORDER}}),
            ]
        )

    def billing(messages: list[Message]) -> str | ModelReply:
        if messages[-1].name == "refund":
            return f"Refund for order {ORDER}: {messages[-1].content}"
        return ModelReply(tool_calls=[ToolCall("refund", {"order": ORDER, "amount": 20})])

    desk = Swarm(
        "desk",
        [
            Agent("triage", model("triage", triage), tools=[lookup], instructions="You sort requests."),
            Agent("billing", model("billing", billing), tools=[refund], instructions="You refund orders."),
        ],
        handoffs={"triage": ["billing"]},
    )
    manager = Agent("boss", model("boss", boss), instructions="You run operations; delegate the work.")
    return Supervisor("ops", manager, {"support": desk})


async def demo(db: Path) -> None:
    ops = build()
    async with SQLiteStore(db) as store, ActorSystem(store, runners=[ops]) as system:
        first = await (await system.spawn(ops, TASK, execution_id="ops-demo")).result(timeout=30)
        assert first.pending is not None
        print(f"{first.status}: {first.pending.reason} at {first.pending.agent_path}")
        done = await system.resume(
            "ops-demo", Resume(approved=True, metadata={"approver": "alice"}), timeout=30
        )
        print(f"{done.status}: {done.output}")
        for row in await system.history("ops-demo"):
            print(f"  #{row.seq:<3} {row.agent_path:<68} {row.node_id:<32} {row.step_type}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", type=Path, help="the SQLite file (default: a scratch file)")
    parser.add_argument(
        "--backend", choices=["asyncio", "trio"], default="asyncio", help="anyio's event loop"
    )
    args = parser.parse_args()
    if args.db is not None:
        anyio.run(demo, args.db, backend=args.backend)
        return
    with tempfile.TemporaryDirectory(prefix="tether-topologies-") as tmp:
        anyio.run(demo, Path(tmp) / "ops.db", backend=args.backend)


if __name__ == "__main__":
    main()
