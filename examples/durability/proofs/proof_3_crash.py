"""Proof 3 · between a crash and a rerun: resume re-enters at the newest row.

Real child processes die by ``os._exit`` and this process recovers them with ``system.resume(id)``:

- killed inside the tool: the tool re-runs with its saved arguments and the model is called once
  (for the turn after the tool), never for the turn that asked for the tool;
- killed waiting on the model after the tool: the model is called once and the tool does not re-run;
- two tool calls in one turn, the first pauses: the sibling never runs (not on the first pass, not on
  resume) and the model reads ``[no result: the agent was interrupted before this tool ran; it was not
  run on resume]`` for it;
- killed inside a tool before it reached ``interrupt()``: crash recovery re-runs it and it pauses now
  (status paused, a pending row); approving finishes the run with one charge.

Run: ``python proof_3_crash.py [--store sqlite|postgres] [--backend asyncio|trio]``; exit status 0
means every claim held.
"""

from __future__ import annotations

from _harness import Proof, history, main, shape
from _refund import AGENTS, ANSWER, ORDER, SIBLING_NOTE, charges, events

from actors import ActorSystem, AlreadyResumed, Resume, ResumeRequired, RunResult

SMALL = f"Refund order {ORDER} for 20"
LARGE = f"Refund order {ORDER} for 50000"


def model_calls_since(mark: int) -> list[dict[str, object]]:
    return events("model")[mark:]


