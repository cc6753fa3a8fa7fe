"""Proof 5 · between a run that ended and one that died: the ``run_end`` marker.

A completed run refuses a resume with ``AlreadyResumed`` and writes nothing. A run whose model raised
once writes a failed marker and resumes past it without re-running the tool. A fork of a finished run
runs under a new id and leaves every field of the original's rows unchanged; a fork from the marker
raises ``CheckpointError``. Cancelling a paused run removes its pending row and writes a failed marker.
Prune with a zero cutoff deletes the completed runs and keeps every paused, failed and crashed run
resumable: each is then resumed to completion with one charge.

Run: ``python proof_5_run_end.py [--store sqlite|postgres] [--backend asyncio|trio]``; exit status 0
means every claim held.
"""

from __future__ import annotations

from collections.abc import Awaitable
from datetime import timedelta

from _harness import Proof, frozen, history, main, outcome, row_line, shape
from _refund import AGENTS, ANSWER, KNOBS, ORDER, charges, events

from actors import ActorSystem, AlreadyResumed, CheckpointError, Resume, ResumeRequired, RunResult

SMALL = f"Refund order {ORDER} for 20"
LARGE = f"Refund order {ORDER} for 50000"
APPROVE = Resume(approved=True, metadata={"approver": "alice"})


async def attempt(coro: Awaitable[RunResult]) -> RunResult | BaseException:
    """The run's result, or the refusal it raised."""
    try:
        return await coro
    except (AlreadyResumed, CheckpointError) as exc:
        return exc


async def failed_once(system: ActorSystem, run: str) -> RunResult:
    """A small refund whose provider fails once after the tool ran."""
    KNOBS.raise_model_once = True
    try:
        ref = await system.spawn(AGENTS["refund-bot"], SMALL, execution_id=run)
        return await ref.result(timeout=30)
    finally:
        KNOBS.raise_model_once = False


