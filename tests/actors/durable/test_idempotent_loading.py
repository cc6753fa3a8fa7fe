"""An ``@idempotent`` key does not depend on how its module was loaded.

A run spawned by a script run as ``__main__`` pauses after a charge; a second process that imports
the same module by name resumes it: the resumed tool finds the cached charge, so the ledger (a file
each charge appends to and fsyncs) holds one line. Both processes are real; the script lives in a
fresh directory, alone and inside a package. A run paused by a script whose keys still named the
module ``__main__`` (as earlier versions did) and resumed by the script after the upgrade finds its
charge too.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from actors.lowlevel import module_name

APP = textwrap.dedent(
    '''
    import os
    import sys

    import anyio

    from actors import ActorSystem, Agent, Resume, idempotent, interrupt, tool
    from actors.models import FunctionModel, Message, ModelReply, ToolCall
    from stores import SQLiteStore

    if os.environ.get("OLD_KEYS"):  # keys as earlier versions built them: the module named as loaded
        from actors.lowlevel import idempotent_module as keys

        keys.module_name = lambda module: module

    LEDGER = os.environ["LEDGER"]


    @idempotent
    async def charge(order: str) -> str:
        with open(LEDGER, "a") as ledger:
            ledger.write(order + "\\n")
            ledger.flush()
            os.fsync(ledger.fileno())
        return "charged " + order


    @tool
    async def refund(order: str) -> str:
        """Charge, then ask a human."""
        done = await charge(order)
        decision = interrupt("approve?", {"order": order})
        return done + (" approved" if decision.approved else " refused")


    def model(messages: list[Message]) -> str | ModelReply:
        if messages[-1].role == "tool":
            return "done: " + messages[-1].content
        return ModelReply(tool_calls=[ToolCall("refund", {"order": messages[-1].content})])


    agent = Agent("loading", FunctionModel(model), tools=[refund])


    async def spawn(db: str) -> None:
        async with SQLiteStore(db) as store, ActorSystem(store, runners=[agent]) as system:
            result = await (await system.spawn(agent, "o1", execution_id="run-1")).result(timeout=30)
            print(result.status, charge.__wrapped__.__module__)


    async def resume(db: str) -> None:
        async with SQLiteStore(db) as store, ActorSystem(store, runners=[agent]) as system:
            result = await system.resume("run-1", Resume(approved=True))
            print(result.output, charge.__wrapped__.__module__)


    if __name__ == "__main__":
        anyio.run(spawn if sys.argv[1] == "spawn" else resume, sys.argv[2])
    '''
)


@pytest.mark.parametrize("package", ["", "shop"])
def test_a_run_spawned_as_main_and_resumed_by_import_charges_once(tmp_path: Path, package: str) -> None:
    folder = tmp_path / package if package else tmp_path
    folder.mkdir(exist_ok=True)
    if package:
        (folder / "__init__.py").write_text("")
    (folder / "app.py").write_text(APP)
    module = f"{package}.app" if package else "app"
    db, ledger = tmp_path / "tether.db", tmp_path / "ledger"
    env = {"LEDGER": str(ledger), "PATH": "/usr/bin:/bin"}

    def run(*args: str) -> str:
        done = subprocess.run(
            [sys.executable, *args], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
        )
        assert done.returncode == 0, done.stderr
        return done.stdout.strip()

    assert run(str(folder / "app.py"), "spawn", str(db)) == "paused __main__"
    assert ledger.read_text().splitlines() == ["o1"]
    code = f"import anyio, {module} as app; anyio.run(app.resume, {str(db)!r})"
    assert run("-c", code) == f"done: charged o1 approved {module}"
    assert ledger.read_text().splitlines() == ["o1"]  # the resumed tool found the cached charge


def test_module_names_outside_main_are_kept() -> None:
    assert module_name("shop.app") == "shop.app"
    assert module_name(__name__) == __name__


def test_a_script_run_paused_before_the_upgrade_finds_its_charge(tmp_path: Path) -> None:
    (tmp_path / "app.py").write_text(APP)
    db, ledger = tmp_path / "tether.db", tmp_path / "ledger"
    env = {"LEDGER": str(ledger), "PATH": "/usr/bin:/bin"}

    def run(mode: str, **extra: str) -> str:
        done = subprocess.run(
            [sys.executable, "app.py", mode, str(db)],
            cwd=tmp_path,
            env={**env, **extra},
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr
        return done.stdout.strip()

    assert run("spawn", OLD_KEYS="1") == "paused __main__"
    assert run("resume") == "done: charged o1 approved __main__"
    assert ledger.read_text().splitlines() == ["o1"]
