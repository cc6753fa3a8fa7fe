"""What a user new to tether does first, from their app's own folder, and what they get back.

A topology (a Supervisor whose worker's refund waits for a manager) named by ``--runner`` on every
command that takes one, as the object or as a function returning it, imported from the current
directory by the console script; an approval handed to a worker, which reads "approved, waiting for
a worker" until a ``tether worker`` finishes it; a cancel without the runner; the read-only
commands on a mistyped store path; a stale ``system.ref(id)``; a tool returning a value that is not
JSON; Ctrl-C during a sync tool; and the small refusals of the command line.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from datetime import UTC, datetime
from pathlib import Path

import anyio
import pytest
from _cli_support import RUNNER, TETHER, TIMEOUT, console, url_of, write_paused
from conftest import Backend

from actors import ActorSystem, Agent, Resume, RunResult, tool
from actors.models import FunctionModel, Message, ModelReply, ToolCall
from stores import SQLiteStore

#: The user's app: a module in the folder they run ``tether`` from (a copy of ``topo_app.py``).
APP = Path(__file__).with_name("topo_app.py")


def app_folder(tmp_path: Path) -> Path:
    """A folder holding the user's app, ``topo_app.py``, as the current directory of commands."""
    folder = tmp_path / "app"
    folder.mkdir()
    shutil.copy(APP, folder / "topo_app.py")
    return folder


async def write_topology_runs(backend: Backend, paused: list[str]) -> None:
    """Runs of the topology ``topo_app.ops``, each paused at its refund's approval."""
    import topo_app

    store = backend.open()
    async with store, ActorSystem(store, runners=[topo_app.ops]) as system:
        for eid in paused:
            ref = await system.spawn(topo_app.ops, "please refund order 7", execution_id=eid)
            assert (await ref.result(timeout=30)).status == "paused"


