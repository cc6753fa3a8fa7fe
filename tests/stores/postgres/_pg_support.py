"""Row builders, helpers and the two fixtures (``schema``, ``store``) of the PostgreSQL-only tests.

A test module takes the fixtures by importing ``schema_fixture`` and ``store_fixture``.
"""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from conftest import Counter, PgSchema, pg_base_dsn

from stores import (
    Checkpoint,
    PendingInterrupt,
    PostgresStore,
)

__all__ = [
    "DSN",
    "ROOT",
    "Counter",
    "closed_port",
    "pause",
    "resume_row",
    "row",
    "schema_fixture",
    "store_fixture",
]

DSN = pg_base_dsn()
ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(name="schema")
def schema_fixture(pg_schema: PgSchema) -> str:
    """A fresh schema of the test database, dropped afterwards (fails or skips as ``pg_schema``)."""
    return pg_schema.schema


@pytest.fixture(name="store")
async def store_fixture(schema: str) -> AsyncIterator[PostgresStore]:
    """A ``PostgresStore`` (not set up) on ``schema``, closed afterwards."""
    store = PostgresStore(DSN, schema=schema)
    yield store
    await store.close()


def row(eid: str, seq: int, messages: list[Any] | None = None, **kw: Any) -> Checkpoint:
    snapshot: dict[str, Any] = {"turn": seq}
    if messages is not None:
        snapshot["messages"] = messages
    kw.setdefault("node_id", f"turn:{seq}")
    kw.setdefault("agent_path", "agent:a")
    return Checkpoint(execution_id=eid, seq=seq, runner="a", state_snapshot=snapshot, **kw)


def pause(eid: str, seq: int) -> tuple[Checkpoint, PendingInterrupt]:
    r = row(eid, seq, node_id="turn:0/tool:t", step_type="hitl_pause", status="interrupted")
    return r, PendingInterrupt(execution_id=eid, reason="approve?", context={"amount": 5})


def resume_row(eid: str, seq: int, target: int) -> Checkpoint:
    return row(
        eid,
        seq,
        node_id="turn:0/tool:t",
        step_type="resume",
        node_input={"resume": {"approved": True}, "reentry_seq": target},
    )


def closed_port() -> int:
    """A TCP port on 127.0.0.1 that refuses connections (bound, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port
