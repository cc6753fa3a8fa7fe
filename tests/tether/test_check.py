"""``tether check``: SQLite's integrity check on a store's file, as an operator runs it.

A sound file: exit 0 and "integrity check ok". A damaged one: each problem SQLite names on stdout,
then exit 1 with one ``StoreCorrupt`` line on stderr; the file is left as it was. A missing file is
a refusal that creates nothing; a PostgreSQL store is a refusal naming what to use instead.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import anyio
from test_cli import refusal, run

from stores import SQLiteStore
from stores.testing import make_message, make_row


def _store_with_runs(path: Path) -> None:
    async def fill() -> None:
        async with SQLiteStore(path) as store:
            for i in range(30):
                for seq in range(3):
                    await store.append(
                        make_row(
                            f"run-{i}", seq, messages=[make_message(j, size=300) for j in range(seq + 1)]
                        )
                    )

    anyio.run(fill)
    with sqlite3.connect(path) as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")


def test_check_reports_a_sound_file(tmp_path: Path) -> None:
    db = tmp_path / "tether.db"
    _store_with_runs(db)
    done = run("--store", f"sqlite:///{db.name}", "check", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"SQLiteStore({db.name!r}): integrity check ok"


def test_check_names_the_damage_and_exits_1(tmp_path: Path) -> None:
    db = tmp_path / "tether.db"
    _store_with_runs(db)
    data = bytearray(db.read_bytes())
    page = int.from_bytes(data[16:18], "big")
    for start in range(2 * page, len(data), 3 * page):  # every third page past the schema's
        data[start + 8 : start + 40] = b"\x5a" * 32
    db.write_bytes(bytes(data))
    before = db.read_bytes()
    done = run("--store", f"sqlite:///{db.name}", "check", cwd=tmp_path)
    name, message = refusal(done)
    assert name == "StoreCorrupt" and "is damaged" in message and "restore it from a backup" in message
    assert done.stdout.strip(), "the problems SQLite found are listed"
    assert db.read_bytes() == before


def test_check_of_a_missing_file_creates_nothing(tmp_path: Path) -> None:
    done = run("--store", "sqlite:///absent.db", "check", cwd=tmp_path)
    name, message = refusal(done)
    assert name == "StoreUnavailable" and "there is no SQLite database at 'absent.db'" in message
    assert list(tmp_path.iterdir()) == []


def test_check_of_a_postgres_store_says_what_to_use(tmp_path: Path) -> None:
    done = run("--store", "postgresql://nobody@127.0.0.1:1/none", "check", cwd=tmp_path)
    name, message = refusal(done)
    assert name == "StoreError" and "amcheck" in message
