"""What operators see of a run's token usage: ``tether show`` prints the run's total and the tokens
each row is the first to count, ``--json`` carries them, and the inspector's run page shows both (a
real ``tether inspect`` on loopback). A run whose models reported no usage shows none of it."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import anyio
import httpx
import pytest
from _cli_support import TETHER, tether

from actors import ActorSystem, Agent, tool
from actors.models import FunctionModel, Message, ModelReply, ToolCall, Usage
from stores import SQLiteStore

pytest.importorskip("starlette")


@tool
def refund(order: str) -> str:
    """Refund an order."""
    return f"refunded {order}"


def model(messages: list[Message]) -> ModelReply:
    if messages[-1].role == "tool":
        return ModelReply("Refunded.", usage=Usage(input_tokens=52, output_tokens=4))
    return ModelReply(
        tool_calls=[ToolCall("refund", {"order": "A-1"})], usage=Usage(input_tokens=40, output_tokens=9)
    )


async def _runs(path: Path) -> None:
    billed = Agent("billed", FunctionModel(model), tools=[refund])
    quiet = Agent("quiet", FunctionModel(lambda messages: "hello"))
    async with SQLiteStore(path) as store, ActorSystem(store, runners=[billed, quiet]) as system:
        assert (await (await system.spawn(billed, "Refund A-1", execution_id="billed")).result()).usage
        await (await system.spawn(quiet, "hi", execution_id="quiet")).result()


def test_show_prints_the_usage_of_a_run(tmp_path: Path) -> None:
    db = tmp_path / "u.db"
    anyio.run(_runs, db)
    url = f"sqlite:///{db}"
    lines = tether(url, "show", "billed").out.splitlines()
    assert lines[2] == "  usage: 92 input + 13 output tokens"
    header = next(line for line in lines if line.startswith("SEQ"))
    assert header.split()[-3:] == ["TOKENS", "AGENT", "PATH"]
    tokens = {
        line.split()[1]: line[header.index("TOKENS") :].split("  ")[0]
        for line in lines
        if re.match(r"^\d ", line)
    }
    assert tokens == {
        "turn:0": "-",
        "turn:0/tool:refund": "+40 in, +9 out",
        "turn:1": "-",
        "run_end": "+52 in, +4 out",
    }
    document = tether(url, "show", "billed", "--json").json()
    assert document["summary"]["usage"] == {"input_tokens": 92, "output_tokens": 13}
    assert [row["tokens"] for row in document["rows"]] == ["", "+40 in, +9 out", "", "+52 in, +4 out"]
    listed = {run["execution_id"]: run["usage"] for run in tether(url, "runs", "--json").json()}
    assert listed == {
        "billed": {"input_tokens": 92, "output_tokens": 13},
        "quiet": {"input_tokens": 0, "output_tokens": 0},
    }
    quiet = tether(url, "show", "quiet").out
    assert "usage" not in quiet and "TOKENS" not in quiet


def test_the_inspector_shows_the_usage_of_a_run(tmp_path: Path) -> None:
    db = tmp_path / "u.db"
    anyio.run(_runs, db)
    proc = subprocess.Popen(
        [str(TETHER), "inspect", "--port", "0", "--token", "tok", "--store", f"sqlite:///{db}"],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        text=True,
        env={k: v for k, v in os.environ.items() if k != "TETHER_STORE"},
    )
    try:
        assert proc.stdout is not None
        match = re.match(
            r"tether inspector on (http://127\.0\.0\.1:\d+)/\?token=tok$", proc.stdout.readline()
        )
        assert match, proc.poll()
        with httpx.Client(base_url=match[1], timeout=30) as client:
            client.get("/?token=tok", follow_redirects=True)
            page = client.get("/runs/billed").text
            quiet = client.get("/runs/quiet").text
    finally:
        proc.terminate()
        proc.wait(timeout=15)
    assert '<span id="usage">92 input + 13 output tokens</span>' in page
    assert re.findall(r'<td class="tokens mono">([^<]*)</td>', page) == [
        "-",
        "+40 in, +9 out",
        "-",
        "+52 in, +4 out",
    ]
    assert 'id="usage"' not in quiet and "tokens mono" not in quiet