def test_a_topology_on_every_command_that_takes_a_runner(store_backend: Backend, tmp_path: Path) -> None:
    folder = app_folder(tmp_path)
    url = url_of(store_backend)
    anyio.run(write_topology_runs, store_backend, ["t-approve", "t-reject", "t-handed", "t-cancel"])

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        done = console(*args, "--store", url, cwd=folder)
        return subprocess.CompletedProcess(args, done.code, done.out, done.err)

    # Each pending gate names its agent path: which agent of the topology waits.
    gates = {line.split()[0]: line.split() for line in run("pending").stdout.splitlines()[1:]}
    assert gates["t-cancel"][1:4] == [
        "manager_approval",
        "supervisor:ops/worker:support/tool:refund",
        "turn:1/tool:refund",
    ]

    # The object and a function returning it, imported from the current directory.
    approved = run("approve", "t-approve", "--runner", "topo_app:ops")
    assert approved.returncode == 0, approved
    final = 'final answer: billing: {"refunded":true,"order":"7","amount":5000}'
    assert approved.stdout.splitlines()[-1] == f"t-approve: completed · {final}", approved
    rejected = run("reject", "t-reject", "--runner", "topo_app:build", "--json")
    assert rejected.returncode == 0, rejected
    assert json.loads(rejected.stdout)["output"] == final.replace("true", "false")
    forked = run("fork", "t-approve", "--runner", "topo_app:build", "--json")
    assert forked.returncode == 0, forked
    assert json.loads(forked.stdout)["status"] in ("paused", "completed")

    # Approved without the runner: "approved, waiting for a worker"; a worker of the topology ends it.
    handed = run("approve", "t-handed")
    assert handed.returncode == 0 and "handed to the fleet" in handed.stdout, handed
    assert [s["execution_id"] for s in json.loads(run("runs", "--status", "approved", "--json").stdout)] == [
        "t-handed"
    ]
    shown = run("show", "t-handed").stdout.splitlines()
    assert shown[0].split("  ")[:2] == ["t-handed", "approved, waiting for a worker"], shown
    env = {k: v for k, v in os.environ.items() if k != "TETHER_STORE"}
    worker = subprocess.Popen(
        [str(TETHER), "worker", "--runner", "topo_app:build", "--poll", "0.2", "--store", url],
        cwd=folder,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + TIMEOUT
        status = "approved"
        while status != "completed" and time.monotonic() < deadline and worker.poll() is None:
            time.sleep(0.2)
            status = json.loads(run("show", "t-handed", "--json").stdout)["summary"]["status"]
        assert status == "completed", (status, worker.poll())
    finally:
        worker.send_signal(signal.SIGINT)
        out, err = worker.communicate(timeout=TIMEOUT)
    assert worker.returncode == 0 and out.startswith("worker serving ops"), (out, err)

    # A cancel needs no runner; its marker reads as the topology's root wrote it.
    cancelled = run("cancel", "t-cancel", "--reason", "duplicate")
    assert cancelled.stdout.strip() == "t-cancel: failed · cancelled: duplicate", cancelled
    rows = json.loads(run("show", "t-cancel", "--json").stdout)["rows"]
    assert (rows[-1]["step_type"], rows[-1]["agent_path"]) == ("run_end", "supervisor:ops")

    # What is not a runner is a usage error saying what is.
    tool_named = run("approve", "t-cancel", "--runner", "topo_app:lookup")
    assert tool_named.returncode == 2, tool_named
    assert "'topo_app:lookup' is a Tool, not a runner: name an Agent, a Swarm or a Supervisor" in (
        tool_named.stderr
    )


def test_resume_refusals_name_the_command_that_fixes_them(store_backend: Backend, tmp_path: Path) -> None:
    folder = app_folder(tmp_path)
    url = url_of(store_backend)
    anyio.run(write_topology_runs, store_backend, ["t-1"])
    # The wrong runner: the refusal lists the runners this process has.
    wrong = console("resume", "t-1", "--runner", RUNNER, "--store", url, cwd=folder).refusal()
    assert wrong[0] == "RunnerNotFound", wrong
    assert "no runner named 'ops'" in wrong[1] and "(registered: 'refund-bot')" in wrong[1], wrong
    assert wrong[1].endswith("(on the command line: --runner MODULE:ATTR)"), wrong
    # A pause resumed without a decision: the command line says which commands decide it.
    paused = console("resume", "t-1", "--runner", "topo_app:ops", "--store", url, cwd=folder).refusal()
    assert paused == (
        "ResumeRequired",
        "run 't-1' is paused (reason: 'manager_approval'); decide it: tether approve t-1 or tether reject t-1",
    )
    # With --json, a refusal is a JSON document too.
    assert console("approve", "t-1", "--store", url, cwd=folder).code == 0
    again = console("approve", "t-1", "--json", "--store", url, cwd=folder)
    assert again.code == 1, again
    document = json.loads(again.out)
    assert document["error"] == "AlreadyResumed" and "t-1" in document["message"], document


@pytest.mark.parametrize(
    "args",
    [
        ["runs"],
        ["runs", "--json"],
        ["pending"],
        ["show", "r-1"],
        ["diff", "r-1", "0", "1"],
        ["approve", "r-1"],
        ["cancel", "r-1"],
        ["prune", "--older-than", "7d"],
        ["inspect", "--port", "0"],
    ],
)
def test_a_command_on_a_store_file_that_is_not_there_refuses_and_creates_nothing(
    args: list[str], tmp_path: Path
) -> None:
    refused = console(*args, "--store", "sqlite:///tpyo.db", cwd=tmp_path).refusal()
    assert refused == (
        "StoreUnavailable",
        f"there is no SQLite database at '{tmp_path / 'tpyo.db'}': check --store or $TETHER_STORE "
        "(tether migrate creates an empty one)",
    )
    assert list(tmp_path.iterdir()) == []


def test_a_listing_into_a_closed_pipe_ends_quietly(tmp_path: Path) -> None:
    backend = Backend("sqlite", str(tmp_path / "t.db"))
    anyio.run(write_paused, backend, [f"w-{i}" for i in range(3)])
    read, write = os.pipe()
    os.close(read)  # the reader is gone before anything is written, as `head -1` is after a line
    try:
        done = subprocess.run(
            [str(TETHER), "runs", "--store", url_of(backend)],
            stdout=write,
            stderr=subprocess.PIPE,
            text=True,
            timeout=TIMEOUT,
        )
    finally:
        os.close(write)
    assert (done.returncode, done.stderr) == (141, ""), done.stderr


def _refund_agent() -> Agent:
    from tether.lowlevel import demo_agent

    return demo_agent()


@pytest.mark.anyio
async def test_a_ref_taken_after_a_resume_waits_for_the_runs_next_rest(store_backend: Backend) -> None:
    agent = _refund_agent()
    store = store_backend.open()
    async with store, ActorSystem(store, runners=[agent]) as system:
        ref = await system.spawn(agent, "Refund order 1042, amount 50000", execution_id="r-1")
        assert (await ref.result(timeout=30)).status == "paused"
        await system.send("r-1", Resume(approved=True, metadata={"approver": "ann"}))
        result = await system.ref("r-1").result(timeout=30)
        assert (result.status, result.output) == (
            "completed",
            'Done: {"refunded":true,"order":"1042","amount":50000}',
        )
        # A run approved without its runner is the fleet's: its ref waits for a worker to finish it.
        ref = await system.spawn(agent, "Refund order 1042, amount 50000", execution_id="r-2")
        assert (await ref.result(timeout=30)).status == "paused"
    async with store_backend.open() as store, ActorSystem(store) as approver:
        await approver.claim("r-2", Resume(approved=True))
        with pytest.raises(TimeoutError):
            await approver.ref("r-2").result(timeout=0.5)  # no worker yet: still approved
        finished: list[RunResult] = []

        async def wait() -> None:
            finished.append(await approver.ref("r-2").result(timeout=30))

        async with anyio.create_task_group() as group:
            group.start_soon(wait)
            async with store_backend.open() as other, ActorSystem(other, runners=[agent]) as worker:
                assert await worker.sweep() == 1
    assert [(r.status, r.output) for r in finished] == [
        ("completed", 'Done: {"refunded":true,"order":"1042","amount":50000}')
    ]


@pytest.mark.anyio
async def test_a_tool_returning_a_value_that_is_not_json_is_logged_as_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    @tool
    def now() -> datetime:
        """The time."""
        return datetime.now(UTC)

    def model(messages: list[Message]) -> str | ModelReply:
        if messages[-1].role == "tool":
            return f"read: {messages[-1].content}"
        return ModelReply(tool_calls=[ToolCall("now", {})])

    agent = Agent("clock", FunctionModel(model), tools=[now])
    with caplog.at_level(logging.WARNING, logger="tether"):
        async with SQLiteStore(tmp_path / "t.db") as store, ActorSystem(store, runners=[agent]) as system:
            result = await (await system.spawn(agent, "what time is it?", execution_id="c-1")).result(
                timeout=30
            )
    assert result.output is not None and "returned a value that is not JSON" in result.output
    warned = [r for r in caplog.records if r.name == "tether" and r.levelno == logging.WARNING]
    assert len(warned) == 1, [r.getMessage() for r in warned]
    message = warned[0].getMessage()
    assert message.startswith("event='tool returned a value that is not JSON' execution_id='c-1'"), message
    assert "tool='now'" in message and "datetime" in message, message


_SLOW_SCRIPT = """
import sys, time
import anyio
from actors import ActorSystem, Agent, tool
from actors.models import FunctionModel, ModelReply, ToolCall
from stores import SQLiteStore

@tool
def slow() -> str:
    '''Take a while.'''
    print("tool started", flush=True)
    time.sleep(SECONDS)
    print("tool ended", file=sys.stderr, flush=True)
    return "slow done"

def model(messages):
    if messages[-1].role == "tool":
        return "done"
    return ModelReply(tool_calls=[ToolCall("slow", {})])

async def main():
    agent = Agent("sleepy", FunctionModel(model), tools=[slow])
    async with SQLiteStore("s.db") as store, ActorSystem(store, runners=[agent]) as system:
        ref = await system.spawn(agent, "go", execution_id="slow-run")
        await ref.result()

anyio.run(main)
"""


def _default_sigint() -> None:
    """In the child: Ctrl-C acts as in a terminal, also when this suite runs with SIGINT ignored
    (a background job of a non-interactive shell passes that on, and Python then keeps it)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_ctrl_c_during_a_sync_tool_names_the_run_it_waits_for_and_how_long(tmp_path: Path) -> None:
    seconds = 4
    script = tmp_path / "slow_app.py"
    script.write_text(textwrap.dedent(_SLOW_SCRIPT).replace("SECONDS", str(seconds)))
    proc = subprocess.Popen(
        [sys.executable, str(script)],
        cwd=tmp_path,
        preexec_fn=_default_sigint,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline() == "tool started\n"  # bounded: the script prints it, or exits
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=TIMEOUT)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=15)
    lines = err.splitlines()
    said = next((i for i, line in enumerate(lines) if "stopping: waiting for a run mid-step" in line), None)
    assert said is not None, err
    warning = lines[said]
    assert "execution_id='slow-run'" in warning and "node_id='turn:0/tool:slow'" in warning, warning
    assert "until its sync tool 'slow' returns (no timeout)" in warning, warning
    assert "tether resume slow-run --runner module:attr" in warning, warning
    assert said < lines.index("tool ended"), err  # said at once, not after the tool ended
