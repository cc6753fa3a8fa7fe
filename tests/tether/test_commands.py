"""Every command of ``tether`` against both backends, on a store written by ``tether demo`` and by
the tests: the output checked, ``--json`` parsed, exit 0 / 1 (one stderr line naming the refusal)
/ 2 (usage). Most runs call ``tether.cli.main`` in this process (the console script is the same
function); the exit statuses and the progress line are also checked through the console script.
"""

from __future__ import annotations

import json
import os
import pty
import re
import subprocess
import threading
from pathlib import Path

import anyio
from _cli_support import NESTED, RUNNER, TETHER, console, demo_store, tether, url_of, write_paused
from conftest import Backend

from stores import Checkpoint, SQLiteStore


def test_reading_commands(store_backend: Backend, tmp_path: Path) -> None:
    url = demo_store(store_backend, tmp_path, paused=["wait-1"])

    listed = tether(url, "runs")
    assert listed.code == 0, listed
    lines = listed.out.splitlines()
    assert lines[0].split()[:3] == ["EXECUTION_ID", "STATUS", "RUNNER"]
    by_id = {line.split()[0]: line.split() for line in lines[1:]}
    assert by_id["orphan"][1:4] == ["orphaned", "refund-bot", "turn:0"]
    assert by_id["nested"][1:5] == ["orphaned", "ops", "turn:0/tool:refund", "5"]
    assert (
        by_id["wait-1"][1] == "paused"
        and "waiting for manager_approval" in lines[1 + list(by_id).index("wait-1")]
    )
    demo_runs = [eid for eid in by_id if eid.startswith(("small-", "large-"))]
    assert len(demo_runs) == 2 and all(by_id[eid][1] == "completed" for eid in demo_runs)

    summaries = tether(url, "runs", "--json").json()
    assert [s["execution_id"] for s in summaries] == list(by_id)  # one order: newest first
    large = next(s for s in summaries if s["execution_id"].startswith("large-"))
    assert (large["status"], large["rows"], large["node_id"]) == ("completed", 6, "run_end")
    assert '"refunded":true' in large["output"]
    assert [s["execution_id"] for s in tether(url, "runs", "--status", "paused", "--json").json()] == [
        "wait-1"
    ]
    assert {s["execution_id"] for s in tether(url, "runs", "--status", "orphaned", "--json").json()} == {
        "orphan",
        "nested",
    }
    assert [s["execution_id"] for s in tether(url, "runs", "--runner", "ops", "--json").json()] == ["nested"]
    assert len(tether(url, "runs", "--limit", "2", "--json").json()) == 2

    # show: the nested run's paths as a tree, one line per row.
    shown = tether(url, "show", "nested")
    assert shown.code == 0, shown
    assert shown.out.splitlines()[0].split() == ["nested", "orphaned", "runner", "ops", "5", "rows"]
    timeline = [line for line in shown.out.splitlines() if re.match(r"^\d+ ", line)]
    assert [line.split()[1] for line in timeline] == [node for _, node, _, _ in NESTED]
    tree = next(line for line in shown.out.splitlines() if line.startswith("SEQ")).index("AGENT PATH")
    assert [line[tree:] for line in timeline] == [
        "supervisor:ops",
        "└ tool:delegate_to_support",
        "└ worker:support",
        "  └ agent:billing",
        "    └ tool:refund",
    ]
    document = tether(url, "show", "nested", "--json").json()
    assert document["summary"]["status"] == "orphaned"
    assert [(r["seq"], r["depth"], r["sync"]) for r in document["rows"]] == [
        (0, 1, "-"),
        (1, 2, "-"),
        (2, 2, "-"),
        (3, 3, "-"),
        (4, 4, "-"),
    ]

    # diff: from the first model call to the answer of the approved large refund.
    eid = large["execution_id"]
    diffed = tether(url, "diff", eid, "0", "4")
    assert diffed.code == 0, diffed
    assert "messages: 1 shared, 2 added, 0 removed" in diffed.out
    assert 'calls refund({"order":"1042","amount":50000})' in diffed.out
    assert "~ turn: 0 -> 1" in diffed.out
    diff = tether(url, "diff", eid, "0", "4", "--json").json()
    assert [m["role"] for m in diff["added"]] == ["assistant", "tool"] and diff["removed"] == []
    assert diff["keys"] == [{"key": "turn", "change": "changed", "before": 0, "after": 1}]
    backwards = tether(url, "diff", eid, "4", "0", "--json").json()
    assert [m["role"] for m in backwards["removed"]] == ["assistant", "tool"] and backwards["added"] == []

    # pending: the paused run, in pages.
    pending = tether(url, "pending", "--json").json()
    assert [(p["execution_id"], p["reason"], p["context"]) for p in pending] == [
        ("wait-1", "manager_approval", {"order": "1042", "amount": 50000})
    ]
    table = tether(url, "pending")
    assert table.out.splitlines()[1].split()[:4] == [
        "wait-1",
        "manager_approval",
        "agent:refund-bot/tool:refund",
        "turn:0/tool:refund",
    ]

    # refusals: one line, exit 1.
    assert tether(url, "show", "nobody").refusal() == (
        "RunNotFound",
        "run 'nobody' has no checkpoints in this store",
    )
    name, message = tether(url, "diff", eid, "0", "99").refusal()
    assert name == "RunNotFound" and "no row at seq 99" in message
    assert tether(url, "diff", "nobody", "0", "1").refusal()[0] == "RunNotFound"


