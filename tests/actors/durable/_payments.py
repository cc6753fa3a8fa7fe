"""A fake payment service of the storm tests, on a SQLite file of its own, and the agent that pays.

``charge`` deduplicates by the idempotency key it is given, as payment APIs do with an
``Idempotency-Key`` header: a second request with a key it has seen charges nothing. ``wire`` does
not deduplicate: every request sends money. Each request is one transaction of the service (a
process killed before it commits sent nothing), and every request is recorded in ``attempts``, so
a body that ran twice shows as two attempts under one key.
"""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

from actors import Agent, SideEffectInDoubt, idempotency_key, idempotent, tool
from actors.models import FunctionModel, Message, ModelReply, ToolCall

#: Identical payments each order makes in one reply (three steps of one tool, same arguments).
ITEMS = 3
AMOUNT = 5

_SCHEMA = """
CREATE TABLE IF NOT EXISTS attempts (
    id INTEGER PRIMARY KEY, service TEXT NOT NULL, order_id TEXT NOT NULL, key TEXT NOT NULL, pid INTEGER
);
CREATE TABLE IF NOT EXISTS charges (key TEXT PRIMARY KEY, order_id TEXT NOT NULL);
"""


def service_path() -> Path:
    return Path(os.environ["TETHER_TEST_PAYMENTS"])


def connect(path: Path | None = None) -> sqlite3.Connection:
    conn = sqlite3.connect(path or service_path(), timeout=30, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=FULL")
    conn.executescript(_SCHEMA)
    return conn


def _request(service: str, order: str, key: str, *, dedup: bool) -> None:
    conn = connect()
    try:
        conn.execute("BEGIN IMMEDIATE")
        conn.execute(
            "INSERT INTO attempts (service, order_id, key, pid) VALUES (?, ?, ?, ?)",
            (service, order, key, os.getpid()),
        )
        if dedup:
            conn.execute("INSERT OR IGNORE INTO charges (key, order_id) VALUES (?, ?)", (key, order))
        conn.execute("COMMIT")
    finally:
        conn.close()


@idempotent
def charge_card(order: str, amount: int) -> str:
    """A card charge through the deduplicating API, keyed by this call's idempotency key."""
    key = idempotency_key()
    _request("card", order, key, dedup=True)
    return key


@idempotent(at_most_once=True)
def send_wire(order: str, amount: int) -> str:
    """A wire transfer through an API that does not deduplicate: at most once, or in doubt."""
    key = idempotency_key()
    _request("wire", order, key, dedup=False)
    return f"sent:{key}"


@tool
def pay(order: str, amount: int) -> str:
    """Pay one line item of an order: a card charge and a wire."""
    card = charge_card(order, amount)
    try:
        wire = send_wire(order, amount)
    except SideEffectInDoubt as doubt:
        wire = f"doubt:{doubt.key}"  # reconciled later with the bank, by this key
    return f"card:{card}|wire:{wire}"


def _model(messages: list[Message]) -> str | ModelReply:
    if messages[-1].role == "tool":
        return "paid"
    order = messages[-1].content
    return ModelReply(tool_calls=[ToolCall("pay", {"order": order, "amount": AMOUNT}) for _ in range(ITEMS)])


AGENT = Agent("payer", FunctionModel(_model), tools=[pay])
