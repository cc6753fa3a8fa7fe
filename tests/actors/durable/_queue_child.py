"""The runner of the queue tests' worker processes (``tether worker --runner _queue_child:cli_agent``).

The runner ``queued-step`` makes one tool call, ``step(order)``, then answers. The tool appends
``{"event": "start"|"end", "order", "pid", "t"}`` lines to ``WORKDIR/ledger`` (each line fsynced
before the tool goes on), and between them it works: an order starting with ``long`` until
``WORKDIR/go`` exists (at most 60 s); an order starting with ``ask`` first pauses for approval
(``interrupt``); any other order ``QUEUE_FIRST`` seconds the first time its tool starts and
``QUEUE_AGAIN`` seconds when the ledger already shows a start of it (a recovery). ``WORKDIR`` is
``$QUEUE_WORKDIR``.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from actors import Agent, interrupt, tool
from actors.models import FunctionModel, Message, ModelReply, ToolCall

NAME = "queued-step"


def note(workdir: Path, **fields: Any) -> None:
    """Append one fsynced line to the ledger."""
    with (workdir / "ledger").open("a") as out:
        out.write(json.dumps(fields) + "\n")
        out.flush()
        os.fsync(out.fileno())


def ledger(workdir: Path) -> list[dict[str, Any]]:
    """The ledger's lines, in the order written."""
    path = workdir / "ledger"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.endswith("}")]


def agent(workdir: Path, first: float = 0.05, again: float = 0.05) -> Agent:
    """One ``step`` tool call, then an answer quoting it."""

    @tool
    def step(order: str) -> str:
        """Work on an order (see the module's docstring for how long)."""
        if order.startswith("ask"):
            decision = interrupt("go ahead?", {"order": order})
            if not decision.approved:
                return f"refused {order}"
        seen = any(e["event"] == "start" and e["order"] == order for e in ledger(workdir))
        note(workdir, event="start", order=order, pid=os.getpid(), t=time.time())
        if order.startswith("long"):
            deadline = time.monotonic() + 60
            while not (workdir / "go").exists():
                if time.monotonic() > deadline:
                    raise TimeoutError("no go within 60 s")
                time.sleep(0.005)
        else:
            time.sleep(again if seen else first)
        note(workdir, event="end", order=order, pid=os.getpid(), t=time.time())
        return f"stepped {order}"

    def model(messages: list[Message]) -> str | ModelReply:
        if messages[-1].role == "tool":
            return f"done: {messages[-1].content}"
        return ModelReply(tool_calls=[ToolCall("step", {"order": messages[-1].content})])

    return Agent(NAME, FunctionModel(model), tools=[step])


def cli_agent() -> Agent:
    """The runner for ``--runner _queue_child:cli_agent``."""
    return agent(
        Path(os.environ["QUEUE_WORKDIR"]),
        float(os.environ.get("QUEUE_FIRST", "0.05")),
        float(os.environ.get("QUEUE_AGAIN", "0.05")),
    )