def test_commands_that_decide_and_write(store_backend: Backend, tmp_path: Path) -> None:
    url = demo_store(store_backend, tmp_path, paused=["wait-1", "wait-2", "wait-3", "wait-4"])

    approved = tether(url, "approve", "wait-1", "--meta", "approver=ops-lead", "--runner", RUNNER)
    assert approved.code == 0, approved
    assert re.search(r"\[pid \d+\] charged a refund of 50000 cents on order 1042", approved.out)
    assert approved.out.splitlines()[-1].startswith('wait-1: completed · Done: {"refunded":true')
    # The second approval is refused and writes nothing.
    assert tether(url, "approve", "wait-1", "--runner", RUNNER).refusal()[0] == "AlreadyResumed"
    assert tether(url, "show", "wait-1", "--json").json()["summary"]["rows"] == 6

    rejected = tether(url, "reject", "wait-2", "--runner", RUNNER, "--json").json()
    assert (rejected["status"], rejected["output"]) == (
        "completed",
        'Done: {"refunded":false,"order":"1042"}',
    )

    # Without the runner, the decision claims the pause and hands the run to the fleet; a process
    # with the runner (here `resume`, as a worker's sweep would) finishes it with that decision.
    handed = tether(url, "approve", "wait-3", "--meta", "approver=night-shift")
    assert handed.out.strip() == (
        "wait-3: approved (manager_approval at turn:0/tool:refund); handed to the fleet: a worker finishes the run"
    ), handed
    assert tether(url, "approve", "wait-3").refusal()[0] == "AlreadyResumed"
    claimed = tether(url, "show", "wait-3", "--json").json()
    assert claimed["summary"]["status"] == "approved" and claimed["rows"][-1]["step_type"] == "resume"
    shown = tether(url, "show", "wait-3").out.splitlines()
    assert shown[0].startswith("wait-3  approved, waiting for a worker  runner refund-bot"), shown
    assert (
        shown[1]
        == "  to go on, a worker finishes it: tether worker --runner MODULE:ATTR (or here: tether resume wait-3 --runner MODULE:ATTR)"
    )
    listed = {
        line.split()[0]: line for line in tether(url, "runs", "--status", "approved").out.splitlines()[1:]
    }
    assert list(listed) == ["wait-3"] and "waiting for a worker" in listed["wait-3"], listed
    finished = tether(url, "resume", "wait-3", "--runner", RUNNER)
    assert finished.out.splitlines()[-1].startswith('wait-3: completed · Done: {"refunded":true'), finished
    assert "charged a refund of 50000" in finished.out
    as_json = tether(url, "reject", "wait-4", "--json").json()
    assert as_json["claimed"]["reason"] == "manager_approval" and as_json["summary"]["status"] == "approved"

    # A run that no decision can reach any more: cancelled (a cancel needs no runner).
    cancelled = tether(url, "cancel", "wait-4", "--reason", "not needed")
    assert cancelled.out.strip() == "wait-4: failed · cancelled: not needed", cancelled
    assert tether(url, "pending", "--json").json() == []

    recovered = tether(url, "resume", "orphan", "--runner", RUNNER, "--json").json()
    assert (recovered["status"], recovered["output"]) == (
        "completed",
        'Done: {"refunded":true,"order":"1042","amount":20}',
    )
    steps = [r["step_type"] for r in tether(url, "show", "orphan", "--json").json()["rows"]]
    assert steps[:2] == ["llm_call", "recover"] and steps[-3:] == ["tool_call", "llm_call", "run_end"], steps

    forked = tether(url, "fork", "wait-2", "--input", "and once more", "--runner", RUNNER, "--json").json()
    assert forked["execution_id"] != "wait-2" and forked["status"] == "completed"
    fork_rows = tether(url, "show", forked["execution_id"], "--json").json()["rows"]
    assert fork_rows[0]["node_id"] == "fork_origin"
    assert tether(url, "fork", "wait-2", "--at", "nope", "--runner", RUNNER).refusal()[0] == "RunNotFound"

    # prune: nothing is a week old; with 0s every completed run goes whole, the orphan stays.
    assert tether(url, "prune", "--older-than", "1w").out.strip() == "deleted 0 rows older than 7d"
    before = {s["execution_id"]: s for s in tether(url, "runs", "--json").json()}
    completed_rows = sum(s["rows"] for s in before.values() if s["status"] == "completed")
    pruned = tether(url, "prune", "--older-than", "0s", "--json").json()
    assert pruned["deleted"] >= completed_rows > 0
    after = {s["execution_id"]: s["status"] for s in tether(url, "runs", "--json").json()}
    assert "completed" not in after.values() and after["nested"] == "orphaned"

    migrated = tether(url, "migrate")
    assert migrated.code == 0 and migrated.out.strip().endswith("is at the current schema"), migrated


