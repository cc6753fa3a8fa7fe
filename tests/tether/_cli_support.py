"""What the command tests share: running ``tether`` (in this process or as the console script), a
store written by ``tether demo`` and by the tests, and the rows of a nested run."""

from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, NamedTuple

import anyio
from conftest import Backend

from actors import ActorSystem
from stores import Checkpoint, Store
from tether.cli import main
from tether.lowlevel import demo_agent

TETHER = Path(sys.executable).parent / "tether"
TIMEOUT = 90.0
#: The runner of the demo, as ``--runner`` names it.
RUNNER = "tether._demo:demo_agent"

#: The nested run the tests write: (seq, node_id, step_type, agent_path). Its newest row is a step
#: with no live owner, so it stands "orphaned".
NESTED = [
    (0, "turn:0", "llm_call", "supervisor:ops"),
    (1, "turn:0/tool:delegate_to_support", "tool_call", "supervisor:ops/tool:delegate_to_support"),
    (2, "handoff:0", "handoff", "supervisor:ops/worker:support"),
    (3, "turn:0", "llm_call", "supervisor:ops/worker:support/agent:billing"),
    (4, "turn:0/tool:refund", "tool_call", "supervisor:ops/worker:support/agent:billing/tool:refund"),
]


class Ran(NamedTuple):
    code: int
    out: str
    err: str

    def json(self) -> Any:
        assert self.code == 0, self
        return json.loads(self.out)

    def refusal(self) -> tuple[str, str]:
        """Exit 1 and one stderr line ``Type: message`` without a traceback."""
        assert self.code == 1, self
        assert "Traceback" not in self.err, self.err
        lines = self.err.splitlines()
        assert len(lines) == 1, self.err
        name, _, message = lines[0].partition(": ")
        return name, message


def url_of(backend: Backend) -> str:
    """The ``--store`` URL of a test backend."""
    if backend.name == "sqlite":
        return f"sqlite:///{backend.target}"
    return f"{backend.target}?schema={backend.schema}"


def tether(url: str, *args: str) -> Ran:
    """``tether ARGS --store URL`` run in this process (``tether.cli.main``), output captured."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main([*args, "--store", url])
    return Ran(code, out.getvalue(), err.getvalue())


def console(*args: str, cwd: Path, **kwargs: Any) -> Ran:
    """The installed console script ``tether ARGS``."""
    env = {k: v for k, v in os.environ.items() if k != "TETHER_STORE"}
    done = subprocess.run(
        [str(TETHER), *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=TIMEOUT, **kwargs
    )
    return Ran(done.returncode, done.stdout, done.stderr)


def nested_rows(execution_id: str) -> list[Checkpoint]:
    messages = [{"role": "user", "content": "refund order 1042", "tool_calls": [], "tool_call_id": None}]
    rows = []
    for seq, node_id, step_type, path in NESTED:
        snapshot: dict[str, Any] = {"messages": messages[: 1 + seq // 2], "turn": 0}
        messages.append(
            {"role": "assistant", "content": f"step {seq}", "tool_calls": [], "tool_call_id": None}
        )
        rows.append(
            Checkpoint(
                execution_id=execution_id,
                seq=seq,
                runner="ops",
                node_id=node_id,
                step_type=step_type,
                state_snapshot=snapshot,
                agent_path=path,
            )
        )
    return rows


async def write_paused(backend: Backend, paused: list[str]) -> None:
    """Paused refunds of the demo's runner (amount 50000)."""
    store: Store = backend.open()
    agent = demo_agent()
    async with store, ActorSystem(store, runners=[agent]) as system:
        for eid in paused:
            ref = await system.spawn(agent, "Refund order 1042, amount 50000", execution_id=eid)
            assert (await ref.result(timeout=30)).status == "paused"


async def _write_test_runs(backend: Backend, paused: list[str]) -> None:
    """Paused refunds (the demo's runner, amount 50000), an orphaned refund at its first model
    call, and the nested orphan :data:`NESTED`."""
    await write_paused(backend, paused)
    store: Store = backend.open()
    async with store:
        for row in nested_rows("nested"):
            await store.append(row)
        first = Checkpoint(
            execution_id="orphan",
            seq=0,
            runner="refund-bot",
            node_id="turn:0",
            state_snapshot={
                "messages": [{"role": "user", "content": "Refund order 1042, amount 20", "tool_calls": []}],
                "turn": 0,
            },
            agent_path="agent:refund-bot",
        )
        await store.append(first)


def demo_store(backend: Backend, cwd: Path, paused: list[str]) -> str:
    """A store written by ``tether demo`` (two completed refunds) and by the tests; its URL."""
    url = url_of(backend)
    done = console("demo", "--store", url, cwd=cwd)
    assert done.code == 0, done
    anyio.run(_write_test_runs, backend, paused)
    return url
