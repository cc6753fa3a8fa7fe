"""The runtime logs through the standard-library logger ``"tether"`` only: never stdout, no handler."""

from __future__ import annotations

import logging
import subprocess
import sys
import textwrap
from typing import Any

import anyio
import pytest

from actors import Actor, ActorContext, ActorSystem


class CrashOnce(Actor):
    """Raises on its first message; a permanent actor is then restarted."""

    crashed = False

    async def receive(self, ctx: ActorContext, message: Any) -> Any:
        if not CrashOnce.crashed:
            CrashOnce.crashed = True
            raise RuntimeError("boom")
        ctx.log.info("actor.handled", message=message)
        return message


@pytest.mark.anyio
async def test_crash_and_restart_go_to_the_tether_logger_not_stdout(
    caplog: pytest.LogCaptureFixture, capsys: pytest.CaptureFixture[str]
) -> None:
    CrashOnce.crashed = False
    caplog.set_level(logging.INFO, logger="tether")
    with anyio.fail_after(5):
        async with ActorSystem() as system:
            ref = await system.start(CrashOnce, name="crashy")
            await ref.send("first")
            assert await ref.ask("second", timeout=2) == "second"
    events = [(r.name, r.levelno, r.getMessage()) for r in caplog.records]
    crash = [e for e in events if "actor.crash" in e[2]]
    restart = [e for e in events if "actor.restart" in e[2]]
    handled = [e for e in events if "actor.handled" in e[2]]
    assert crash and crash[0][:2] == ("tether", logging.WARNING)
    assert "actor_id='crashy'" in crash[0][2] and "boom" in crash[0][2]
    assert restart and restart[0][:2] == ("tether", logging.WARNING)
    assert handled and handled[0][:2] == ("tether", logging.INFO)  # ctx.log is the same logger
    assert "message='second'" in handled[0][2]
    assert capsys.readouterr().out == ""


def test_an_unconfigured_application_sees_warnings_on_stderr_only() -> None:
    """No logging set up: WARNING events reach stderr through Python's last-resort handler, INFO
    events are not built, nothing reaches stdout, and the package added no handler of its own."""
    code = textwrap.dedent(
        """
        import logging
        import anyio
        from actors import Actor, ActorSystem

        class Crash(Actor):
            async def receive(self, ctx, message):
                ctx.log.info("actor.quiet_info")
                raise RuntimeError("boom")

        async def main():
            async with ActorSystem() as system:
                ref = await system.start(Crash, name="crashy")
                await ref.send("x")
                await anyio.sleep(0.2)

        anyio.run(main)
        assert logging.getLogger("tether").handlers == []
        assert logging.getLogger().handlers == []
        """
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=60, check=False)
    stderr = done.stderr.decode()
    assert done.returncode == 0, stderr
    assert done.stdout == b""
    assert "actor.crash" in stderr and "actor.restart" in stderr
    assert "actor.quiet_info" not in stderr
