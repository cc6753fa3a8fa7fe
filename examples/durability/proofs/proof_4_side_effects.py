"""Proof 4 · between a resume and a side effect: the re-executed step.

A resumed tool runs again from the top, so a card charge placed before its ``interrupt()`` fires twice
as a plain call and once behind ``@idempotent``. The cache is per run (a new run charges again);
outside a run there is no cache. A result that is not JSON is refused with ``IdempotencyError`` and
the model reads the error. Ten identical calls in one step are ten occurrences: each runs once, and
a re-run of the step (the resume) runs none of them again, returning each earlier result.

Run: ``python proof_4_side_effects.py [--store sqlite|postgres] [--backend asyncio|trio]``; exit status 0
means every claim held.
"""

from __future__ import annotations

import json

from _harness import Proof, main
from _refund import AGENTS, ANSWER, ORDER, charge_card_once, events, opaque

from actors import ActorSystem, IdempotencyError, Resume

LARGE = f"Refund order {ORDER} for 50000"
APPROVE = Resume(approved=True, metadata={"approver": "alice"})


def fired(run: str | None) -> list[str]:
    """The card charges made in ``run`` (``None``: outside any run)."""
    return [e["order"] for e in events("card") if e.get("run") == run]


async def pause_and_resume(system: ActorSystem, agent: str, run: str) -> tuple[str, str]:
    ref = await system.spawn(AGENTS[agent], LARGE, execution_id=run)
    first = await ref.result(timeout=30)
    second = await system.resume(run, APPROVE, timeout=30)
    return first.status, second.status


async def body(proof: Proof, system: ActorSystem) -> None:
    with proof.section("the same tool, paused and resumed"):
        first, status = await pause_and_resume(system, "refund-plain", "plain-1")
        proof.say(
            f"plain function         {first} → {status} charge_card fired {len(fired('plain-1'))}× → {fired('plain-1')}"
        )
        first_i, status_i = await pause_and_resume(system, "refund-idempotent", "idem-1")
        proof.say(
            f"@idempotent            {first_i} → {status_i} charge_card fired {len(fired('idem-1'))}× → {fired('idem-1')}"
        )
        proof.check(
            (first, status, first_i, status_i) == ("paused", "completed") * 2,
            "both runs paused, then completed",
        )
        proof.check(
            fired("plain-1") == [ORDER, ORDER], "the plain charge fired twice: once per pass of the tool"
        )
        proof.check(fired("idem-1") == [ORDER], "the @idempotent charge fired once")
        proof.check(
            len(events("tool", "idem-1")) == 2,
            "although the @idempotent tool itself ran twice (pause, resume)",
        )

    with proof.section("the cache is per run"):
        first, status = await pause_and_resume(system, "refund-idempotent", "idem-2")
        proof.say(
            f"@idempotent, new run   {first} → {status} charge_card fired {len(fired('idem-2'))}× → {fired('idem-2')}"
        )
        proof.check(fired("idem-2") == [ORDER], "a new run is a new cache: it charged once more, once")

    with proof.section("outside a run there is no cache"):
        before = len(fired(None))
        one = await charge_card_once(ORDER)
        two = await charge_card_once(ORDER)
        outside = len(fired(None)) - before
        proof.say(f"called twice outside any run → fired {outside}× (results {one}, {two})")
        proof.check(outside == 2 and one == two, "outside a run the body runs every time")

    with proof.section("a value that cannot be stored is refused"):
        try:
            await opaque(ORDER)
            refused_outside = "no error"
        except IdempotencyError as exc:
            refused_outside = f"IdempotencyError: {exc}"
        proof.say(f"outside a run → {refused_outside[:110]}")
        proof.check(refused_outside.startswith("IdempotencyError"), "outside a run: IdempotencyError")
        mark = len(events("model"))
        ref = await system.spawn(
            AGENTS["refund-opaque"], f"Refund order {ORDER} for 20", execution_id="opaque-1"
        )
        result = await ref.result(timeout=30)
        seen = [c["tools_seen"] for c in events("model")[mark:] if c["turn"] == 1]
        told = seen[0][0] if seen and seen[0] else ""
        proof.say(f"in a run: status={result.status}; the model was told: {told[:120]!r} …")
        proof.check(
            result.status == "completed" and result.output == ANSWER,
            "the run went on: a tool error is not a failed run",
        )
        proof.check(
            told.startswith("Tool 'refund' failed: IdempotencyError") and "not JSON" in told,
            "the model read the IdempotencyError as the tool's result",
            told,
        )

    with proof.section("ten identical calls in one step, and a re-run of the step"):
        mark = len(events("model"))
        first, status = await pause_and_resume(system, "refund-burst", "burst-1")
        bodies = [e["charge_id"] for e in events("card", "burst-1") if e["variant"] == "slow"]
        seen = [c["tools_seen"] for c in events("model")[mark:] if c["turn"] == 1]
        told = json.loads(seen[0][0]) if seen and seen[0] else {}
        proof.say(
            f"{first} → {status} · the tool ran {len(events('tool', 'burst-1'))}× · "
            f"charge bodies ran {len(bodies)}× ({len(set(bodies))} distinct charges)"
        )
        proof.check(
            (first, status) == ("paused", "completed"), "the run paused after the ten calls, then completed"
        )
        proof.check(len(bodies) == 10 and len(set(bodies)) == 10, "ten identical calls are ten occurrences")
        proof.check(
            len(events("tool", "burst-1")) == 2, "the step ran twice (first pass, resume)", events("tool")
        )
        proof.check(
            told.get("calls") == 10 and told.get("charge_ids") == sorted(bodies),
            "the re-run ran no body again: each call got its earlier charge back",
            told,
        )


if __name__ == "__main__":
    main(4, __doc__ or "", body)
