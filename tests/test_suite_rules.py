"""The suite's own rules, checked by running pytest: the stress marker is opt-in, and every
PostgreSQL test skips without the server (or fails when ``REQUIRE_POSTGRES=1``) instead of failing.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import os
import socket
import subprocess
import sys
from pathlib import Path

import asyncpg
import pytest
from conftest import SSL_MODE, PgSchema

ROOT = Path(__file__).resolve().parents[1]
TESTS = Path(__file__).resolve().parent

pytest_plugins = ["pytester"]


def _pytest(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args],
        cwd=ROOT,
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def test_stress_tests_run_only_when_asked_for() -> None:
    default = _pytest("--collect-only", "-q", "tests/stores/test_races.py")
    asked = _pytest("--collect-only", "-q", "-m", "stress", "tests/stores/test_races.py")
    assert default.returncode == 0 and asked.returncode == 0, (default.stdout, asked.stdout)
    stress = [line for line in asked.stdout.splitlines() if "::" in line]
    assert stress, asked.stdout
    assert not [line for line in stress if line in default.stdout.splitlines()], default.stdout
    assert "deselected" in default.stdout


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


MODULES = [
    "tests/stores/postgres/test_postgres_errors.py",
    "tests/stores/test_bad_input.py",
]


def test_postgres_tests_skip_without_the_server_and_fail_when_it_is_required() -> None:
    env = {"TETHER_PG_DSN": f"postgresql://nobody@127.0.0.1:{_closed_port()}/none", "REQUIRE_POSTGRES": "0"}
    skipped = _pytest("-q", "-x", *MODULES, env=env)
    assert skipped.returncode == 0, skipped.stdout[-3000:]
    summary = skipped.stdout.splitlines()[-1]
    assert " skipped" in summary and "failed" not in summary and "error" not in summary, summary
    required = _pytest("-q", "-m", "postgres", *MODULES, env={**env, "REQUIRE_POSTGRES": "1"})
    assert required.returncode == 1, required.stdout[-3000:]
    assert "REQUIRE_POSTGRES=1, so this is a failure, not a skip" in required.stdout
    assert " passed" not in required.stdout.splitlines()[-1]


def test_a_postgres_test_without_the_fixture_is_refused(pytester: pytest.Pytester) -> None:
    pytester.makeconftest((TESTS / "conftest.py").read_text())
    pytester.makepyfile(
        test_bad="""
        import pytest

        @pytest.mark.postgres
        def test_talks_to_the_server_itself():
            pass

        def test_takes_the_schema_unmarked(pg_schema):
            pass
        """
    )
    pytester.makeini("[pytest]\nmarkers =\n    postgres: needs the server\n    stress: long\n")
    done = pytester.runpytest_subprocess("--collect-only", "-q")
    assert done.ret == pytest.ExitCode.USAGE_ERROR
    text = done.stdout.str() + done.stderr.str()
    assert "test_talks_to_the_server_itself: marked postgres but does not take pg_schema" in text
    assert "test_takes_the_schema_unmarked: " not in text  # not refused: marked for it
    pytester.makepyfile(
        test_bad="import pytest\n\ndef test_takes_the_schema_unmarked(pg_schema):\n    pass\n"
    )
    done = pytester.runpytest_subprocess("--collect-only", "-q", "-m", "not postgres")
    assert done.ret == pytest.ExitCode.NO_TESTS_COLLECTED, done.stdout.str()


def _unread_errors_of_cut_connects(dsn: str, *, stop_at_first: bool) -> list[str]:
    """Start ``asyncpg.connect(dsn)`` and cancel it 0 to 29 loop turns later, three times over, on
    a loop of its own; the errors the loop was handed meanwhile (futures whose error nobody read)."""
    errors: list[str] = []

    async def cut_connects() -> None:
        loop = asyncio.get_running_loop()
        loop.set_exception_handler(lambda _, context: errors.append(repr(context.get("exception"))))
        for attempt in range(90):
            connect = loop.create_task(asyncpg.connect(dsn, timeout=10))
            for _ in range(attempt % 30):
                await asyncio.sleep(0)
            connect.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                conn = await connect
                await conn.close()
            await asyncio.sleep(0)
            gc.collect()  # an unread error is reported when its future is collected
            if errors and stop_at_first:
                return

    asyncio.run(cut_connects())
    return errors


def test_the_suites_connections_skip_the_ssl_probe_whose_cut_connects_leave_unread_errors(
    pg_schema: PgSchema,
) -> None:
    """Why ``conftest.SSL_MODE`` is there: with asyncpg's default ``sslmode=prefer``, connects cut
    short at the wrong turn leave an error nobody reads (which fails whatever test is running);
    with the suite's ``PGSSLMODE``, none does."""
    assert os.environ["PGSSLMODE"] == SSL_MODE == "disable"
    assert _unread_errors_of_cut_connects(pg_schema.dsn, stop_at_first=False) == []
    probing = pg_schema.dsn + ("&" if "?" in pg_schema.dsn else "?") + "sslmode=prefer"
    unread = _unread_errors_of_cut_connects(probing, stop_at_first=True)
    assert unread and "unexpected connection_lost() call" in unread[0], unread
