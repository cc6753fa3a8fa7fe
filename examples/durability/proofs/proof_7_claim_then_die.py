"""Proof 7 · beyond the reference: a claimed pause survives its claimer, and one live owner per run.

- A resumer process is killed (``os._exit``) right after its claim committed, inside the re-run tool
  before it charged. The ``resume`` row holds the decision, so a later ``system.resume(id)`` (no
  ``Resume``) finishes the run with the claimed decision and exactly one charge. (The reference
  strands such a run: its claim deleted the pending row and nothing recorded the decision.)
- Two processes start crash recovery of one run at once: one completes, the other gets
  ``AlreadyResumed``; the tool re-ran once.
- While a live process owns a run (recovering it, blocked inside the re-run tool), another process's
  ``system.resume(id)`` gets ``AlreadyResumed`` before it runs anything. Once the owner is killed with
  SIGKILL, the next resume proceeds at once (the lock dies with its process; no lease to wait out).

Run: ``python proof_7_claim_then_die.py [--store sqlite|postgres] [--backend asyncio|trio]``; exit status 0
means every claim held.
"""

from __future__ import annotations

import os
import time

from _harness import Proof, frozen, history, main, outcome, shape, wait_for_file
from _refund import ANSWER, ORDER, charges, events

from actors import ActorSystem, AlreadyResumed, Resume, RunResult

SMALL = f"Refund order {ORDER} for 20"
LARGE = f"Refund order {ORDER} for 50000"
AT_ONCE = 5.0  # seconds: far below any lease, far above a process start on a loaded machine


async def attempt(system: ActorSystem, run: str, resume: Resume | None = None) -> RunResult | BaseException:
    try:
        return await system.resume(run, resume, timeout=30)
    except AlreadyResumed as exc:
        return exc


async def body(proof: Proof, system: ActorSystem) -> None:
    with proof.section("a resumer killed right after its claim"):
        child = proof.run_child("spawn", "claim-1", input=LARGE)
        proof.say(f"child A pid={child.pid} status={child.outcome}")
        proof.check(
            child.code == 0 and child.outcome == "paused", "process A paused the run and exited", child.tail()
        )
        claimer = proof.run_child(
            "resume", "claim-1", decision="approve", approver="bob", crash="after_claim"
        )
        rows = await history(system, "claim-1")
        pending = [p for p in await system.pending() if p.execution_id == "claim-1"]
        proof.say(
            f"child B claimed with Resume(approved=True, metadata={{'approver': 'bob'}}) and died: exit {claimer.code}"
        )
        proof.rows(rows)
        proof.check(
            claimer.code == 4,
            "process B died inside the re-run tool, after its claim, before charging",
            claimer.tail(),
        )
        proof.check(
            bool(rows)
            and rows[-1].step_type == "resume"
            and rows[-1].node_input.get("resume") == {"approved": True, "metadata": {"approver": "bob"}},
            "the newest row is B's resume row, holding bob's decision",
        )
        proof.check(pending == [], "the pending row was claimed (deleted)")
        proof.check(charges("claim-1") == [], "nothing was charged")

        result = await attempt(system, "claim-1")
        paid = charges("claim-1")
        proof.say(f"system.resume('claim-1') → {outcome(result)} · charges: {paid}")
        proof.rows((await history(system, "claim-1"))[len(rows) :])
        proof.check(
            isinstance(result, RunResult) and result.status == "completed" and result.output == ANSWER,
            "crash recovery without a Resume finished the run",
        )
        proof.check(
            paid == [{"order": ORDER, "amount": 50000, "approver": "bob"}],
            "with the claimed decision (approved by bob) and exactly one charge",
            paid,
        )
        again = await attempt(system, "claim-1", Resume(approved=False, metadata={"approver": "mallory"}))
        proof.check(isinstance(again, AlreadyResumed), "a late Resume for it raises AlreadyResumed")

    with proof.section("two processes start crash recovery of one run at once"):
        child = proof.run_child("spawn", "recover-race", input=SMALL, crash="tool")
        proof.check(child.code == 2, "the run's process died inside the tool (exit 2)", child.tail())
        tools_before = len(events("tool", "recover-race"))
        racers = proof.race(2, "resume", "recover-race")
        outcomes = sorted(c.outcome for c in racers)
        reruns = len(events("tool", "recover-race")) - tools_before
        proof.say(f"outcomes: {outcomes} · tool re-runs: {reruns} · charges: {charges('recover-race')}")
        proof.check(
            outcomes == ["AlreadyResumed", "completed"],
            "one recovered the run, the other got AlreadyResumed",
            *[c.tail() for c in racers],
        )
        proof.check(reruns == 1 and len(charges("recover-race")) == 1, "the tool re-ran once: one charge")

    with proof.section("a live owner holds the run; its death frees it at once"):
        child = proof.run_child("spawn", "owned-1", input=SMALL, crash="tool")
        proof.check(child.code == 2, "the run's process died inside the tool (exit 2)", child.tail())
        owner = proof.start_child("resume", "owned-1", crash="block")
        blocked = os.path.join(proof.cfg.workdir, "blocked-owned-1")
        try:
            proof.check(
                wait_for_file(blocked, owner),
                "process R is recovering the run, blocked inside the re-run tool",
            )
            rows = await history(system, "owned-1")
            before, tools_before = frozen(rows), len(events("tool", "owned-1"))
            proof.rows(rows)
            refused = await attempt(system, "owned-1")
            proof.say(
                f"while R lives, this process's system.resume('owned-1') → {outcome(refused)}: {refused}"[
                    :170
                ]
            )
            proof.check(
                isinstance(refused, AlreadyResumed),
                "a second resumer gets AlreadyResumed while the owner lives",
            )
            proof.check(
                frozen(await history(system, "owned-1")) == before
                and len(events("tool", "owned-1")) == tools_before,
                "before running anything: no row written, the tool not started",
            )
        finally:
            owner.kill()  # SIGKILL: no cleanup runs in R
            owner.wait(timeout=30)
        proof.say(f"R killed with SIGKILL (returncode {owner.returncode})")
        started = time.monotonic()
        result = await attempt(system, "owned-1")
        took = time.monotonic() - started
        proof.say(f"next system.resume('owned-1') → {outcome(result)} after {took * 1000:.0f} ms")
        rows = await history(system, "owned-1")
        proof.say("rows: " + ", ".join(f"{n}/{s}" for n, s, _ in shape(rows)))
        proof.check(owner.returncode == -9, "R died by SIGKILL")
        proof.check(
            isinstance(result, RunResult) and result.status == "completed",
            "the next resume proceeded and completed",
        )
        proof.check(
            took < AT_ONCE, f"at once: in under {AT_ONCE:g} s, with no lease to wait out", f"{took:.2f} s"
        )
        proof.check(len(charges("owned-1")) == 1, "one charge (R died before charging)")


if __name__ == "__main__":
    main(7, __doc__ or "", body)
