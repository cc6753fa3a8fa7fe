"""A child process for the tracing tests: one leg of a run, its spans exported by the real SDK.

Usage: ``python _tracing_child.py MODE DB SPANS BASE_URL EXECUTION_ID``. The process configures an
OpenTelemetry ``TracerProvider`` whose console exporter writes one JSON span per line to ``SPANS``,
then drives the run of the ``refunder`` agent (an ``OpenAIChat`` at ``BASE_URL``; one ``refund``
tool) on the SQLite database ``DB``, and prints ``status input_tokens output_tokens``.

MODE ``pause``: spawn; the tool asks for approval (the run pauses). ``resume``: approve the pause.
``kill-tool``: spawn; the tool kills this process with SIGKILL the first time it runs (a marker file
beside ``DB`` remembers it). ``plain``: spawn; the tool refunds. ``recover``: crash recovery.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path

import anyio
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import ConsoleSpanExporter, SimpleSpanProcessor

from actors import ActorSystem, Agent, Resume, interrupt, tool
from actors.models import OpenAIChat
from stores import SQLiteStore


def agent(mode: str, marker: Path, base_url: str) -> Agent:
    @tool
    def refund(order: str) -> str:
        """Refund an order."""
        if mode in ("pause", "resume"):
            return f"approved={interrupt('approval', {'order': order}).approved}"
        if mode == "kill-tool" and not marker.exists():
            marker.touch()
            os.kill(os.getpid(), signal.SIGKILL)
        return f"refunded {order}"

    return Agent("refunder", OpenAIChat("test-model", base_url=base_url, max_retries=0), tools=[refund])


def configure(spans: str) -> TracerProvider:
    """The application's part: a tracer provider exporting each span as a JSON line to ``spans``."""
    out = open(spans, "a")
    provider = TracerProvider()
    exporter = ConsoleSpanExporter(out=out, formatter=lambda span: span.to_json(indent=None) + "\n")
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    return provider


async def main(mode: str, db: str, base_url: str, execution_id: str) -> None:
    runner = agent(mode, Path(db).with_suffix(".killed"), base_url)
    store = SQLiteStore(db)
    async with store, ActorSystem(store, runners=[runner]) as system:
        with anyio.fail_after(60):
            if mode == "resume":
                result = await system.resume(execution_id, Resume(approved=True))
            elif mode == "recover":
                result = await system.resume(execution_id)
            else:
                ref = await system.spawn(runner, "Refund order A-1", execution_id=execution_id)
                result = await ref.result()
    print(json.dumps([result.status, result.usage.input_tokens, result.usage.output_tokens]), flush=True)


if __name__ == "__main__":
    mode, db, spans, base_url, execution_id = sys.argv[1:6]
    provider = configure(spans)
    anyio.run(main, mode, db, base_url, execution_id, backend=os.environ.get("TETHER_TEST_LOOP", "asyncio"))
    provider.shutdown()