def test_exit_statuses_of_the_console_script(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'fresh.db'}"
    assert console("migrate", "--store", url, cwd=tmp_path).code == 0
    assert console("runs", "--store", url, "--json", cwd=tmp_path).json() == []
    name, _ = console("show", "nobody", "--store", url, cwd=tmp_path).refusal()
    assert name == "RunNotFound"
    for usage in (
        ["prune", "--older-than", "7x"],
        ["runs", "--status", "finished"],
        ["runs", "--limit", "0"],
        ["resume", "some-run"],  # --runner is required
        ["approve", "x", "--meta", "novalue"],
        ["approve", "x", "--runner", "no.such.module:agent"],
        ["approve", "x", "--runner", "tether._demo:DemoBot"],  # a callable that is not a runner
        ["bench", "nosuch"],
        ["diff", "x", "0", "one"],
    ):
        done = console(*usage, "--store", url, cwd=tmp_path)
        assert done.code == 2, (usage, done)
        assert "usage: tether" in done.err and "Traceback" not in done.err, (usage, done.err)


def test_long_commands_draw_progress_on_a_terminal_only(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'p.db'}"
    assert console("migrate", "--store", url, cwd=tmp_path).code == 0  # prune refuses a missing file
    piped = console("prune", "--older-than", "7d", "--store", url, cwd=tmp_path)
    assert (piped.code, piped.err) == (0, "")
    out, drawn = _on_a_terminal(["prune", "--older-than", "7d", "--store", url], tmp_path, "stderr")
    assert out.strip() == "deleted 0 rows older than 7d"
    assert "pruning rows older than 7d" in drawn and "[" in drawn, drawn
    assert re.search(r"pruning rows older than 7d: done in \d+\.\d s", drawn), drawn


def test_bench_runs_a_benchmark_of_the_checkout(tmp_path: Path) -> None:
    done = console("bench", "mailbox", "--tiny", "--rounds", "1", cwd=tmp_path)
    assert done.code == 0, done
    assert "tether/raw" in done.out or "ratio" in done.out.lower(), done.out
    failed = console("bench", "mailbox", "--no-such-option", cwd=tmp_path)
    assert failed.code == 1 and failed.err.splitlines()[-1] == (
        "bench: benchmarks.mailbox exited with status 2"
    ), failed


