"""A script's ``@idempotent`` function across the upgrade that named its module by its import name.

Earlier versions keyed a function of a script run as ``__main__`` by the module name ``__main__``;
now it is the module's importable name (``module_name``). A run paused after its charge under the
older name is resumed after the upgrade in this process (``sys.modules["__main__"]`` set up as the
interpreter sets it for each start): the charge is found under the older key and not run again, with
the default key, with ``key=`` and for an entry from before keys counted occurrences.
"""

from __future__ import annotations

import hashlib
import sys
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from actors import ActorSystem, Agent, Resume, idempotent, interrupt, tool
from actors.models import FunctionModel, Message, ModelReply, ToolCall
from stores import SQLiteStore, canonical_json

pytestmark = pytest.mark.anyio

LIMIT = 20.0


def _started_as(monkeypatch: pytest.MonkeyPatch, spec_name: str | None) -> None:
    """``__main__`` as a script started without a file (``None``) or with ``python -m``."""
    main = types.ModuleType("__main__")
    main.__spec__ = None if spec_name is None else types.SimpleNamespace(name=spec_name)  # type: ignore[assignment]
    monkeypatch.setitem(sys.modules, "__main__", main)


def _charge_body(charged: list[str]) -> Callable[[str], str]:
    def charge(order: str) -> str:
        charged.append(order)
        return f"charged {order}"

    charge.__module__ = "__main__"
    charge.__qualname__ = "charge"
    return charge


def _agent(charge: Callable[[str], Any]) -> Agent:
    @tool
    async def refund(order: str) -> str:
        """Charge an order, then ask a person."""
        done = str(await charge(order))
        decision = interrupt("approve?", {"order": order})
        return f"{done} approved={decision.approved}"

    def model(messages: list[Message]) -> str | ModelReply:
        if messages[-1].role == "tool":
            return f"done: {messages[-1].content}"
        return ModelReply(tool_calls=[ToolCall("refund", {"order": str(messages[-1].content)})])

    return Agent("script", FunctionModel(model), tools=[refund])


def _async(fn: Callable[[str], str]) -> Callable[[str], Any]:
    async def call(order: str) -> str:
        return fn(order)

    call.__module__, call.__qualname__ = fn.__module__, fn.__qualname__
    return call


@pytest.mark.parametrize("keyed", [False, True])
async def test_a_charge_made_under_the_older_module_name_is_found(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, keyed: bool
) -> None:
    charged: list[str] = []
    body = _async(_charge_body(charged))
    wrap = idempotent(key=lambda order: order) if keyed else idempotent
    _started_as(monkeypatch, None)  # the earlier version: keys named the module "__main__"
    before = _agent(wrap(body))
    async with SQLiteStore(tmp_path / "t.db") as store:
        async with ActorSystem(store, runners=[before]) as system:
            paused = await (await system.spawn(before, "o1", execution_id="r1")).result(timeout=LIMIT)
            assert paused.status == "paused" and charged == ["o1"]
        _started_as(monkeypatch, "shop.app")  # after the upgrade: the importable name
        after = _agent(wrap(body))
        async with ActorSystem(store, runners=[after]) as system:
            done = await system.resume("r1", Resume(approved=True), timeout=LIMIT)
    assert done.output == "done: charged o1 approved=True"
    assert charged == ["o1"]  # not charged again


async def test_an_entry_from_before_occurrences_under_main_is_found(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    charged: list[str] = []
    body = _async(_charge_body(charged))
    _started_as(monkeypatch, "shop.app")
    agent = _agent(idempotent(body))
    async with SQLiteStore(tmp_path / "t.db") as store, ActorSystem(store, runners=[agent]) as system:
        # A run of an older version: its charge stored under sha256(["__main__.charge", arguments]).
        old_key = hashlib.sha256(canonical_json(["__main__.charge", {"order": "o1"}])).hexdigest()
        await store.cache_put("r2", old_key, "charged by the older version")
        done = await (await system.spawn(agent, "o1", execution_id="r2")).result(timeout=LIMIT)
        assert done.status == "paused"
        resumed = await system.resume("r2", Resume(approved=True), timeout=LIMIT)
    assert resumed.output == "done: charged by the older version approved=True"
    assert charged == []
