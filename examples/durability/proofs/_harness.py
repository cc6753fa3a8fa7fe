"""Plumbing shared by the boundary proofs: the ``--store`` flag, scratch stores, claim checks, rows, children.

A proof script calls :func:`main` with its body. ``--store sqlite`` (default) uses a scratch file in a
temporary directory (or ``--db PATH``); ``--store postgres`` uses ``--dsn`` and a fresh schema
``proof_<uuid hex>`` that is dropped at the end. Every claim goes through :meth:`Proof.check`; a
claim that does not hold prints ``✗ FAILED`` and the script exits 1, so running the script is the proof.

The same script started with ``--child MODE`` is a child process (a real ``sys.executable``
subprocess): it opens its own store and ``ActorSystem``, spawns or resumes one run, prints one JSON
line with its outcome and exits, or dies by ``os._exit`` at a crash point of :mod:`_refund`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import _refund
import anyio
import asyncpg
import msgspec

from actors import ActorSystem, Resume, RunResult, TetherError
from stores import Checkpoint, PostgresStore, SQLiteStore, Store

DEFAULT_DSN = os.environ.get("TETHER_PG_DSN", "postgresql://postgres@127.0.0.1:5432/test")
CHILD_TIMEOUT = 90.0
RESULT_TIMEOUT = 30.0


@dataclass(frozen=True)
class Config:
    """Where the proof's store lives and where its scratch files go."""

    store: str
    db: str
    dsn: str
    schema: str
    workdir: str
    ledger: str
    script: str
    backend: str = "asyncio"

    def store_args(self) -> list[str]:
        return [
            "--store", self.store, "--db", self.db, "--dsn", self.dsn, "--schema", self.schema,
            "--workdir", self.workdir, "--ledger", self.ledger, "--backend", self.backend,
        ]  # fmt: skip

    def open_store(self) -> Store:
        """A new (not yet set up) store instance on the proof's database."""
        if self.store == "sqlite":
            return SQLiteStore(self.db)
        return PostgresStore(self.dsn, schema=self.schema)