def test_show_follows_a_run_into_its_next_leg(store_backend: Backend, tmp_path: Path) -> None:
    url = url_of(store_backend)
    anyio.run(write_paused, store_backend, ["wait-1", "wait-2"])
    env = {k: v for k, v in os.environ.items() if k != "TETHER_STORE"}
    started = [
        subprocess.Popen(
            [str(TETHER), "show", eid, *extra, "--follow", "--store", url],
            cwd=tmp_path,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for eid, extra in (("wait-1", ["--json"]), ("wait-2", []))
    ]
    # A hung follower is killed (its reads below then end), so the test fails instead of hanging.
    watchdog = threading.Timer(90, lambda: [proc.kill() for proc in started])
    watchdog.start()
    try:
        as_json, as_text = started
        assert as_json.stdout is not None and as_text.stdout is not None
        replayed = [json.loads(as_json.stdout.readline()) for _ in range(3)]  # replay to the pause
        assert [e["type"] for e in replayed] == ["step_started", "step_started", "paused"]
        while True:  # the text form: the table, whose last row is the pause
            line = as_text.stdout.readline()
            assert line, "the text follower ended before printing its table"
            if line.startswith("2 "):
                break
        for eid in ("wait-1", "wait-2"):
            assert tether(url, "approve", eid, "--runner", RUNNER).code == 0
        json_out, _ = as_json.communicate(timeout=60)
        text_out, _ = as_text.communicate(timeout=60)
    finally:
        watchdog.cancel()
        for proc in started:
            if proc.poll() is None:
                proc.kill()
    assert (as_json.returncode, as_text.returncode) == (0, 0)
    live = [json.loads(line) for line in json_out.splitlines()]
    assert [e["type"] for e in live] == ["resumed", "tool_finished", "step_started", "run_ended"]
    assert live[-1]["status"] == "completed" and live[0]["resume"]["approved"] is True
    lines = text_out.splitlines()
    assert [line.split()[1] for line in lines] == ["Resumed", "ToolFinished", "StepStarted", "RunEnded"]
    assert "completed · Done:" in lines[-1]
    # A completed run has nothing more to follow: the command ends at once.
    done = tether(url, "show", "wait-1", "--follow")
    assert done.code == 0 and done.out.splitlines()[-1].split()[1] == "run_end"


def _on_a_terminal(args: list[str], cwd: Path, stream: str = "stdout", **env: str) -> tuple[str, str]:
    """Run ``tether ARGS`` with ``stream`` (stdout or stderr) on a terminal (a pty) and the other
    one piped: (what the pipe got, what the terminal got)."""
    leader, follower = pty.openpty()
    try:
        done = subprocess.run(
            [str(TETHER), *args],
            cwd=cwd,
            env={**{k: v for k, v in os.environ.items() if k not in ("TETHER_STORE", "NO_COLOR")}, **env},
            stdout=follower if stream == "stdout" else subprocess.PIPE,
            stderr=follower if stream == "stderr" else subprocess.PIPE,
            timeout=60,
            check=False,
        )
        os.close(follower)
        drawn = b""
        while True:
            try:
                chunk = os.read(leader, 4096)
            except OSError:  # the pty's other end is closed: everything was read
                break
            if not chunk:
                break
            drawn += chunk
    finally:
        os.close(leader)
    piped = done.stdout if stream == "stderr" else done.stderr
    assert done.returncode == 0, piped
    return piped.decode(), drawn.decode()


async def _ended(path: Path) -> None:
    async with SQLiteStore(path) as store:
        await store.append(Checkpoint(execution_id="done", seq=0, runner="bot", node_id="turn:0"))
        await store.append(
            Checkpoint(execution_id="done", seq=1, runner="bot", node_id="run_end", step_type="run_end")
        )


def test_statuses_are_coloured_on_a_terminal_only(tmp_path: Path) -> None:
    anyio.run(_ended, tmp_path / "c.db")
    url = f"sqlite:///{tmp_path / 'c.db'}"
    coloured = _on_a_terminal(["runs", "--store", url], tmp_path)[1]
    assert "\x1b[32mcompleted\x1b[0m" in coloured, coloured
    assert "\x1b[32mcompleted" in _on_a_terminal(["show", "done", "--store", url], tmp_path)[1]
    assert "\x1b[" not in _on_a_terminal(["runs", "--store", url], tmp_path, NO_COLOR="1")[1]
    assert "\x1b[" not in console("runs", "--store", url, cwd=tmp_path).out
