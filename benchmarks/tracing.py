"""What tracing costs a run: the step path untraced, with the OpenTelemetry api and no provider, and traced.

    python -m benchmarks.tracing [--runs 300] [--concurrency 16] [--rounds 5] [--tiny]

The small refund of :mod:`benchmarks.step_path` (tether's contender: ``spawn`` then ``result()``,
4 rows a run on SQLite, WAL, ``synchronous=FULL``) in three configurations, measured in one process
batch by batch (:data:`BATCH` runs a batch, the configurations in a rotating order; ``runs`` a multiple of it), so that the
machine's drift and a disk's fsync weigh on all three alike:

* untraced: ``opentelemetry.trace`` is not among the imported modules (taken out of
  ``sys.modules`` for the batch), so tether finds no api, exactly as if it was never imported;
* api, no provider: ``opentelemetry.trace`` imported and no tracer provider configured, as in an
  application that installed the ``otel`` extra and does not trace: tether looks for a provider once
  per activation, finds the api's proxy, makes no span and stores nothing;
* traced: the SDK's ``TracerProvider`` (set as the api's provider for the batch, as the api's own
  tests do) with one span processor that counts the spans that end (4 a run: ``invoke_agent``, two
  ``chat``, one ``execute_tool``; checked) and exports nothing, so the figure is tether's
  instrumentation and the SDK's span objects, not an exporter's I/O.

Each round is one fresh child process per concurrency (one run after another, and ``--concurrency``
in flight), on a fresh file, every run verified (the answer, the tool once, its 4 rows). It prints
runs/s and the event-loop thread's CPU per run (``time.thread_time``, which an fsync does not blur),
medians over the rounds, with each configuration's ratio to untraced (the median of the rounds'
ratios). Target: the api without a provider within 3% of untraced.
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

MODES = ("untraced", "api, no provider", "traced")
#: The api without a provider against untraced runs: runs/s and loop CPU per run within 3%.
TARGET = 0.97
SPANS_PER_RUN = 4
#: Runs a batch (the configurations take turns batch by batch).
BATCH = 20
CHILD_TIMEOUT = 600.0


async def _alternating(runs: int, concurrency: int, tag: str, workdir: Path) -> list[float]:
    """Each configuration's runs/s and loop CPU ms per run, over batches taking turns; ``runs``
    runs of each configuration, every one verified."""
    from opentelemetry import trace
    from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider

    from benchmarks.step_path import WARMUP, Tether, check_rows

    ended = [0]

    class Count(SpanProcessor):
        def on_end(self, span: ReadableSpan) -> None:
            ended[0] += 1

    provider = TracerProvider()
    provider.add_span_processor(Count())
    api = sys.modules["opentelemetry.trace"]
    assert isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider)

    def configure(mode: str) -> None:
        if mode == "untraced":
            sys.modules.pop("opentelemetry.trace", None)
        else:
            sys.modules["opentelemetry.trace"] = api
        trace._TRACER_PROVIDER = provider if mode == "traced" else None  # type: ignore[attr-defined]

    contender = Tether("sqlite", workdir)
    await contender.open(tag)
    spent = {mode: [0.0, 0.0, 0] for mode in MODES}
    ids: list[str] = []
    traced_runs = 0
    try:
        for i in range(WARMUP):
            await contender.one(f"{tag}-warm{i}")
        size = min(BATCH, runs)
        for index in range(max(1, runs // size)):
            shift = index % len(MODES)
            order = MODES[shift:] + MODES[:shift]
            for mode in order if index % 2 == 0 else tuple(reversed(order)):
                configure(mode)
                batch = [f"{tag}-{index}-{MODES.index(mode)}-{n}" for n in range(size)]
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
                totals = spent[mode]
                totals[0] += time.perf_counter() - start
                totals[1] += time.thread_time() - cpu
                totals[2] += len(batch)
                traced_runs += len(batch) if mode == "traced" else 0
        configure("api, no provider")
        assert contender._system is not None
        await check_rows("tether", contender._system.history, ids)
        assert ended[0] == SPANS_PER_RUN * traced_runs, (ended[0], traced_runs)
    finally:
        configure("api, no provider")
        await contender.close()
    out = []
    for mode in MODES:
        wall, cpu, count = spent[mode]
        out += [count / wall, 1000 * cpu / count]
    return out


def _measure_here(spec: str) -> None:
    """The child: one round at one concurrency; prints runs/s and loop CPU ms per run of each
    configuration, in :data:`MODES` order."""
    concurrency, tag, runs, workdir = json.loads(spec)
    print(*asyncio.run(_alternating(runs, concurrency, tag, Path(workdir))))


#: By runs in flight: the medians of each configuration's (runs/s, CPU ms per run), and of its
#: ratios to untraced (runs/s, CPU).
Results = dict[int, dict[str, tuple[float, float, float, float]]]


async def run(runs: int, concurrency: int, rounds: int) -> Results:
    """Medians over ``rounds`` rounds, each round's figures from one child process."""
    with tempfile.TemporaryDirectory(prefix="tether-tracing-") as tmp:
        counter = iter(range(1_000_000))
        measures: dict[str, Callable[[], Awaitable[Any]]] = {}
        for flight in (1, concurrency):

            async def job(f: int = flight) -> list[float]:
                spec = [f, f"m{next(counter)}", runs, tmp]
                last = await measure_child("benchmarks.tracing", spec, timeout=CHILD_TIMEOUT, what=f"{f}")
                values = [float(x) for x in last.split()]
                shown = "; ".join(
                    f"{mode} {values[2 * i]:,.0f} runs/s {values[2 * i + 1]:.3f} ms"
                    for i, mode in enumerate(MODES)
                )
                print(f"  {f} in flight: {shown}", file=sys.stderr, flush=True)
                return values

            measures[str(flight)] = job
        samples = await interleaved(rounds, measures)
    out: Results = {}
    for name, values in samples.items():
        found = {}
        for i, mode in enumerate(MODES):
            rate, cpu = median([v[2 * i] for v in values]), median([v[2 * i + 1] for v in values])
            rate_x = median([v[2 * i] / v[0] for v in values])
            cpu_x = median([v[2 * i + 1] / v[1] for v in values])
            found[mode] = (rate, cpu, rate_x, cpu_x)
        out[int(name)] = found
    return out


def report(results: Results, concurrency: int, rounds: int, runs: int) -> bool:
    """Print the table; whether the api without a provider is within 3% of untraced."""
    print(
        f"tracing cost, SQLite (WAL, synchronous=FULL): {runs} runs of each configuration a round, "
        f"in batches of {min(BATCH, runs)} taking turns in one process; medians of {rounds} rounds"
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
            rate, cpu, rate_x, cpu_x = results[flight][mode]
            cells += f"{rate:>22,.0f}{rate_x:>6.2f}x{cpu:>12.3f}{cpu_x:>6.2f}x"
        print(f"{mode:<20}{cells}")
    ok = True
    parts = []
    for flight in flights:
        _, _, rate_x, cpu_x = results[flight]["api, no provider"]
        ok = ok and rate_x >= TARGET and cpu_x <= 1 / TARGET
        parts.append(f"{flight} in flight: runs/s {rate_x:.2f}x, loop CPU {cpu_x:.2f}x")
    verdict = "PASS" if ok else "MISS"
    print(f"\napi with no provider over untraced: {'; '.join(parts)} (target: within 3%) {verdict}")
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
