"""What replication costs: rows/s shipped to the reference plane, and the step rate with and without it.

    python -m benchmarks.replication [--rows 4000] [--runs 640] [--concurrency 64] [--rounds 5] [--tiny]

On loopback: the reference plane (``tether plane serve``, in a process of its own as a remote plane
would be, storing into SQLite) and the local SQLite store (WAL, ``synchronous=FULL``), a fresh file
per measurement.

* throughput: ``--rows`` rows of small refunds (4 rows a run) are written first, then a
  :class:`~replication.Replicator` is attached and the clock runs until the outbox is empty; the
  rows are then read back from the plane and compared with the local ones. Shown beside the rate
  at which the same rows were written locally (``ratio`` = shipped / written).
* step rate: ``--runs`` small refunds, ``--concurrency`` in flight, with no replicator, with one
  connected to the reference plane (each commit kicks it; it drains while the runs go on), and with
  one connected to a null plane that accepts every POST without storing it (also a process of its
  own), interleaved over ``--rounds`` rounds, medians. The null plane isolates the replicator's own
  cost on the run (reading the outbox, encoding, POSTing, marking rows synced): on one machine the
  reference plane's own work (a store write per row) competes with the run for the same cores and
  disk, which a remote plane would not. Target: with a replicator on the null plane at least 0.90x
  the rate without.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import anyio
import httpx

from actors import ActorSystem
from benchmarks._common import Target, interleaved, median, print_targets
from replication import Replicator
from stores import SQLiteStore, open_store
from tether.lowlevel import RefundBot

PROMPT = "Refund order 1042 for 20"
KEY = "bench-key"


def serve_null(port: int) -> None:
    """A plane that accepts every POST without storing it: what is left of the cost is the
    replicator's own (read the outbox, encode, POST, mark synced)."""
    import uvicorn
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import Response
    from starlette.routing import Route

    async def ingest(request: Request) -> Response:
        await request.body()
        return Response(b'{"accepted": 0, "rejections": []}', media_type="application/json")

    async def healthz(request: Request) -> Response:
        return Response(b'{"ok": true}', media_type="application/json")

    routes = [Route("/public/v1/checkpoints/ingest", ingest, methods=["POST"]), Route("/healthz", healthz)]
    uvicorn.run(Starlette(routes=routes), host="127.0.0.1", port=port, log_level="warning")


@contextmanager
def plane(workdir: Path, *, null: bool = False) -> Iterator[tuple[str, str]]:
    """The reference plane in a process of its own (``tether plane serve``), as a remote plane
    would be (or the null plane); yields its URL and its tenant's store URL."""
    from replication.plane import tenant_store_url

    base = f"sqlite:///{workdir / 'plane.db'}"
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    if null:
        command = [sys.executable, "-m", "benchmarks.replication", "--serve-null", str(port)]
    else:
        command = [sys.executable, "-m", "tether", "plane", "serve", "--store", base, "--port", str(port)]
        command += ["--api-key", f"{KEY}=bench"]
    child = subprocess.Popen(command, stderr=subprocess.PIPE)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline or child.poll() is not None:
                raise RuntimeError(f"the plane did not start: {child.stderr.read() if child.stderr else ''}")
            time.sleep(0.05)
        yield url, tenant_store_url(base, "bench")
    finally:
        child.send_signal(signal.SIGINT)
        try:
            child.wait(10)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait(5)


async def refunds(system: ActorSystem, agent: object, runs: int, concurrency: int, tag: str) -> float:
    """``runs`` small refunds, ``concurrency`` in flight; runs per second."""
    ids = iter(range(runs))

    async def worker() -> None:
        for i in ids:
            ref = await system.spawn(agent, PROMPT, execution_id=f"{tag}-{i}")  # type: ignore[arg-type]
            result = await ref.result(timeout=60)
            if result.status != "completed":
                raise RuntimeError(f"run {tag}-{i} ended {result.status}: {result.error}")

    started = time.perf_counter()
    async with anyio.create_task_group() as tg:
        for _ in range(concurrency):
            tg.start_soon(worker)
    return runs / (time.perf_counter() - started)


