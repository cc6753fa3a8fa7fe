"""Runner versions: a run belongs to the code it started with (``docs/versions.md``).

* A run records its runner's version on every row, and its runner's fingerprint on its first row
  (spawn, enqueue and fork alike; a fork keeps the version of the run it branches from);
  ``RunSummary.version`` shows it, and ``tether runs`` and ``tether show`` print it.
* A run paused under version "1" and resumed in another process that has only "2" is refused with
  ``RunnerVersionMismatch`` naming both versions; nothing is written and the run is still paused.
* With both versions registered, the paused "1" run finishes on its own tool while a new spawn runs
  "2"; a Supervisor paused deep inside a worker resumes on its own version too.
* Same version, changed code: a tool in flight whose schema changed or that is gone refuses the
  resume or the recovery of a crash (``RunnerChanged`` naming the tool; nothing written); a change
  of instructions only goes on, with a WARNING naming it and both fingerprints on the re-entry row.
* An unversioned run resumes on any build of its name, as before versions existed.
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import os
import signal
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest
from _versions_child import NAME, build
from conftest import Backend

from actors import (
    ActorSystem,
    Agent,
    Recover,
    Resume,
    RunnerChanged,
    RunnerNotFound,
    RunnerVersionMismatch,
    Supervisor,
    Swarm,
    interrupt,
    tool,
)
from actors.models import FunctionModel, Message, ModelReply, ToolCall
from stores import RECOVER, RESUME, TOOL_CALL, Checkpoint, Store
from tether.cli import main

pytestmark = pytest.mark.anyio

ROOT = Path(__file__).resolve().parents[3]
CHILD = Path(__file__).with_name("_versions_child.py")
ENV = {
    **os.environ,
    "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "tests"), str(CHILD.parent)]),
}


def _sqlite(tmp_path: Path) -> Backend:
    return Backend("sqlite", str(tmp_path / "tether.db"))


async def _child(backend: Backend, workdir: Path, mode: str, builds: str, *rest: str) -> dict[str, Any]:
    """Run ``_versions_child.py`` to its end; its one line of JSON."""
    command = [sys.executable, str(CHILD), mode, *backend.child_args(), str(workdir), builds, *rest]
    with anyio.fail_after(90):
        done = await anyio.run_process(command, env=ENV, check=False)
    assert done.returncode == 0, done.stderr.decode()
    return dict(json.loads(done.stdout.decode().splitlines()[-1]))


async def _paused(store: Store, runner: Agent | Supervisor | Swarm, eid: str, task: str = "ask-1") -> None:
    async with ActorSystem(store, runners=[runner]) as system:
        result = await (await system.spawn(runner, task, execution_id=eid)).result(timeout=30)
        assert result.status == "paused", result


async def _tether(backend: Backend, *args: str) -> tuple[int, str]:
    """``tether ARGS --store URL`` (in a thread of this process): its exit code and its output."""
    out = io.StringIO()

    def run() -> int:
        with contextlib.redirect_stdout(out):
            return main([*args, "--store", f"sqlite:///{backend.target}"])

    code = await anyio.to_thread.run_sync(run)
    return code, out.getvalue()


def _ids(rows: list[Checkpoint]) -> list[str]:
    return [row.checkpoint_id for row in rows]


# -- recording --------------------------------------------------------------------------------------


async def test_a_run_records_its_version_and_fingerprint(tmp_path: Path) -> None:
    v1 = build(tmp_path, "1")
    plain = build(tmp_path, None)
    async with _sqlite(tmp_path).open() as store, ActorSystem(store, runners=[v1]) as system:
        done = await (await system.spawn(v1, "o1", execution_id="r1")).result(timeout=30)
        assert done.output == "done: 1 refunded o1"
        rows = await system.history("r1")
        assert [row.state_snapshot["version"] for row in rows] == ["1"] * len(rows)
        recorded = rows[0].state_snapshot["fingerprint"]
        assert recorded == v1.fingerprint and len(recorded["digest"]) == 16
        assert set(recorded["parts"]) == {
            "agent:refund#instructions",
            "agent:refund#max_turns",
            "agent:refund/tool:refund",
        }
        assert all("fingerprint" not in row.state_snapshot for row in rows[1:])
        assert (await system.status("r1")).version == "1"

        queued = await system.enqueue(v1, "o2", execution_id="q1")
        first = (await system.history(queued))[0]
        assert (
            first.state_snapshot["version"] == "1" and first.state_snapshot["fingerprint"] == v1.fingerprint
        )
        assert (await system.status("q1")).version == "1"

        forked = await (await system.fork("r1", checkpoint_id=rows[1].checkpoint_id)).result(timeout=30)
        fork_rows = await system.history(forked.execution_id)
        assert {row.state_snapshot.get("version") for row in fork_rows} == {"1"}
        assert (await system.status(forked.execution_id)).version == "1"

        await (await system.spawn(plain, "o3", execution_id="u1")).result(timeout=30)
        unversioned = await system.history("u1")
        assert all("version" not in row.state_snapshot for row in unversioned)
        assert unversioned[0].state_snapshot["fingerprint"] == plain.fingerprint
        assert (await system.status("u1")).version is None

    with pytest.raises(ValueError, match="version"):
        Agent("x", FunctionModel(lambda m: "hi"), version="")
    with pytest.raises(ValueError, match="version"):
        Swarm("s", [v1], version=2)  # type: ignore[arg-type]


async def test_the_fingerprint_covers_the_definition_not_the_model(tmp_path: Path) -> None:
    def other(messages: list[Message]) -> str:
        return "another model"

    same = build(tmp_path, "1")
    assert build(tmp_path, "1").fingerprint == same.fingerprint
    rebuilt = Agent(NAME, FunctionModel(other), tools=same.tools, instructions="Refund orders.", version="1")
    assert rebuilt.fingerprint == same.fingerprint
    for variant in ("schema", "removed", "instructions"):
        assert build(tmp_path, "1", variant).fingerprint["digest"] != same.fingerprint["digest"]
    turns = Agent(NAME, FunctionModel(other), tools=same.tools, instructions="Refund orders.", max_turns=3)
    assert turns.fingerprint["digest"] != rebuilt.fingerprint["digest"]
    worker = build(tmp_path, None)
    one = Supervisor("ops", Agent("boss", FunctionModel(other)), {"billing": worker})
    two = Supervisor("ops", Agent("boss", FunctionModel(other)), {"refunds": worker})
    assert one.fingerprint["digest"] != two.fingerprint["digest"]
    assert "supervisor:ops/worker:billing/tool:refund" in one.fingerprint["parts"]


async def test_tether_runs_and_show_print_the_version(tmp_path: Path) -> None:
    backend = _sqlite(tmp_path)
    async with backend.open() as store:
        await _paused(store, build(tmp_path, "1"), "v-run")
        await _paused(store, build(tmp_path, None), "u-run")
    code, listed = await _tether(backend, "runs")
    assert code == 0, listed
    header, *lines = listed.splitlines()
    assert header.split()[5] == "VERSION"
    by_id = {line.split()[0]: line.split() for line in lines}
    assert by_id["v-run"][5] == "1" and by_id["u-run"][5] == "-"
    code, as_json = await _tether(backend, "runs", "--json")
    assert {s["execution_id"]: s["version"] for s in json.loads(as_json)} == {"v-run": "1", "u-run": None}
    code, shown = await _tether(backend, "show", "v-run")
    assert shown.splitlines()[0].split()[2:6] == ["runner", "refund", "version", "1"], shown


# -- resuming by version -----------------------------------------------------------------------------


async def test_a_process_without_the_runs_version_refuses_and_writes_nothing(tmp_path: Path) -> None:
    backend = _sqlite(tmp_path)
    async with backend.open() as store:
        await _paused(store, build(tmp_path, "1"), "p1")
        before = _ids(await store.history("p1"))
    refused = await _child(backend, tmp_path, "resume", "2", "p1")  # another process, only "2"
    assert refused["error"] == "RunnerVersionMismatch", refused
    assert (refused["version"], refused["available"]) == ("1", ["2"])
    assert "'1'" in refused["message"] and "'2'" in refused["message"]
    async with backend.open() as store, ActorSystem(store, runners=[build(tmp_path, "2")]) as system:
        assert _ids(await store.history("p1")) == before
        assert (await system.status("p1")).status == "paused"
        assert [p.execution_id for p in await system.pending()] == ["p1"]
        with pytest.raises(RunnerVersionMismatch) as info:
            await system.resume("p1", Resume(approved=True))
        assert isinstance(info.value, RunnerNotFound) and info.value.available == ("2",)
        assert type(info.value).__module__ == "actors" and RunnerChanged.__module__ == "actors"
        with pytest.raises(RunnerVersionMismatch):
            await system.fork("p1")
        assert _ids(await store.history("p1")) == before
    finished = await _child(backend, tmp_path, "resume", "2,1", "p1")  # a process with both
    assert finished == {"status": "completed", "output": "done: 1 refunded ask-1", "error": None}


async def test_both_versions_registered_old_runs_finish_on_old_code(tmp_path: Path) -> None:
    v1, v2 = build(tmp_path, "1"), build(tmp_path, "2")
    async with _sqlite(tmp_path).open() as store:
        await _paused(store, v1, "old")
        async with ActorSystem(store, runners=[v1, v2]) as system:
            new = await (await system.spawn(v2, "o2", execution_id="new")).result(timeout=30)
            assert new.output == "done: 2 refunded o2"
            old = await system.resume("old", Resume(approved=True), timeout=30)
            assert old.output == "done: 1 refunded ask-1"
            assert (await system.status("old")).version == "1"
            assert (await system.status("new")).version == "2"
            assert {row.state_snapshot["version"] for row in await system.history("old")} == {"1"}
        async with ActorSystem(store, runners=[v2, v1]) as system:  # the order given does not matter
            await _paused(store, v1, "old-2")
            assert (await system.resume("old-2", Resume(approved=True), timeout=30)).output == (
                "done: 1 refunded ask-1"
            )


async def test_an_unversioned_run_resumes_on_any_build(tmp_path: Path) -> None:
    async with _sqlite(tmp_path).open() as store:
        await _paused(store, build(tmp_path, None), "u1")
        async with ActorSystem(store, runners=[build(tmp_path, "2")]) as system:
            done = await system.resume("u1", Resume(approved=True), timeout=30)
            assert done.output == "done: 2 refunded ask-1"
            assert all("version" not in row.state_snapshot for row in await system.history("u1"))


def _supervisor(tag: str, version: str) -> Supervisor:
    @tool
    def refund(order: str) -> str:
        """Refund an order once approved."""
        interrupt("approve?", {"order": order})
        return f"{tag} refunded {order}"

    def worker_model(messages: list[Message]) -> str | ModelReply:
        if messages[-1].role == "tool":
            return f"worker: {messages[-1].content}"
        return ModelReply(tool_calls=[ToolCall("refund", {"order": "o7"})])

    def manager_model(messages: list[Message]) -> str | ModelReply:
        if messages[-1].role == "tool":
            return f"manager: {messages[-1].content}"
        return ModelReply(tool_calls=[ToolCall("delegate_to_billing", {"task": "refund o7"})])

    worker = Agent("billing", FunctionModel(worker_model), tools=[refund])
    return Supervisor(
        "ops", Agent("boss", FunctionModel(manager_model)), {"billing": worker}, version=version
    )


async def test_a_supervisor_paused_in_a_worker_resumes_on_its_own_version(tmp_path: Path) -> None:
    v1, v2 = _supervisor("v1", "1"), _supervisor("v2", "2")
    async with _sqlite(tmp_path).open() as store:
        await _paused(store, v1, "deep")
        pause = (await store.history("deep"))[-1]
        assert pause.agent_path == "supervisor:ops/worker:billing/tool:refund"
        async with ActorSystem(store, runners=[v2]) as system:
            with pytest.raises(RunnerVersionMismatch, match="'1'"):
                await system.resume("deep", Resume(approved=True))
        async with ActorSystem(store, runners=[v2, v1]) as system:
            done = await system.resume("deep", Resume(approved=True), timeout=30)
            assert done.output == "manager: worker: v1 refunded o7"
            assert (await system.status("deep")).version == "1"
            fresh = await (await system.spawn(v2, "go", execution_id="fresh")).result(timeout=30)
            assert fresh.status == "paused"
            done = await system.resume("fresh", Resume(approved=True), timeout=30)
            assert done.output == "manager: worker: v2 refunded o7"


# -- same version, changed code ----------------------------------------------------------------------


@pytest.mark.parametrize(("variant", "change"), [("schema", "schema"), ("removed", "removed")])
async def test_a_changed_tool_in_flight_refuses_the_resume(tmp_path: Path, variant: str, change: str) -> None:
    backend = _sqlite(tmp_path)
    async with backend.open() as store:
        await _paused(store, build(tmp_path, "1"), "c1")
        before = _ids(await store.history("c1"))
    refused = await _child(backend, tmp_path, "resume", f"1:{variant}", "c1")
    assert (refused["error"], refused["tool"]) == ("RunnerChanged", "refund"), refused
    assert change in refused["message"] and "'refund'" in refused["message"]
    async with backend.open() as store, ActorSystem(store, runners=[build(tmp_path, "1", variant)]) as system:
        with pytest.raises(RunnerChanged) as info:
            await system.resume("c1", Resume(approved=True))
        assert isinstance(info.value, RunnerNotFound) and info.value.tool == "refund"
        assert _ids(await store.history("c1")) == before
        assert (await system.status("c1")).status == "paused"
    finished = await _child(backend, tmp_path, "resume", "1", "c1")  # the code it started with
    assert finished["output"] == "done: 1 refunded ask-1"


async def test_only_instructions_changed_goes_on_with_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    v1, changed = build(tmp_path, "1"), build(tmp_path, "1", "instructions")
    async with _sqlite(tmp_path).open() as store:
        await _paused(store, v1, "i1")
        async with ActorSystem(store, runners=[changed]) as system:
            with caplog.at_level(logging.WARNING, logger="tether"):
                done = await system.resume("i1", Resume(approved=True), timeout=30)
            assert done.output == "done: 1 refunded ask-1"
            warned = [r.getMessage() for r in caplog.records if r.name.startswith("tether")]
            assert any(
                "runner changed" in m and "instructions of 'agent:refund' changed" in m for m in warned
            )
            resumed = next(row for row in await system.history("i1") if row.step_type == RESUME)
            recorded = resumed.node_input["fingerprints"]
            assert (recorded["old"], recorded["new"]) == (
                v1.fingerprint["digest"],
                changed.fingerprint["digest"],
            )
            assert recorded["changed"] == ["instructions of 'agent:refund' changed"]


async def test_a_crash_in_a_changed_tool_refuses_its_recovery(tmp_path: Path) -> None:
    """A real process dies inside the tool; the recovery meets the changed code."""
    backend = _sqlite(tmp_path)
    (tmp_path / "hold").touch()
    command = [sys.executable, str(CHILD), "spawn", *backend.child_args(), str(tmp_path), "1", "k1", "o9"]
    process = await anyio.open_process(command, env=ENV)
    try:
        with anyio.fail_after(60):
            while not (tmp_path / "entered-o9").exists():  # noqa: ASYNC110
                await anyio.sleep(0.01)
    finally:
        process.send_signal(signal.SIGKILL)
        await process.wait()
    (tmp_path / "hold").unlink()
    async with backend.open() as store:
        before = _ids(await store.history("k1"))
        assert (await store.latest("k1")).step_type == TOOL_CALL  # type: ignore[union-attr]
        async with ActorSystem(store, runners=[build(tmp_path, "1", "schema")]) as system:
            with pytest.raises(RunnerChanged, match="'refund'"):
                await (await system.send("k1", Recover())).result(timeout=30)
            assert _ids(await store.history("k1")) == before
            assert (await system.status("k1")).status == "orphaned"
        async with ActorSystem(store, runners=[build(tmp_path, "1", "instructions")]) as system:
            done = await system.resume("k1", timeout=30)
            assert done.output == "done: 1 refunded o9"
            recovered = next(row for row in await system.history("k1") if row.step_type == RECOVER)
            assert recovered.node_input["fingerprints"]["changed"] == [
                "instructions of 'agent:refund' changed"
            ]


async def test_a_sweep_without_the_version_leaves_the_run_and_says_why(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    v1, v2 = build(tmp_path, "1"), build(tmp_path, "2")
    async with _sqlite(tmp_path).open() as store:
        async with ActorSystem(store, runners=[v1]) as system:
            await system.enqueue(v1, "o5", execution_id="w1")
        before = _ids(await store.history("w1"))
        async with ActorSystem(store, runners=[v2]) as system:
            with caplog.at_level(logging.WARNING, logger="tether"):
                assert await system.sweep() == 0
                assert await system.sweep() == 0
            waits = [
                r.getMessage() for r in caplog.records if "waits for its runner version" in r.getMessage()
            ]
            assert len(waits) == 1, waits  # once, not at every sweep
            assert waits[0].startswith("event='run waits for its runner version' execution_id='w1'"), waits
            assert "version='1'" in waits[0], waits
            assert f"runner={v1.name!r}" in waits[0], waits
            assert "hint='a worker with that version takes it (docs/versions.md)'" in waits[0], waits
            assert _ids(await store.history("w1")) == before
            assert (await system.status("w1")).status == "queued"
        async with ActorSystem(store, runners=[v2, v1]) as system:
            assert await system.sweep() == 1
            assert (await system.ref("w1").result(timeout=10)).output == "done: 1 refunded o5"
