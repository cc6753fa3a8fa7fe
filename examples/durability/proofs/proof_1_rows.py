"""Proof 1 · between one step and the next: the rows one run writes.

A small refund writes ``turn:0``, ``turn:0/tool:refund`` (with the tool's arguments), ``turn:1`` and a
completed ``run_end``; a large refund writes ``turn:0``, ``turn:0/tool:refund``, the interrupted
``hitl_pause`` row and a pending row, and no ``run_end``. Every row names its writer in ``agent_path``.

Run: ``python proof_1_rows.py [--store sqlite|postgres] [--backend asyncio|trio]``; exit status 0
means every claim held.
"""

from __future__ import annotations

from _harness import Proof, history, main, shape
from _refund import AGENTS, ANSWER, ORDER

from actors import ActorSystem

TOOL_PATH = "agent:refund-bot/tool:refund"


async def body(proof: Proof, system: ActorSystem) -> None:
    bot = AGENTS["refund-bot"]

    with proof.section("a run that completes: one small refund"):
        ref = await system.spawn(bot, f"Refund order {ORDER} for 20", execution_id="run-small")
        result = await ref.result(timeout=30)
        proof.say(f"status: {result.status} · output: {result.output!r}")
        rows = await history(system, "run-small")
        proof.rows(rows)
        proof.check(
            result.status == "completed" and result.output == ANSWER, "the run completed with the answer"
        )
        proof.check(
            shape(rows)
            == [
                ("turn:0", "llm_call", "completed"),
                ("turn:0/tool:refund", "tool_call", "completed"),
                ("turn:1", "llm_call", "completed"),
                ("run_end", "run_end", "completed"),
            ],
            "rows: turn:0, turn:0/tool:refund, turn:1, run_end completed — nothing else",
            shape(rows),
        )
        proof.check([r.seq for r in rows] == list(range(len(rows))), "seq runs 0, 1, 2, … in order")
        proof.check(
            [r.step_index for r in rows[:3]] == [0, 0, 1], "step_index is the turn N of each step row"
        )
        proof.check(all(r.runner == "refund-bot" for r in rows), "every row names the runner refund-bot")
        proof.check(
            [r.agent_path for r in rows]
            == ["agent:refund-bot", TOOL_PATH, "agent:refund-bot", "agent:refund-bot"],
            "agent_path: agent:refund-bot for turns and the marker, …/tool:refund for the tool",
            [r.agent_path for r in rows],
        )
        tool_row = rows[1] if len(rows) > 1 else None
        proof.check(
            tool_row is not None and tool_row.node_input == {"order": ORDER, "amount": 20},
            "the tool row, written before the tool ran, holds its arguments",
            tool_row.node_input if tool_row else None,
        )
        proof.check(
            tool_row is not None
            and any(m.get("tool_calls") for m in tool_row.state_snapshot.get("messages", [])),
            "the tool row's snapshot already holds the model's tool call",
        )

    with proof.section("a run that pauses: a large refund"):
        ref = await system.spawn(bot, f"Refund order {ORDER} for 50000", execution_id="run-large")
        result = await ref.result(timeout=30)
        pending = result.pending
        shown = (
            None
            if pending is None
            else {"reason": pending.reason, "node_id": pending.node_id, "agent_path": pending.agent_path}
        )
        proof.say(f"status: {result.status} · pending_interrupt: {shown}")
        rows = await history(system, "run-large")
        proof.rows(rows)
        stored = [(p.execution_id, p.reason, p.context) for p in await system.pending()]
        proof.say(f"pending rows: {stored}")
        ends = [r.node_id for r in rows if r.step_type == "run_end"]
        proof.say(f"run_end rows for the paused run: {ends}")
        proof.check(result.status == "paused", "the run paused")
        proof.check(
            shown == {"reason": "manager_approval", "node_id": "turn:0/tool:refund", "agent_path": TOOL_PATH},
            "RunResult.pending names the reason, the tool node and the tool's agent_path",
        )
        proof.check(
            shape(rows)
            == [
                ("turn:0", "llm_call", "completed"),
                ("turn:0/tool:refund", "tool_call", "completed"),
                ("turn:0/tool:refund", "hitl_pause", "interrupted"),
            ],
            "rows: turn:0, turn:0/tool:refund, then the interrupted hitl_pause row",
            shape(rows),
        )
        pause = rows[-1] if rows else None
        context = {"order": ORDER, "amount": 50000, "balance": 100}
        proof.check(
            pause is not None
            and pause.interrupt_reason == "manager_approval"
            and pause.interrupt_context == context
            and pause.agent_path == TOOL_PATH,
            "the hitl_pause row holds the reason and the context, written by agent:refund-bot/tool:refund",
        )
        proof.check(
            stored == [("run-large", "manager_approval", context)],
            "exactly one pending row, for run-large, with the frozen context",
        )
        proof.check(ends == [], "a pause is not an ending: no run_end row")


if __name__ == "__main__":
    main(1, __doc__ or "", body)