async def body(proof: Proof, system: ActorSystem) -> None:
    with proof.section("killed inside the tool"):
        child = proof.run_child("spawn", "crash-tool", input=SMALL, crash="tool")
        proof.say(f"child exit code: {child.code}")
        rows = await history(system, "crash-tool")
        proof.rows(rows)
        proof.check(child.code == 2, "the child died inside the tool (exit 2)", child.tail())
        proof.check(
            shape(rows)
            == [("turn:0", "llm_call", "completed"), ("turn:0/tool:refund", "tool_call", "completed")],
            "its newest row is the tool row, written before the tool ran",
        )
        proof.check(charges("crash-tool") == [], "nothing was charged before the crash")
        saved = rows[-1].node_input if rows else None
        mark, tools_before = len(events("model")), len(events("tool", "crash-tool"))
        result = await system.resume("crash-tool", timeout=30)
        calls = model_calls_since(mark)
        reruns = events("tool", "crash-tool")[tools_before:]
        paid = charges("crash-tool")
        proof.say(
            f"resume → status={result.status} model calls={len(calls)} tool ran with saved args "
            f"{saved} → charges={paid}"
        )
        proof.rows((await history(system, "crash-tool"))[len(rows) :])
        proof.check(result.status == "completed" and result.output == ANSWER, "the recovered run completed")
        proof.check(
            len(reruns) == 1
            and {k: reruns[0][k] for k in ("order", "amount")} == saved == {"order": ORDER, "amount": 20},
            "the tool re-ran once, with the saved arguments",
            reruns,
        )
        proof.check(
            [c["turn"] for c in calls] == [1],
            "exactly one model call, for turn 1 (turn 0's tool request was not asked again)",
            calls,
        )
        proof.check(paid == [{"order": ORDER, "amount": 20}], "one charge")

    with proof.section("killed waiting on the model, after the tool"):
        child = proof.run_child("spawn", "crash-model", input=SMALL, crash="model")
        proof.say(f"child exit code: {child.code}")
        rows = await history(system, "crash-model")
        proof.rows(rows)
        proof.check(
            child.code == 3, "the child died inside the model call after the tool (exit 3)", child.tail()
        )
        proof.check(
            shape(rows)
            == [
                ("turn:0", "llm_call", "completed"),
                ("turn:0/tool:refund", "tool_call", "completed"),
                ("turn:1", "llm_call", "completed"),
            ],
            "its newest row is turn:1, written before the model was called",
        )
        proof.check(len(charges("crash-model")) == 1, "the tool had charged once before the crash")
        mark, tools_before = len(events("model")), len(events("tool", "crash-model"))
        result = await system.resume("crash-model", timeout=30)
        calls = model_calls_since(mark)
        reruns = events("tool", "crash-model")[tools_before:]
        proof.say(
            f"resume → status={result.status} model calls={len(calls)} tool runs={len(reruns)} "
            f"charges={charges('crash-model')}"
        )
        proof.rows((await history(system, "crash-model"))[len(rows) :])
        proof.check(result.status == "completed" and result.output == ANSWER, "the recovered run completed")
        proof.check([c["turn"] for c in calls] == [1], "exactly one model call, re-issued at turn 1", calls)
        proof.check(reruns == [], "the tool was not re-run")
        proof.check(len(charges("crash-model")) == 1, "still one charge")

    with proof.section("two tools in one turn; the first pauses"):
        ref = await system.spawn(
            AGENTS["refund-bot"],
            f"Refund order {ORDER} for 50000 and notify the customer",
            execution_id="siblings",
        )
        result = await ref.result(timeout=30)
        first_pass = events("notify", "siblings")
        proof.say(f"status: {result.status} · notify ran during the first pass: {first_pass}")
        proof.check(result.status == "paused", "the run paused in refund")
        proof.check(first_pass == [], "notify did not run on the first pass")
        mark = len(events("model"))
        result = await system.resume(
            "siblings", Resume(approved=True, metadata={"approver": "alice"}), timeout=30
        )
        on_resume = events("notify", "siblings")
        calls = model_calls_since(mark)
        seen = calls[-1]["tools_seen"] if calls else None
        proof.say(f"resume → status: {result.status} · notify ran on resume: {on_resume}")
        proof.say(f"tool results the model was shown at the next turn: {seen}")
        proof.check(result.status == "completed", "the resumed run completed")
        proof.check(on_resume == [], "notify was not run on resume either")
        proof.check(
            isinstance(seen, list) and len(seen) == 2 and '"refunded":true' in str(seen[0]).replace(" ", ""),
            "the model read refund's real result for the first call",
            seen,
        )
        proof.check(
            isinstance(seen, list) and len(seen) == 2 and seen[1] == SIBLING_NOTE,
            "and, for notify, exactly the note that it did not run",
            seen,
        )
        proof.check(len(charges("siblings")) == 1, "one charge")

    with proof.section("a tool re-invoked after a crash can pause"):
        child = proof.run_child("spawn", "crash-then-pause", input=LARGE, crash="tool")
        proof.say(f"child exit code: {child.code}")
        proof.check(
            child.code == 2, "the child died inside the tool, before interrupt() (exit 2)", child.tail()
        )
        recovered: RunResult = await system.resume("crash-then-pause", timeout=30)
        node = recovered.pending.node_id if recovered.pending else None
        pending = [p.execution_id for p in await system.pending() if p.execution_id == "crash-then-pause"]
        proof.say(f"crash resume → status: {recovered.status} · node: {node} · pending: {pending}")
        rows = await history(system, "crash-then-pause")
        proof.rows(rows)
        proof.check(
            recovered.status == "paused", "crash recovery re-ran the tool and it paused (status paused)"
        )
        proof.check(
            node == "turn:0/tool:refund" and pending == ["crash-then-pause"],
            "the pause names the tool node and has its pending row",
        )
        proof.check(
            bool(rows)
            and (rows[-1].step_type, rows[-1].status) == ("hitl_pause", "interrupted")
            and any(r.step_type == "recover" for r in rows),
            "rows: a recover row, then the hitl_pause row, recorded like a first-pass pause",
        )
        try:
            again: RunResult | BaseException = await system.resume("crash-then-pause", timeout=30)
        except ResumeRequired as exc:
            again = exc
        proof.check(
            isinstance(again, ResumeRequired), "recovering it again without a Resume raises ResumeRequired"
        )
        result = await system.resume(
            "crash-then-pause", Resume(approved=True, metadata={"approver": "alice"}), timeout=30
        )
        paid = charges("crash-then-pause")
        proof.say(f"approve      → status: {result.status} · charges: {paid}")
        proof.check(result.status == "completed", "approving finished the run")
        proof.check(paid == [{"order": ORDER, "amount": 50000, "approver": "alice"}], "with one charge")
        try:
            third: RunResult | BaseException = await system.resume(
                "crash-then-pause", Resume(approved=True), timeout=30
            )
        except AlreadyResumed as exc:
            third = exc
        proof.check(isinstance(third, AlreadyResumed), "a third resume raises AlreadyResumed")


if __name__ == "__main__":
    main(3, __doc__ or "", body)
