"""The ``tether`` command line as a user runs it: exit statuses, ``--version``, ``--store`` and its sources.

Exit 0 on success, 1 on a refusal (one line on stderr, ``ErrorType: message``, no traceback), 2 on a
usage error. The store comes from ``--store`` (before or after the command), else ``$TETHER_STORE``,
else ``sqlite:///tether.db``. Every case runs the real console script (or ``python -m tether``).
"""

from __future__ import annotations

import os
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

import pytest

import stores
import tether
from tether.cli import build_parser
from tether.lowlevel import DEFAULT_STORE, store_url

TETHER = Path(sys.executable).parent / "tether"
TIMEOUT = 60.0


def run(
    *args: str, cwd: Path, store_env: str | None = None, module: bool = False
) -> subprocess.CompletedProcess[str]:
    """Run ``tether ARGS`` (or ``python -m tether ARGS``) with ``$TETHER_STORE`` set to ``store_env``."""
    env = {k: v for k, v in os.environ.items() if k != "TETHER_STORE"}
    if store_env is not None:
        env["TETHER_STORE"] = store_env
    command = [sys.executable, "-m", "tether"] if module else [str(TETHER)]
    return subprocess.run(
        [*command, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=TIMEOUT, check=False
    )


def refusal(done: subprocess.CompletedProcess[str]) -> tuple[str, str]:
    """The refusal a command printed: exit 1, one stderr line ``Type: message`` naming a TetherError."""
    assert done.returncode == 1, (done.returncode, done.stdout, done.stderr)
    assert "Traceback" not in done.stderr, done.stderr
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    name, _, message = lines[0].partition(": ")
    assert issubclass(getattr(stores, name), stores.TetherError), lines[0]
    return name, message


@pytest.mark.parametrize("module", [False, True], ids=["console-script", "python-m"])
def test_version(module: bool, tmp_path: Path) -> None:
    done = run("--version", cwd=tmp_path, module=module)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"tether {version('tether')}" == f"tether {tether.__version__}"


@pytest.mark.parametrize(
    "args", [[], ["bogus"], ["demo", "--bogus"], ["--store"], ["demo", "extra"]], ids=repr
)
def test_a_usage_error_exits_2_with_the_usage(args: list[str], tmp_path: Path) -> None:
    done = run(*args, cwd=tmp_path)
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert "usage: tether" in done.stderr and "Traceback" not in done.stderr, done.stderr
    assert not list(tmp_path.iterdir()), "a usage error must not touch a store"


def test_help_lists_the_commands(tmp_path: Path) -> None:
    done = run("--help", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "demo" in done.stdout and "--store URL" in done.stdout and "--version" in done.stdout


def test_a_store_that_is_not_a_database_is_a_one_line_refusal(tmp_path: Path) -> None:
    junk = tmp_path / "junk.db"
    junk.write_bytes(b"this is not a SQLite database, it is text" * 100)
    name, message = refusal(run("demo", "--store", f"sqlite:///{junk}", cwd=tmp_path))
    assert name == "StoreUnavailable", message
    assert junk.read_bytes().startswith(b"this is not"), "the refused file was changed"


def test_an_unknown_store_url_is_a_one_line_refusal_naming_it(tmp_path: Path) -> None:
    name, message = refusal(run("demo", "--store", "nosuch://somewhere", cwd=tmp_path))
    assert name == "InvalidStoreURL" and "'nosuch'" in message, message
    assert not list(tmp_path.iterdir()), "a refused URL must not create a store"


def test_the_store_comes_from_the_flag_after_before_then_the_environment(tmp_path: Path) -> None:
    # Unusable URLs (one scheme each), so each run stops at opening the store and names what it chose.
    env = "from-env://x"
    assert "'from-env'" in refusal(run("demo", cwd=tmp_path, store_env=env))[1]
    before = run("--store", "before://x", "demo", cwd=tmp_path, store_env=env)
    assert "'before'" in refusal(before)[1]
    both = run("--store", "before://x", "demo", "--store", "after://x", cwd=tmp_path, store_env=env)
    assert "'after'" in refusal(both)[1]
    after = run("demo", "--store", "after://x", cwd=tmp_path, store_env=env, module=True)
    assert "'after'" in refusal(after)[1]


def test_parsed_store_and_its_default(monkeypatch: pytest.MonkeyPatch) -> None:
    parser = build_parser()
    assert parser.parse_args(["demo"]).store is None
    assert parser.parse_args(["--store", "sqlite:///a.db", "demo"]).store == "sqlite:///a.db"
    assert parser.parse_args(["demo", "--store", "sqlite:///b.db"]).store == "sqlite:///b.db"
    monkeypatch.delenv("TETHER_STORE", raising=False)
    assert store_url(None) == DEFAULT_STORE == "sqlite:///tether.db"
    monkeypatch.setenv("TETHER_STORE", "sqlite:///env.db")
    assert store_url(None) == "sqlite:///env.db"
    assert store_url("sqlite:///flag.db") == "sqlite:///flag.db"
