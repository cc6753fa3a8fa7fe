"""Proof 8 · a Supervisor -> Swarm -> Agent run paused deep inside, resumed from another process.

A child process runs ``examples/topologies/support_desk.py``'s ``ops`` topology until billing's
``refund`` tool pauses and exits. This process prints the rows of the nested paused run and its one
pending row (naming the deep tool). A second child process resumes it with a ``Resume``; this one
prints the rows after it and the per-agent counters of model calls and tool runs (a ledger file the
children append to): every model call and tool ran once, but the paused tool, which ran twice (its
pass that paused, and its pass with the decision); the charge inside it ran once.

Run: ``python proof_8_topologies.py [--db PATH] [--dsn DSN --schema NAME] [--backend asyncio|trio]``;
exit status 0 means every claim held. Without ``--dsn`` the store is a scratch SQLite file.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "topologies"))

from support_desk import TASK, build

from actors import ActorSystem, Resume, TetherError
from stores import Checkpoint, PostgresStore, SQLiteStore, Store

DEEP = "supervisor:ops/worker:support/agent:billing/tool:refund"
CHILD_TIMEOUT = 90.0
EXPECTED = Counter(
    {
        "model boss": 2,
        "model triage": 1,
        "model billing": 2,
        "tool lookup": 1,
        "tool refund": 2,
        "charge": 1,
    }
)


def open_store(args: argparse.Namespace) -> Store:
    return PostgresStore(args.dsn, schema=args.schema) if args.dsn else SQLiteStore(args.db)


def row_line(row: Checkpoint) -> str:
    return f"  #{row.seq:<3} {row.agent_path or '':<64} {row.node_id:<32} {row.step_type:<10} {row.status}"


async def child(args: argparse.Namespace) -> None:
    """A child process: spawn the run (it pauses) or resume it; one JSON line with the outcome."""

    def count(what: str) -> None:
        with open(args.ledger, "a") as ledger:
            ledger.write(what + "\n")

    ops = build(count)
    async with open_store(args) as store, ActorSystem(store, runners=[ops]) as system:
        try:
            if args.child == "spawn":
                result = await (await system.spawn(ops, TASK, execution_id="ops-8")).result(timeout=60)
            else:
                decision = Resume(approved=True, metadata={"approver": "alice"})
                result = await system.resume("ops-8", decision, timeout=60)
        except TetherError as error:
            print(json.dumps({"pid": os.getpid(), "status": type(error).__name__}), flush=True)
            return
        pending = result.pending.agent_path if result.pending else None
        line = {"pid": os.getpid(), "status": result.status, "output": result.output, "pending": pending}
        print(json.dumps(line), flush=True)


def run_child(args: argparse.Namespace, mode: str) -> dict[str, object]:
    command = [sys.executable, __file__, "--child", mode, "--db", str(args.db), "--ledger", str(args.ledger)]
    command += ["--backend", args.backend]
    if args.dsn:
        command += ["--dsn", args.dsn, "--schema", args.schema]
    done = subprocess.run(command, capture_output=True, text=True, timeout=CHILD_TIMEOUT, check=False)
    if done.returncode != 0:
        return {"status": f"exit {done.returncode}", "stderr": done.stderr[-1500:]}
    report: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return report


async def parent(args: argparse.Namespace) -> int:
    failures: list[str] = []

    def check(ok: bool, claim: str) -> None:
        print(f"  {'✓' if ok else '✗ FAILED'} {claim}")
        if not ok:
            failures.append(claim)

    print("── process A runs ops until a tool three levels down pauses")
    paused = await anyio.to_thread.run_sync(run_child, args, "spawn")
    print(f"child pid={paused.get('pid')} status={paused.get('status')} pending={paused.get('pending')}")
    check(
        paused.get("status") == "paused" and paused.get("pending") == DEEP, "the run paused at the deep tool"
    )
    async with open_store(args) as store:
        rows = await store.history("ops-8")
        pending = await store.pending("ops-8")
    print("\n── the rows of the nested paused run (one seq order for every level)")
    for row in rows:
        print(row_line(row))
    print(f"pending rows: {[(p.agent_path, p.node_id, p.reason) for p in pending]}")
    check([r.seq for r in rows] == list(range(len(rows))), "one seq order for the whole topology")
    check(len(pending) == 1 and pending[0].agent_path == DEEP, "one pending row, naming the deep tool")
    check(rows[-1].step_type == "hitl_pause" and rows[-1].agent_path == DEEP, "the newest row is the pause")
    check("run_end" not in [r.step_type for r in rows], "a paused run has no run_end")

    print("\n── process B resumes it with Resume(approved=True, metadata={'approver': 'alice'})")
    done = await anyio.to_thread.run_sync(run_child, args, "resume")
    print(f"child pid={done.get('pid')} status={done.get('status')} output={done.get('output')!r}")
    check(done.get("status") == "completed", "the other process finished the run")
    check(done.get("pid") != paused.get("pid"), "in another process than the one that paused")
    again = await anyio.to_thread.run_sync(run_child, args, "resume")
    print(f"a second resume: {again.get('status')}")
    check(again.get("status") == "AlreadyResumed", "a second resume is refused")
    async with open_store(args) as store:
        after = await store.history("ops-8")
    for row in after[len(rows) :]:
        print(row_line(row))
    resumes = [r for r in after if r.step_type == "resume"]
    check(len(resumes) == 1 and resumes[0].agent_path == DEEP, "one resume row, at the deep tool")

    print("\n── per-agent counters (model calls and tool runs, from both processes)")
    counts = Counter((await anyio.to_thread.run_sync(Path(args.ledger).read_text)).splitlines())
    for key in sorted(counts):
        print(f"  {key:<16} {counts[key]}")
    check(counts == EXPECTED, "nothing that completed ran again; the paused tool ran twice, its charge once")
    print("\nproof 8:", "every claim held" if not failures else f"{len(failures)} claim(s) FAILED")
    return 1 if failures else 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", type=Path)
    parser.add_argument("--dsn", default="")
    parser.add_argument("--schema", default="")
    parser.add_argument("--ledger", type=Path)
    parser.add_argument("--child", choices=["spawn", "resume"])
    parser.add_argument(
        "--backend", choices=["asyncio", "trio"], default="asyncio", help="anyio's event loop"
    )
    args = parser.parse_args()
    if args.child:
        anyio.run(child, args, backend=args.backend)
        return
    with tempfile.TemporaryDirectory(prefix="proof-8-") as tmp:
        args.db = args.db or Path(tmp) / "proof8.db"
        args.ledger = Path(tmp) / "ledger"
        sys.exit(anyio.run(parent, args, backend=args.backend))


if __name__ == "__main__":
    main()
