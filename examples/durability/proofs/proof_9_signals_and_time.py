"""Proof 9 · signals and durable time: a run waits, is signalled from another process, sleeps, is
killed while asleep and is woken by a worker started afterwards.

Real processes, each with its own store and ``ActorSystem``:

- this process spawns a courier run whose tool waits for the signal ``address``: the run rests
  (a ``wait`` row, no pending row, no task), ``pending()`` does not list it;
- a worker process serves (``system.serve``); a sender process with no runner sends the signal; the
  worker wakes the run, whose tool consumes the signal (a ``signal`` row) and sleeps 2 s (a ``wait``
  row with its wake time);
- the worker is killed with SIGKILL while the run sleeps; a second worker, started afterwards, wakes
  it at its time (a ``wake`` row) and the run completes: the code after the sleep ran once, the
  signal was consumed once.

Run: ``python proof_9_signals_and_time.py [--store sqlite|postgres] [--backend asyncio|trio]``;
exit status 0 means every claim held.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import anyio
from _harness import Config, Proof, history, main, shape

from actors import ActorSystem, Agent, current_run, sleep, tool, wait_signal
from actors.models import FunctionModel, Message, ModelReply, ToolCall
from stores import PostgresStore, SQLiteStore, Store

RUN = "courier-1"
#: How long the tool sleeps, and how late a worker may wake it (seconds).
NAP = 2.0
LATE = 1.5


def courier(ledger: str) -> Agent:
    """One ``deliver`` call: wait for the address, sleep, then deliver (recorded, fsynced)."""

    @tool
    async def deliver(parcel: str) -> str:
        """Deliver a parcel once its address comes, after a nap."""
        address = await wait_signal("address")
        assert address is not None
        await sleep(NAP)
        info = current_run()
        line = json.dumps({"run": info.execution_id if info else None, "at": time.time(), "pid": os.getpid()})
        fd = os.open(ledger, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, (line + "\n").encode())
            os.fsync(fd)
        finally:
            os.close(fd)
        return f"{parcel} delivered to {address.payload}"

    def model(messages: list[Message]) -> str | ModelReply:
        if messages[-1].role == "tool":
            return f"done: {messages[-1].content}"
        return ModelReply(tool_calls=[ToolCall("deliver", {"parcel": "parcel 7"})])

    return Agent("courier", FunctionModel(model), tools=[deliver])


def _store(store: str, db: str, dsn: str, schema: str) -> Store:
    return SQLiteStore(db) if store == "sqlite" else PostgresStore(dsn, schema=schema)


async def _worker(store: str, db: str, dsn: str, schema: str, ledger: str) -> None:
    async with ActorSystem(_store(store, db, dsn, schema), runners=[courier(ledger)]) as system:
        print(json.dumps({"ready": True, "pid": os.getpid()}), flush=True)
        await system.serve(poll=0.2)


async def _sender(store: str, db: str, dsn: str, schema: str, name: str, payload: str) -> None:
    async with ActorSystem(_store(store, db, dsn, schema)) as system:  # no runner
        await system.signal(RUN, name, json.loads(payload))
    print(json.dumps({"sent": name, "pid": os.getpid()}), flush=True)


def _start_worker(cfg: Config) -> subprocess.Popen[str]:
    ledger = os.path.join(cfg.workdir, "delivered.jsonl")
    argv = [sys.executable, cfg.script, "--worker", cfg.store, cfg.db, cfg.dsn, cfg.schema, ledger]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    first = proc.stdout.readline()
    if not first:
        raise RuntimeError(f"the worker did not start: {proc.stderr.read() if proc.stderr else ''}")
    return proc


def _kill(proc: subprocess.Popen[str]) -> int:
    proc.send_signal(signal.SIGKILL)
    return proc.wait(timeout=30)


async def _until(system: ActorSystem, status: str, *, timeout: float = 30.0, woken: bool = False) -> None:
    with anyio.fail_after(timeout):
        while True:
            summary = await system.status(RUN)
            if summary.status == status and (not woken or summary.wake_at is not None):
                return
            await anyio.sleep(0.02)


async def body(proof: Proof, _: ActorSystem) -> None:
    cfg = proof.cfg
    ledger = os.path.join(cfg.workdir, "delivered.jsonl")
    agent = courier(ledger)
    store = cfg.open_store()
    await store.setup()
    async with store, ActorSystem(store, runners=[agent]) as system:
        with proof.section("the tool waits for a signal: the run rests"):
            result = await (await system.spawn(agent, "deliver parcel 7", execution_id=RUN)).result()
            rows = await history(system, RUN)
            proof.rows(rows)
            summary = await system.status(RUN)
            proof.say(
                f"status: {result.status} · wake_at: {summary.wake_at} · pending: {await system.pending()}"
            )
            proof.check(result.status == "waiting" and summary.status == "waiting", "the run is waiting")
            proof.check(rows[-1].step_type == "wait" and rows[-1].interrupt_reason == "signal:address",
                        "its newest row is the wait, for the signal address")  # fmt: skip
            proof.check(await system.pending() == [], "pending() does not list it (a wait is no approval)")
            proof.check(system.runtime.lookup(RUN) is None, "no actor and no task hold it")

        with proof.section("signalled from another process, woken by a worker, then asleep"):
            worker = _start_worker(cfg)
            with anyio.fail_after(90):
                sent = await anyio.run_process(
                    [sys.executable, cfg.script, "--sender", cfg.store, cfg.db, cfg.dsn, cfg.schema, "address",
                     json.dumps("12 Harbour Street")],
                    check=False,
                )  # fmt: skip
            proof.say(f"sender exit code: {sent.returncode}")
            proof.check(
                sent.returncode == 0, "a process without the runner sent the signal", sent.stderr[-800:]
            )
            await _until(system, "waiting", woken=True)
            rows = await history(system, RUN)
            proof.rows(rows[3:])
            due = (await system.status(RUN)).wake_at
            proof.check(
                shape(rows)[3:] == [("turn:0/tool:deliver", "signal", "completed"),
                                    ("turn:0/tool:deliver", "wait", "interrupted")],
                "the signal was consumed by a signal row, then the tool sleeps (a wait row with its time)",
            )  # fmt: skip
            proof.check(rows[3].node_input.get("payload") == "12 Harbour Street", "the signal row holds it")
            code = _kill(worker)  # every process that ran the run is gone while it sleeps
            proof.say(f"worker killed while the run sleeps: exit code {code}")
            proof.check(code == -signal.SIGKILL, "the worker died by SIGKILL")

        with proof.section("a worker started afterwards wakes it at its time, once"):
            second = _start_worker(cfg)
            ready = time.time()  # a loaded machine may start the worker after the run's time
            try:
                await _until(system, "completed", timeout=60)
                await anyio.sleep(0.5)
            finally:
                _kill(second)
            rows = await history(system, RUN)
            proof.rows(rows[5:])
            delivered = [json.loads(line) for line in (await anyio.Path(ledger).read_text()).splitlines()]
            late = delivered[0]["at"] - max(due.timestamp(), ready) if delivered and due else None
            proof.say(f"deliveries: {len(delivered)}")
            proof.check(
                [kind for _, kind, _ in shape(rows)[5:]] == ["wake", "llm_call", "run_end"],
                "one wake row, then the model's turn and the run's end",
            )
            proof.check(len(delivered) == 1, "the code after the sleep ran once", delivered)
            proof.check(
                late is not None and -0.05 <= late <= LATE,
                f"woken within {LATE} s of its time (or of the worker's start, if later)",
                late,
            )
            result = await system.ref(RUN).result()
            proof.say(f"status: {result.status} · output: {result.output!r}")
            proof.check(result.output == "done: parcel 7 delivered to 12 Harbour Street", "the run completed")
            proof.check(await store.signals(RUN) == [], "no signal is left unconsumed")
            proof.say(f"rows: {' '.join(kind for _, kind, _ in shape(rows))}")


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        anyio.run(_worker, *sys.argv[2:7])
    elif len(sys.argv) > 1 and sys.argv[1] == "--sender":
        anyio.run(_sender, *sys.argv[2:8])
    else:
        main(9, __doc__ or "", body)
