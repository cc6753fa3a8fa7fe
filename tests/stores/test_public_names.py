"""Public names report the module ``stores``; the rewrite leaves msgspec decoding intact; asyncpg
is imported only when the PostgreSQL backend is used."""

from __future__ import annotations

import subprocess
import sys
from datetime import UTC, datetime

import msgspec
import pytest

import stores
from stores import Cached, Checkpoint, PendingInterrupt, ReEntry


def test_every_public_class_and_function_reports_a_public_module() -> None:
    """``stores``, or ``actors`` for a name ``actors`` re-exports (the errors report ``actors.X``
    once ``actors`` is imported); either way the module named holds the name."""
    for name in stores.__all__:
        obj = getattr(stores, name)
        if isinstance(obj, type) or callable(obj):
            module = obj.__module__
            assert module in ("stores", "actors"), f"stores.{name}.__module__ is {module!r}"
            assert getattr(sys.modules[module], name) is obj
    assert stores.SQLiteStore.__module__ == "stores"
    assert stores.PostgresStore.__module__ == "stores"


def test_in_a_process_without_actors_the_errors_report_stores() -> None:
    out = _fresh_python(
        "import sys, stores; print(stores.RunExists.__module__, stores.Checkpoint.__module__, "
        "stores.open_store.__module__, 'actors' in sys.modules)"
    )
    assert out == "stores stores stores False"


def test_structs_decode_after_the_rewrite() -> None:
    row = Checkpoint(
        execution_id="e",
        seq=1,
        runner="r",
        node_id="turn:0",
        state_snapshot={"messages": [{"role": "user"}]},
        agent_path="agent:a",
        created_at=datetime(2024, 1, 2, 3, 4, 5, 6, tzinfo=UTC),
    )
    pending = PendingInterrupt(execution_id="e", reason="approve", context={"amount": 1})
    for codec in (msgspec.json, msgspec.msgpack):
        assert codec.decode(codec.encode(row), type=Checkpoint) == row
        assert codec.decode(codec.encode(pending), type=PendingInterrupt) == pending
        entry = ReEntry(step=row, newest=row, resume={"approved": True})
        assert codec.decode(codec.encode(entry), type=ReEntry) == entry
        assert codec.decode(codec.encode(Cached(None)), type=Cached) == Cached(None)
    with pytest.raises(msgspec.ValidationError):
        msgspec.json.decode(
            b'{"execution_id": "e", "seq": "one", "runner": "r", "node_id": "n"}', type=Checkpoint
        )


def _fresh_python(code: str) -> str:
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    return done.stdout.strip()


def test_import_stores_does_not_import_asyncpg_until_postgres_is_used() -> None:
    out = _fresh_python(
        "import sys, stores, stores.testing; print('asyncpg' in sys.modules); "
        "stores.open_store('sqlite:///x.db'); print('asyncpg' in sys.modules); "
        "from stores import PostgresStore; print('asyncpg' in sys.modules, PostgresStore.__module__)"
    )
    assert out.split("\n") == ["False", "False", "True stores"]


def test_dir_lists_the_lazy_backend() -> None:
    assert "PostgresStore" in dir(stores)
    with pytest.raises(AttributeError, match="no_such_name"):
        stores.no_such_name  # type: ignore[attr-defined]  # noqa: B018
