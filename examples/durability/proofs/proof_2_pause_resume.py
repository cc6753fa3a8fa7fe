"""Proof 2 · between the process that paused and the one that resumes.

A child process pauses a large refund and exits; this process resumes it with
``Resume(approved=True, metadata={"approver": "alice"})`` and the run completes with exactly one
charge. The context the approver sees (the pending row, the ``hitl_pause`` row) is the one frozen at
the pause, although the tool changed its context dict after calling ``interrupt()``. A second resume
raises ``AlreadyResumed``. Five racing tasks, five racing ActorSystems in one process, and five racing
processes, each for one pause: one completes, four get ``AlreadyResumed``, one charge.

Run: ``python proof_2_pause_resume.py [--store sqlite|postgres] [--backend asyncio|trio]``; exit status 0
means every claim held.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import anyio
from _harness import Proof, frozen, history, main, outcome
from _refund import ANSWER, ORDER, charges, events

from actors import ActorSystem, AlreadyResumed, Resume, RunResult

LARGE = f"Refund order {ORDER} for 50000"
CONTEXT = {"order": ORDER, "amount": 50000, "balance": 100}
ALICE = Resume(approved=True, metadata={"approver": "alice"})


def pause_in_child(proof: Proof, run: str) -> bool:
    child = proof.run_child("spawn", run, input=LARGE)
    context = (child.report.get("result") or {}).get("pending", {}) or {}
    proof.say(f"child pid={child.pid} status={child.outcome} context={context.get('context')}")
    return proof.check(
        child.code == 0 and child.outcome == "paused", f"the child paused {run} and exited", child.tail()
    )


def race_outcomes(outcomes: list[str]) -> list[str]:
    return sorted(outcomes, key=lambda o: (o != "AlreadyResumed", o))


async def race(n: int, attempt: Callable[[], Awaitable[str]]) -> list[str]:
    """Run ``attempt`` ``n`` times at once; the outcomes, sorted by :func:`race_outcomes`."""
    found: list[str] = []

    async def one() -> None:
        found.append(await attempt())

    async with anyio.create_task_group() as tg:
        for _ in range(n):
            tg.start_soon(one)
    return race_outcomes(found)


async def body(proof: Proof, system: ActorSystem) -> None:
    with proof.section("process A pauses and exits; process B resumes"):
        child = proof.run_child("spawn", "refund-1", input=LARGE)
        result_a = child.report.get("result") or {}
        pending_a = result_a.get("pending") or {}
        proof.say(f"child pid={child.pid} status={child.outcome} context={pending_a.get('context')}")
        proof.check(
            child.code == 0 and child.outcome == "paused", "the child paused and exited", child.tail()
        )
        proof.say(
            f"the tool's own context dict, after interrupt() returned: {child.report.get('context_object')}"
        )
        pending = [p for p in await system.pending() if p.execution_id == "refund-1"]
        rows = await history(system, "refund-1")
        pause = rows[-1] if rows else None

        proof.say("\n── the approver's context was frozen at the pause")
        proof.say(f"pending row context:         {pending[0].context if pending else None}")
        proof.say(f"hitl_pause interrupt_context: {pause.interrupt_context if pause else None}")
        proof.check(
            child.report.get("context_object", {}).get("balance") == 0,
            "the tool really changed its context dict after calling interrupt() (balance 100 → 0)",
            child.report.get("context_object"),
        )
        proof.check(
            len(pending) == 1 and pending[0].context == CONTEXT,
            "the pending row shows the context as it was at interrupt(), not the changed dict",
        )
        proof.check(
            pause is not None and pause.step_type == "hitl_pause" and pause.interrupt_context == CONTEXT,
            "the hitl_pause row holds the same frozen context",
        )
        proof.check(pending_a.get("context") == CONTEXT, "the pausing process's RunResult shows it too")

        proof.say(f"\nthis process resumes with {ALICE!r}")
        result = await system.resume("refund-1", ALICE, timeout=30)
        paid = charges("refund-1")
        proof.say(f"status: {result.status} · output: {result.output!r} · charges: {paid}")
        proof.check(result.status == "completed" and result.output == ANSWER, "the resumed run completed")
        proof.check(
            paid == [{"order": ORDER, "amount": 50000, "approver": "alice"}],
            "exactly one charge, approved by alice",
            paid,
        )
        after = await history(system, "refund-1")
        proof.rows(after)
        resumes = [r for r in after if r.step_type == "resume"]
        proof.check(
            len(resumes) == 1
            and resumes[0].node_input.get("resume") == {"approved": True, "metadata": {"approver": "alice"}},
            "one resume row records the decision before the tool re-ran",
        )
        proof.check(
            not [p for p in await system.pending() if p.execution_id == "refund-1"],
            "the pending row is gone",
        )

    with proof.section("a second resume is refused"):
        before = frozen(await history(system, "refund-1"))
        try:
            again: RunResult | BaseException = await system.resume("refund-1", ALICE, timeout=30)
        except AlreadyResumed as exc:
            again = exc
        proof.say(f"{outcome(again)}: {again}"[:160])
        proof.check(isinstance(again, AlreadyResumed), "the second resume raised AlreadyResumed")
        proof.check(frozen(await history(system, "refund-1")) == before, "and wrote nothing")
        proof.check(len(charges("refund-1")) == 1, "still one charge")

    with proof.section("five tasks race for one pause"):
        if pause_in_child(proof, "refund-2"):

            async def resume_one() -> str:
                try:
                    return outcome(await system.resume("refund-2", ALICE, timeout=30))
                except AlreadyResumed as exc:
                    return outcome(exc)

            outcomes = await race(5, resume_one)
            proof.say(f"outcomes: {outcomes}")
            proof.say(f"charges for refund-2: {charges('refund-2')}")
            proof.check(
                outcomes == ["AlreadyResumed"] * 4 + ["completed"], "one completed, four AlreadyResumed"
            )
            proof.check(len(charges("refund-2")) == 1, "one charge")

    with proof.section("five ActorSystems in one process race for one pause (each its own store connection)"):
        if pause_in_child(proof, "refund-3"):

            async def resume_own() -> str:
                async with proof.system() as own:
                    try:
                        return outcome(await own.resume("refund-3", ALICE, timeout=30))
                    except AlreadyResumed as exc:
                        return outcome(exc)

            outcomes = await race(5, resume_own)
            proof.say(f"outcomes: {outcomes}")
            proof.say(f"charges for refund-3: {charges('refund-3')}")
            proof.check(
                outcomes == ["AlreadyResumed"] * 4 + ["completed"], "one completed, four AlreadyResumed"
            )
            proof.check(len(charges("refund-3")) == 1, "one charge")

    with proof.section("five processes race for one pause"):
        if pause_in_child(proof, "refund-4"):
            racers = proof.race(5, "resume", "refund-4", decision="approve")
            outcomes = race_outcomes([c.outcome for c in racers])
            proof.say(f"outcomes: {outcomes}")
            proof.say(f"charges for refund-4: {charges('refund-4')}")
            pids = {e["pid"] for e in events("charge", "refund-4")}
            winner = [c.pid for c in racers if c.outcome == "completed"]
            proof.check(
                outcomes == ["AlreadyResumed"] * 4 + ["completed"],
                "one completed, four AlreadyResumed",
                *[c.tail() for c in racers if c.outcome not in ("completed", "AlreadyResumed")],
            )
            proof.check(len(charges("refund-4")) == 1, "one charge")
            proof.check(pids == set(winner), "made by the process that won the claim")
            status = (await history(system, "refund-4"))[-1]
            proof.check(
                (status.step_type, status.status) == ("run_end", "completed"), "the run ended completed"
            )


if __name__ == "__main__":
    main(2, __doc__ or "", body)
