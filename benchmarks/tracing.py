"""What tracing costs a run: the step path untraced, with the OpenTelemetry api and no provider, and traced.

    python -m benchmarks.tracing [--runs 300] [--concurrency 16] [--rounds 5] [--tiny]

The small refund of :mod:`benchmarks.step_path` (tether's contender: ``spawn`` then ``result()``,
4 rows a run on SQLite, WAL, ``synchronous=FULL``), measured in three configurations, each in a
fresh child process on a fresh file, interleaved over ``--rounds`` rounds:

* untraced: ``opentelemetry`` is never imported (checked in the child);
* api, no provider: ``opentelemetry.trace`` is imported and no tracer provider is configured, as in
  an application that installed the ``otel`` extra and does not trace: tether looks for a provider
  once per activation and finds the api's proxy, so no span is made and nothing is stored;
* traced: the SDK's ``TracerProvider`` with one span processor that counts the spans that end
  (4 a run: ``invoke_agent``, two ``chat``, one ``execute_tool``; checked) and exports nothing, so
  the figure is tether's instrumentation and the SDK's span objects, not an exporter's I/O.

It prints runs/s and the event-loop thread's CPU per run (``time.thread_time``, which a disk's
fsync does not blur) for each, one after another and with ``--concurrency`` in flight, with the ratio
to the untraced runs; the api without a provider should be within 3% of untraced (noise on a shared
machine can move a single round by more; the medians are what the target reads).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

from benchmarks._common import interleaved, measure_child, median

#: The configurations of the table; the first two also in one process, batch by batch (the A/B).
MODES = ("untraced", "api, no provider", "traced")
#: The api without a provider against untraced runs (the A/B): runs/s and loop CPU within 3%.
TARGET = 0.97
SPANS_PER_RUN = 4
#: Runs a batch of the A/B (the two configurations alternate batch by batch).
BATCH = 20
CHILD_TIMEOUT = 600.0


def _configure(mode: str) -> Callable[[], int]:
    """Set the child up for ``mode``; returns how many spans have ended so far."""
    if mode == "untraced":
        assert "opentelemetry" not in sys.modules, "the untraced child imported opentelemetry"
        return lambda: 0
    from opentelemetry import trace

    if mode in ("api, no provider", "a/b"):
        assert isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider)
        return lambda: 0
    from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider

    ended = [0]

    class Count(SpanProcessor):
        def on_end(self, span: ReadableSpan) -> None:
            ended[0] += 1

    provider = TracerProvider()
    provider.add_span_processor(Count())
    trace.set_tracer_provider(provider)
    return lambda: ended[0]


async def _alternating(runs: int, concurrency: int, tag: str, workdir: Path) -> list[float]:
    """The A/B in this process: batches of :data:`BATCH` runs, alternating between the api hidden
    (``opentelemetry.trace`` taken out of ``sys.modules``: tether finds no api, exactly as if it
    was never imported) and the api imported with no provider; runs/s and loop CPU ms per run of
    each, ``[rate_untraced, cpu_untraced, rate_api, cpu_api]``. Every run verified."""
    from benchmarks.step_path import WARMUP, Tether, check_rows

    api = sys.modules["opentelemetry.trace"]
    contender = Tether("sqlite", workdir)
    await contender.open(tag)
    spent = {False: [0.0, 0.0, 0], True: [0.0, 0.0, 0]}
    ids: list[str] = []
    try:
        for i in range(WARMUP):
            await contender.one(f"{tag}-warm{i}")
        for index in range(max(1, runs // BATCH)):
            for visible in (False, True) if index % 2 == 0 else (True, False):
                if visible:
                    sys.modules["opentelemetry.trace"] = api
                else:
                    sys.modules.pop("opentelemetry.trace", None)
                batch = [f"{tag}-{index}-{int(visible)}-{n}" for n in range(BATCH)]
                ids += batch
                start, cpu = time.perf_counter(), time.thread_time()
                if concurrency <= 1:
                    for run_id in batch:
                        await contender.one(run_id)
                else:
                    pending = iter(batch)

                    async def worker(queue: Iterator[str] = pending) -> None:
                        for run_id in queue:
                            await contender.one(run_id)

                    await asyncio.gather(*(worker() for _ in range(concurrency)))
                totals = spent[visible]
                totals[0] += time.perf_counter() - start
                totals[1] += time.thread_time() - cpu
                totals[2] += len(batch)
        sys.modules["opentelemetry.trace"] = api
        assert contender._system is not None
        await check_rows("tether", contender._system.history, ids)
    finally:
        sys.modules["opentelemetry.trace"] = api
        await contender.close()
    out = []
    for visible in (False, True):
        wall, cpu, count = spent[visible]
        out += [count / wall, 1000 * cpu / count]
    return out


def _measure_here(spec: str) -> None:
    """The child: measure one configuration once; print runs/s and loop CPU ms per run (the A/B:
    those of the untraced batches, then of the api's)."""
    mode, concurrency, tag, runs, workdir = json.loads(spec)
    spans = _configure(mode)
    if mode == "a/b":
        print(*asyncio.run(_alternating(runs, concurrency, tag, Path(workdir))))
        return
    from benchmarks.step_path import WARMUP, Tether, timed_runs

    timing = asyncio.run(timed_runs(Tether("sqlite", Path(workdir)), tag, runs, concurrency))
    if mode == "traced":
        assert spans() == SPANS_PER_RUN * (runs + WARMUP), (spans(), runs)
    print(runs / timing.wall, 1000 * timing.loop_cpu / runs)


Results = dict[tuple[str, int], list[float]]


async def run(runs: int, concurrency: int, rounds: int) -> Results:
    """Medians by (configuration, runs in flight): runs/s and loop CPU ms per run (the A/B: the
    medians of its four figures, and of its two ratios, each round's from one process)."""
    with tempfile.TemporaryDirectory(prefix="tether-tracing-") as tmp:
        counter = iter(range(1_000_000))
        measures: dict[str, Callable[[], Awaitable[Any]]] = {}
        for mode in (*MODES, "a/b"):
            for flight in (1, concurrency):

                async def job(m: str = mode, f: int = flight) -> list[float]:
                    spec = [m, f, f"m{next(counter)}", runs, tmp]
                    last = await measure_child("benchmarks.tracing", spec, timeout=CHILD_TIMEOUT, what=m)
                    values = [float(x) for x in last.split()]
                    shown = ", ".join(f"{v:,.3f}" for v in values)
                    print(f"  {m}/{f}: {shown}", file=sys.stderr, flush=True)
                    if m == "a/b":  # the ratios of this round, from one process
                        values += [values[2] / values[0], values[1] / values[3]]
                    return values

                measures[f"{mode}/{flight}"] = job
        samples = await interleaved(rounds, measures)
    out: Results = {}
    for name, values in samples.items():
        mode, _, flight = name.rpartition("/")
        out[(mode, int(flight))] = [median([v[i] for v in values]) for i in range(len(values[0]))]
    return out


def report(results: Results, concurrency: int, rounds: int, runs: int) -> bool:
    """Print the table and the A/B's ratios; whether they reach the target."""
    print(
        f"tracing cost, SQLite (WAL, synchronous=FULL): {runs} runs a measurement, "
        f"medians of {rounds} interleaved rounds"
    )
    flights = (1, concurrency)
    header = f"{'configuration':<20}" + "".join(
        f"{label + ' runs/s':>22}{'x':>7}{'CPU ms/run':>12}{'x':>7}"
        for label in ("sequential", f"{concurrency} concurrent")
    )
    print(header)
    print("-" * len(header))
    for mode in MODES:
        cells = ""
        for flight in flights:
            rate, cpu = results[(mode, flight)]
            base_rate, base_cpu = results[("untraced", flight)]
            cells += f"{rate:>22,.0f}{rate / base_rate:>6.2f}x{cpu:>12.3f}{cpu / base_cpu:>6.2f}x"
        print(f"{mode:<20}{cells}")
    print(
        f"\nA/B in one process, batches of {BATCH} runs alternating between the api hidden and the api "
        "imported with no provider (medians of the rounds' ratios):"
    )
    ok = True
    for flight in flights:
        rate_u, cpu_u, rate_a, cpu_a, rate_ratio, cpu_ratio = results[("a/b", flight)]
        ok = ok and rate_ratio >= TARGET and cpu_ratio >= TARGET
        print(
            f"  {flight} in flight: untraced {rate_u:,.0f} runs/s {cpu_u:.3f} ms CPU a run, api {rate_a:,.0f} "
            f"runs/s {cpu_a:.3f} ms CPU a run: runs/s {rate_ratio:.2f}x, loop CPU {1 / cpu_ratio:.2f}x"
        )
    verdict = "PASS" if ok else "MISS"
    print(f"api with no provider over untraced: within 3% {verdict}")
    return ok


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.tracing", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--runs", type=int, default=300, help="runs a measurement (default 300)")
    parser.add_argument("--concurrency", type=int, default=16, help="runs in flight, concurrent (default 16)")
    parser.add_argument("--rounds", type=int, default=None, help="interleaved rounds (5, --tiny 1)")
    parser.add_argument("--tiny", action="store_true", help="a smoke size: 8 runs, 1 round, no target")
    parser.add_argument("--measure", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.measure is not None:
        _measure_here(args.measure)
        return
    runs = 8 if args.tiny else args.runs
    concurrency = 4 if args.tiny else args.concurrency
    rounds = args.rounds or (1 if args.tiny else 5)
    results = asyncio.run(run(runs, concurrency, rounds))
    ok = report(results, concurrency, rounds, runs)
    if not ok and not args.tiny:
        print("(a MISS on a shared machine: run it again with more --rounds before reading it as a cost)")


if __name__ == "__main__":
    main()