def _parser(description: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--store", choices=["sqlite", "postgres"], default="sqlite")
    p.add_argument("--backend", choices=["asyncio", "trio"], default="asyncio", help="anyio's event loop")
    p.add_argument("--db", help="SQLite file (default: a scratch file in a temporary directory)")
    p.add_argument("--dsn", default=DEFAULT_DSN, help="PostgreSQL DSN")
    p.add_argument(
        "--schema", help="PostgreSQL schema (default: a fresh proof_<uuid hex>, dropped at the end)"
    )
    # Child processes only.
    p.add_argument("--child", choices=["spawn", "resume"], help=argparse.SUPPRESS)
    p.add_argument("--workdir", help=argparse.SUPPRESS)
    p.add_argument("--ledger", help=argparse.SUPPRESS)
    p.add_argument("--run", help=argparse.SUPPRESS)
    p.add_argument("--agent", default="refund-bot", help=argparse.SUPPRESS)
    p.add_argument("--input", help=argparse.SUPPRESS)
    p.add_argument("--crash", choices=["tool", "model", "after_claim", "block"], help=argparse.SUPPRESS)
    p.add_argument("--decision", choices=["approve", "deny"], help=argparse.SUPPRESS)
    p.add_argument("--approver", default="alice", help=argparse.SUPPRESS)
    p.add_argument("--ready", help=argparse.SUPPRESS)
    p.add_argument("--go", help=argparse.SUPPRESS)
    return p


# -- rows -----------------------------------------------------------------------------------------------


def row_line(row: Checkpoint) -> str:
    """One row as the reference prints it (``#`` is our ``seq``), plus what a bookkeeping row decided."""
    line = f"  #{row.seq:<2} {row.node_id:<22} step={row.step_type:<10} status={row.status}"
    if row.step_type == "resume" and isinstance(row.node_input.get("resume"), dict):
        decision = row.node_input["resume"]
        line += f"  decision=approved:{decision.get('approved')} {decision.get('metadata')}"
    elif row.step_type == "recover" and "reentry_seq" in row.node_input:
        line += f"  re-enters #{row.node_input['reentry_seq']}"
    return line


def shape(rows: Sequence[Checkpoint]) -> list[tuple[str, str, str]]:
    """The rows as ``(node_id, step_type, status)``."""
    return [(r.node_id, r.step_type, r.status) for r in rows]


def frozen(rows: Sequence[Checkpoint]) -> list[Any]:
    """Every field of every row, as builtins: two calls compare equal only if nothing changed."""
    return [msgspec.to_builtins(r) for r in rows]


async def history(system: ActorSystem, execution_id: str) -> list[Checkpoint]:
    """The run's rows; ``[]`` when the store has none (``RunNotFound``)."""
    try:
        return list(await system.history(execution_id))
    except TetherError as exc:
        if type(exc).__name__ == "RunNotFound":
            return []
        raise


def outcome(result: RunResult | BaseException) -> str:
    """``completed`` / ``paused`` / ``failed``, or the error's class name."""
    if isinstance(result, BaseException):
        return type(result).__name__
    return result.status


def short(text: str | None, n: int = 90) -> str:
    text = "" if text is None else str(text)
    return text if len(text) <= n else text[:n] + " …"


# -- the proof ------------------------------------------------------------------------------------------


class Proof:
    """Checks claims and prints them; remembers failures so the script exits 1."""

    def __init__(self, number: int, cfg: Config) -> None:
        self.number = number
        self.cfg = cfg
        self.failures: list[str] = []
        self.checks = 0

    def say(self, text: str = "") -> None:
        print(text, flush=True)

    def check(self, holds: bool, claim: str, *detail: Any) -> bool:
        """Print ``✓ claim`` or ``✗ FAILED: claim`` (with ``detail``); a failure fails the script."""
        self.checks += 1
        if holds:
            self.say(f"  ✓ {claim}")
            return True
        self.failures.append(claim)
        self.say(f"  ✗ FAILED: {claim}")
        for item in detail:
            for line in str(item).splitlines():
                self.say(f"      {line}")
        return False

    def rows(self, rows: Sequence[Checkpoint]) -> None:
        for row in rows:
            self.say(row_line(row))

    @contextmanager
    def section(self, title: str) -> Iterator[None]:
        """A titled part of the proof; an unexpected exception in it is a failed claim, and the next part runs."""
        self.say(f"\n── {title}")
        try:
            yield
        except Exception as exc:  # a proof part that blew up is a claim that did not hold
            self.checks += 1
            self.failures.append(f"{title}: {type(exc).__name__}: {exc}")
            self.say(f"  ✗ FAILED: {title} raised {type(exc).__name__}: {exc}")
            for line in traceback.format_exc().splitlines():
                self.say(f"      {line}")

    @asynccontextmanager
    async def system(self, store: Store | None = None) -> AsyncIterator[ActorSystem]:
        """An ``ActorSystem`` with every refund runner, on ``store`` (default: a new store instance)."""
        own = store is None
        the_store = self.cfg.open_store() if store is None else store
        try:
            await the_store.setup()
            async with ActorSystem(the_store, runners=list(_refund.AGENTS.values())) as system:
                yield system
        finally:
            if own:
                await the_store.close()

    # -- children ---------------------------------------------------------------------------------------

    def child_argv(
        self,
        mode: str,
        run: str,
        *,
        agent: str = "refund-bot",
        input: str | None = None,
        crash: str | None = None,
        decision: str | None = None,
        approver: str = "alice",
        ready: str | None = None,
        go: str | None = None,
    ) -> list[str]:
        argv = [sys.executable, self.cfg.script, "--child", mode, "--run", run, "--agent", agent]
        argv += self.cfg.store_args()
        if input is not None:
            argv += ["--input", input]
        if crash is not None:
            argv += ["--crash", crash]
        if decision is not None:
            argv += ["--decision", decision, "--approver", approver]
        if ready is not None:
            argv += ["--ready", ready]
        if go is not None:
            argv += ["--go", go]
        return argv

    def run_child(self, mode: str, run: str, **kwargs: Any) -> Child:
        """Run one child to its end (bounded by a timeout) and read its report."""
        proc = subprocess.run(
            self.child_argv(mode, run, **kwargs), capture_output=True, text=True, timeout=CHILD_TIMEOUT
        )
        return Child.read(proc.returncode, proc.stdout, proc.stderr)

    def start_child(self, mode: str, run: str, **kwargs: Any) -> subprocess.Popen[str]:
        return subprocess.Popen(
            self.child_argv(mode, run, **kwargs), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )

    def race(self, n: int, mode: str, run: str, **kwargs: Any) -> list[Child]:
        """Start ``n`` children, wait until each has its store open, let them all go at once, collect them."""
        tag = uuid.uuid4().hex[:8]
        go = os.path.join(self.cfg.workdir, f"go-{tag}")
        ready = [os.path.join(self.cfg.workdir, f"ready-{tag}-{i}") for i in range(n)]
        procs = [self.start_child(mode, run, ready=ready[i], go=go, **kwargs) for i in range(n)]
        try:
            deadline = time.monotonic() + CHILD_TIMEOUT
            while not all(os.path.exists(r) for r in ready):
                if time.monotonic() > deadline or any(p.poll() is not None for p in procs):
                    break
                time.sleep(0.005)
            Path(go).touch()
            children = []
            for p in procs:
                out, err = p.communicate(timeout=CHILD_TIMEOUT)
                children.append(Child.read(p.returncode, out, err))
            return children
        finally:
            for p in procs:
                if p.poll() is None:
                    p.kill()
                    p.wait(timeout=10)


@dataclass
class Child:
    """What a child process did: its exit code and its JSON report (none when it was killed)."""

    code: int
    report: dict[str, Any]
    stderr: str

    @classmethod
    def read(cls, code: int, stdout: str, stderr: str) -> Child:
        report: dict[str, Any] = {}
        for line in reversed(stdout.splitlines()):
            if line.startswith("{"):
                report = json.loads(line)
                break
        return cls(code, report, stderr)

    @property
    def outcome(self) -> str:
        return str(self.report.get("outcome", f"exit {self.code}"))

    @property
    def pid(self) -> int:
        return int(self.report.get("pid", 0))

    def tail(self) -> str:
        return "\n".join(self.stderr.strip().splitlines()[-15:])


def touch(path: str) -> None:
    """Create ``path`` (a signal file between processes)."""
    Path(path).touch()


def exists(path: str) -> bool:
    return os.path.exists(path)


def wait_for_file(path: str, proc: subprocess.Popen[str], timeout: float = CHILD_TIMEOUT) -> bool:
    """Wait (blocking) until ``path`` exists or ``proc`` ended; whether it exists."""
    deadline = time.monotonic() + timeout
    while not exists(path) and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    return exists(path)


async def _wait_for(path: str, timeout: float = CHILD_TIMEOUT) -> None:
    deadline = time.monotonic() + timeout
    while not exists(path):
        if time.monotonic() > deadline:
            raise TimeoutError(f"no go signal at {path}")
        await anyio.sleep(0.002)


async def _child(ns: argparse.Namespace, cfg: Config) -> int:
    """One child process: spawn or resume a run, print a JSON report. Crash points exit via ``os._exit``."""
    _refund.KNOBS.crash = ns.crash
    if ns.crash == "block":
        _refund.KNOBS.ready_file = os.path.join(cfg.workdir, f"blocked-{ns.run}")
    report: dict[str, Any] = {"pid": os.getpid()}
    store = cfg.open_store()
    try:
        await store.setup()
        async with ActorSystem(store, runners=list(_refund.AGENTS.values())) as system:
            if ns.ready:
                touch(ns.ready)
                await _wait_for(ns.go)
            try:
                if ns.child == "spawn":
                    ref = await system.spawn(_refund.AGENTS[ns.agent], ns.input, execution_id=ns.run)
                    result = await ref.result(timeout=RESULT_TIMEOUT)
                else:
                    resume = None
                    if ns.decision is not None:
                        resume = Resume(approved=ns.decision == "approve", metadata={"approver": ns.approver})
                    result = await system.resume(ns.run, resume, timeout=RESULT_TIMEOUT)
                report["outcome"] = result.status
                report["result"] = msgspec.to_builtins(result)
            except TetherError as exc:
                report["outcome"] = type(exc).__name__
                report["error"] = str(exc)
            if _refund.KNOBS.contexts:
                report["context_object"] = _refund.KNOBS.contexts[-1]
    finally:
        await store.close()
    print(json.dumps(report), flush=True)
    return 0


async def _drop_schema(dsn: str, schema: str) -> None:
    # asyncpg runs only on asyncio: under any backend, the drop gets a loop of its own in a worker thread.
    await anyio.to_thread.run_sync(asyncio.run, _drop_schema_now(dsn, schema))


async def _drop_schema_now(dsn: str, schema: str) -> None:
    conn = await asyncpg.connect(dsn, timeout=10)
    try:
        await conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
    finally:
        await conn.close()


async def _parent(number: int, cfg: Config, body: Callable[[Proof, ActorSystem], Awaitable[None]]) -> int:
    proof = Proof(number, cfg)
    where = cfg.db if cfg.store == "sqlite" else f"{cfg.dsn} schema {cfg.schema}"
    proof.say(f"store: {cfg.store} ({where})")
    try:
        async with proof.system() as system:
            await body(proof, system)
    except Exception as exc:
        proof.failures.append(f"{type(exc).__name__}: {exc}")
        proof.say(f"  ✗ FAILED: the proof raised {type(exc).__name__}: {exc}")
        proof.say(traceback.format_exc())
    finally:
        if cfg.store == "postgres":
            try:
                await _drop_schema(cfg.dsn, cfg.schema)
            except (OSError, asyncpg.PostgresError) as exc:
                proof.say(f"(could not drop schema {cfg.schema}: {exc})")
    proof.say("")
    if proof.failures:
        proof.say(f"PROOF {number} FAILED: {len(proof.failures)} of {proof.checks} claims did not hold")
        for claim in proof.failures:
            proof.say(f"  - {claim}")
        return 1
    proof.say(f"PROOF {number} HOLDS: {proof.checks} claims checked on {cfg.store}")
    return 0


def main(number: int, doc: str, body: Callable[[Proof, ActorSystem], Awaitable[None]]) -> None:
    """Run the proof (or, with ``--child``, one child process of it) and exit with its status."""
    ns = _parser(doc.strip().splitlines()[0]).parse_args()
    script = str(Path(sys.argv[0]).resolve())
    if ns.child:
        cfg = Config(ns.store, ns.db, ns.dsn, ns.schema, ns.workdir, ns.ledger, script, ns.backend)
        _refund.configure(cfg.ledger)
        sys.exit(anyio.run(_child, ns, cfg, backend=ns.backend))
    workdir = tempfile.mkdtemp(prefix=f"tether-proof-{number}-")
    try:
        cfg = Config(
            store=ns.store,
            db=ns.db or os.path.join(workdir, "proof.db"),
            dsn=ns.dsn,
            schema=ns.schema or f"proof_{uuid.uuid4().hex}",
            workdir=workdir,
            ledger=os.path.join(workdir, "ledger.jsonl"),
            script=script,
            backend=ns.backend,
        )
        _refund.configure(cfg.ledger)
        code = anyio.run(_parent, number, cfg, body, backend=ns.backend)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    sys.exit(code)