async def body(proof: Proof, system: ActorSystem) -> None:
    bot = AGENTS["refund-bot"]

    with proof.section("a finished run refuses to resume"):
        ref = await system.spawn(bot, SMALL, execution_id="done-1")
        done = await ref.result(timeout=30)
        rows = await history(system, "done-1")
        proof.say(f"status: {done.status} · last row:{row_line(rows[-1])[1:] if rows else None}")
        before = frozen(rows)
        refused = await attempt(system.resume("done-1", timeout=30))
        proof.say(f"resume → {outcome(refused)}: {refused}"[:150])
        refused_too = await attempt(system.resume("done-1", APPROVE, timeout=30))
        proof.say(f"resume with a Resume → {outcome(refused_too)}")
        after = frozen(await history(system, "done-1"))
        proof.check(isinstance(refused, AlreadyResumed), "resume() of a completed run raises AlreadyResumed")
        proof.check(isinstance(refused_too, AlreadyResumed), "so does resume(id, Resume(...))")
        proof.check(
            after == before, f"and nothing was written: {len(before)} rows → {len(after)}, every field equal"
        )
        proof.check(len(charges("done-1")) == 1, "the refund was not charged again")

    with proof.section("a run that raised stays resumable"):
        failed = await failed_once(system, "failed-1")
        rows = await history(system, "failed-1")
        proof.say(f"run raised: status={failed.status} · error={failed.error!r}")
        proof.say(f"last row:{row_line(rows[-1])[1:] if rows else None}")
        proof.check(
            failed.status == "failed" and "503" in (failed.error or ""),
            "the run failed with the provider's error",
        )
        proof.check(
            bool(rows) and (rows[-1].step_type, rows[-1].status) == ("run_end", "failed"),
            "it wrote a failed run_end marker",
        )
        tools_before = len(events("tool", "failed-1"))
        result = await system.resume("failed-1", timeout=30)
        reruns = len(events("tool", "failed-1")) - tools_before
        proof.say(
            f"resume → status: {result.status} · charges: {charges('failed-1')} · tool re-runs: {reruns}"
        )
        proof.rows((await history(system, "failed-1"))[len(rows) :])
        proof.check(
            result.status == "completed" and result.output == ANSWER,
            "resume stepped over the marker and completed",
        )
        proof.check(reruns == 0 and len(charges("failed-1")) == 1, "the tool did not run again: one charge")

    with proof.section("a fork branches a finished run under a new id"):
        original = await history(system, "done-1")
        before = frozen(original)
        fork_ref = await system.fork("done-1")
        forked = await fork_ref.result(timeout=30)
        fork_rows = await history(system, fork_ref.execution_id)
        after = frozen(await history(system, "done-1"))
        proof.say(
            f"fork → new id: {fork_ref.execution_id != 'done-1'} status={forked.status} · "
            f"original rows: {len(before)} → {len(after)}"
        )
        proof.rows(fork_rows)
        proof.check(fork_ref.execution_id != "done-1", "the fork has a new execution_id")
        proof.check(forked.status == "completed" and forked.output == ANSWER, "the fork ran to completion")
        proof.check(after == before, "the original's rows are unchanged, every field")
        ids = {r.checkpoint_id for r in original}
        proof.check(
            bool(fork_rows)
            and fork_rows[0].step_type == "fork_origin"
            and fork_rows[0].parent_checkpoint_id in ids,
            "the fork's first row is fork_origin, pointing at a checkpoint of the original",
        )
        proof.check(
            all(r.execution_id == fork_ref.execution_id for r in fork_rows),
            "every fork row is under the new id",
        )

        marker = [r for r in original if r.step_type == "run_end"]
        try:
            marker_ref = await system.fork(
                "done-1", checkpoint_id=marker[0].checkpoint_id if marker else None
            )
            refused_fork: RunResult | BaseException = await attempt(marker_ref.result(timeout=30))
            where = "from result()"
        except CheckpointError as exc:
            refused_fork, where = exc, "from fork()"
        proof.say(f"fork from the marker → {outcome(refused_fork)} ({where}): {refused_fork}"[:160])
        proof.check(
            isinstance(refused_fork, CheckpointError), "fork from the run_end marker raises CheckpointError"
        )
        proof.check(frozen(await history(system, "done-1")) == before, "the original is still unchanged")

    with proof.section("cancel a paused run"):
        ref = await system.spawn(bot, LARGE, execution_id="cancel-1")
        paused = await ref.result(timeout=30)
        pending_before = [p.execution_id for p in await system.pending() if p.execution_id == "cancel-1"]
        await system.cancel("cancel-1", reason="cancelled")
        pending_after = [p.execution_id for p in await system.pending() if p.execution_id == "cancel-1"]
        rows = await history(system, "cancel-1")
        proof.say(
            f"status: {paused.status} · pending before: {pending_before} · after cancel: {pending_after}"
        )
        proof.rows(rows)
        last = rows[-1] if rows else None
        proof.check(
            paused.status == "paused" and pending_before == ["cancel-1"], "the run was paused and pending"
        )
        proof.check(pending_after == [], "cancel removed its pending row")
        proof.check(
            last is not None
            and (last.step_type, last.status) == ("run_end", "failed")
            and "cancelled" in repr(last),
            "cancel wrote a failed run_end marker with the reason cancelled",
            repr(last),
        )
        proof.check(
            shape(rows[:-1])
            == [
                ("turn:0", "llm_call", "completed"),
                ("turn:0/tool:refund", "tool_call", "completed"),
                ("turn:0/tool:refund", "hitl_pause", "interrupted"),
            ],
            "the rows before the marker are untouched",
        )
        proof.check(charges("cancel-1") == [], "nothing was charged")
        # Rule 11: a cancelled run can be resumed like any failed run. Past its marker it re-enters the
        # pause, which needs a decision again (a new pause, or ResumeRequired); approving finishes it.
        try:
            again: RunResult | BaseException = await system.resume("cancel-1", timeout=30)
        except ResumeRequired as exc:
            again = exc
        finished = await attempt(system.resume("cancel-1", APPROVE, timeout=30))
        proof.say(
            f"resume after cancel → {outcome(again)}; with a Resume → {outcome(finished)} · "
            f"charges {charges('cancel-1')}"
        )
        proof.check(
            outcome(again) in ("paused", "ResumeRequired")
            and outcome(finished) == "completed"
            and len(charges("cancel-1")) == 1,
            "the cancelled run resumes like a failed one: it asks for the decision again, then completes, one charge",
        )

    with proof.section("prune keeps every pause, every failed and every crashed run resumable"):
        ref = await system.spawn(bot, LARGE, execution_id="prune-paused")
        paused = await ref.result(timeout=30)
        failed = await failed_once(system, "prune-failed")
        child = proof.run_child("spawn", "prune-crashed", input=SMALL, crash="tool")
        ref = await system.spawn(bot, SMALL, execution_id="prune-done")
        done = await ref.result(timeout=30)
        proof.check(
            (paused.status, failed.status, child.code, done.status) == ("paused", "failed", 2, "completed"),
            "set up: one paused, one failed, one crashed (child exit 2), one completed run",
            child.tail(),
        )
        runs = ["done-1", "failed-1", "prune-paused", "prune-failed", "prune-crashed", "prune-done"]
        counts = {run: len(await history(system, run)) for run in runs}
        deleted = await system.prune(timedelta(0))
        left = {run: len(await history(system, run)) for run in runs}
        stored = [run for run in runs if left[run]]
        pending = sorted(p.execution_id for p in await system.pending())
        proof.say(f"rows before: {counts}")
        proof.say(
            f"prune(older_than=0s) deleted {deleted} rows · still stored: {stored} · pending: {pending}"
        )
        proof.check(deleted > 0, "prune deleted rows")
        proof.check(
            left["done-1"] == 0 and left["failed-1"] == 0 and left["prune-done"] == 0,
            "every row of the completed runs is gone",
            left,
        )
        proof.check(
            all(left[r] > 0 for r in ("prune-paused", "prune-failed", "prune-crashed")),
            "the paused, failed and crashed runs still have rows",
            left,
        )
        proof.check("prune-paused" in pending, "the pending row of the pause survived")

        resumed = await attempt(system.resume("prune-paused", APPROVE, timeout=30))
        proof.say(
            f"resume prune-paused with a Resume → {outcome(resumed)} · charges {charges('prune-paused')}"
        )
        proof.check(
            outcome(resumed) == "completed" and len(charges("prune-paused")) == 1,
            "the pause resumed to completion, one charge",
        )
        tools = len(events("tool", "prune-failed"))
        resumed = await attempt(system.resume("prune-failed", timeout=30))
        reran = len(events("tool", "prune-failed")) - tools
        proof.say(
            f"resume prune-failed  → {outcome(resumed)} · charges {charges('prune-failed')} · tool re-runs {reran}"
        )
        proof.check(
            outcome(resumed) == "completed" and len(charges("prune-failed")) == 1 and reran == 0,
            "the failed run resumed past its marker, one charge, the tool not re-run",
        )
        resumed = await attempt(system.resume("prune-crashed", timeout=30))
        proof.say(f"resume prune-crashed → {outcome(resumed)} · charges {charges('prune-crashed')}")
        proof.check(
            outcome(resumed) == "completed" and charges("prune-crashed") == [{"order": ORDER, "amount": 20}],
            "the crashed run recovered (the tool re-ran with its arguments), one charge",
        )


if __name__ == "__main__":
    main(5, __doc__ or "", body)