async def throughput(url: str, plane_store: str, workdir: Path, rows: int) -> tuple[float, float]:
    """(rows/s written locally, rows/s shipped to the plane), verified against the plane's copy."""
    agent = RefundBot().agent()
    store = SQLiteStore(workdir / "outbox.db")
    runs = rows // 4
    async with ActorSystem(store, runners=[agent]) as system:
        written = await refunds(system, agent, runs, 16, "t") * 4
    warm = SQLiteStore(workdir / "warm.db")  # the plane opens its tenant's store on first use
    async with ActorSystem(warm, runners=[agent], replicator=Replicator(url, KEY)) as system:
        await refunds(system, agent, 1, 1, "warm")
    await warm.close()
    replicator = Replicator(url, KEY)
    started = time.perf_counter()
    async with ActorSystem(store, replicator=replicator):
        while await store.fetch_unsynced(1):  # noqa: ASYNC110 (the replicator's work)
            await anyio.sleep(0.005)
        shipped = runs * 4 / (time.perf_counter() - started)
    remote = open_store(plane_store)
    try:
        for i in range(runs):
            if await remote.history(f"t-{i}") != await store.history(f"t-{i}"):
                raise RuntimeError(f"run t-{i} differs at the plane")
    finally:
        await remote.close()
        await store.close()
    return written, shipped


async def main(args: argparse.Namespace) -> int:
    with (
        tempfile.TemporaryDirectory() as tmp,
        plane(Path(tmp)) as (url, plane_store),
        plane(Path(tmp) / "null", null=True) as (null_url, _),
    ):
        workdir = Path(tmp)
        written, shipped = await throughput(url, plane_store, workdir, args.rows)
        agent = RefundBot().agent()
        counter = iter(range(1_000_000))

        async def measure(target: str | None) -> float:
            n = next(counter)
            store = SQLiteStore(workdir / f"steps-{n}.db")
            replicator = Replicator(target, KEY) if target is not None else None
            try:
                async with ActorSystem(store, runners=[agent], replicator=replicator) as system:
                    rate = await refunds(system, agent, args.runs, args.concurrency, f"s{n}")
                    if replicator is not None:
                        await replicator.drain(timeout=120)
                        if await store.fetch_unsynced(1):
                            raise RuntimeError("rows were left unsent")
                return rate * 4  # steps (rows) per second
            finally:
                await store.close()

        async def plain() -> float:
            return await measure(None)

        async def connected() -> float:
            return await measure(url)

        async def null() -> float:
            return await measure(null_url)

        samples = await interleaved(args.rounds, {"plain": plain, "connected": connected, "null": null})
    print(f"replication to the reference plane on loopback (SQLite both sides, {args.rows} rows)")
    print(
        f"rows/s shipped end to end: {shipped:,.0f} (written locally: {written:,.0f}/s, {shipped / written:.2f}x)"
    )
    ok = print_targets(
        f"step rate, {args.runs} small refunds x {args.rounds} rounds, {args.concurrency} in flight (steps/s)",
        [
            Target(
                f"{args.concurrency} concurrent refunds",
                median(samples["null"]),
                median(samples["plain"]),
                0.90,
                "the replicator's own cost: a plane that stores nothing",
            ),
            Target(
                f"{args.concurrency} refunds, reference plane",
                median(samples["connected"]),
                median(samples["plain"]),
                None,
                "the plane's work shares this machine",
            ),
        ],
        ours="replicated",
        base="plain",
    )
    for name, label in (("plain", "no replicator"), ("null", "null plane"), ("connected", "reference plane")):
        print(f"samples, {label} (steps/s): " + ", ".join(f"{v:,.0f}" for v in samples[name]))
    print("every run completed; every row reached the plane as it was written")
    return 0 if ok or args.tiny else 1


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=4000)
    parser.add_argument("--runs", type=int, default=640)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--tiny", action="store_true", help="a smoke test: tiny sizes, no target check")
    parser.add_argument("--serve-null", type=int, metavar="PORT", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.tiny:
        args.rows, args.runs, args.concurrency, args.rounds = 40, 16, 4, 1
    return args


if __name__ == "__main__":
    arguments = parse()
    if arguments.serve_null is not None:
        serve_null(arguments.serve_null)
    else:
        sys.exit(asyncio.run(main(arguments)))
