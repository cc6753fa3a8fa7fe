"""The refund bot the boundary proofs run, its tools, and a charge ledger that outlives processes.

The bot is tether's refund example (:mod:`tether._refund`, the one ``tether demo`` and the benchmarks
run): on turn 0 the model asks for ``refund(order, amount)`` (and, when the request says "notify", for
``notify(order)`` in the same turn); once it has read a tool result it answers ``"Refund for order
1042 is on its way."``. A refund over 1000 calls ``interrupt("manager_approval", {"order", "amount",
"balance": 100})`` and charges only when approved.

Every model call, tool start, charge and notification is appended as one JSON line to the ledger file
(:func:`configure`), tagged with the pid and the run, so a parent process counts what its children did.
:data:`KNOBS` are the crash points a child sets: ``os._exit`` inside the tool, inside the model call
after the tool, or inside a resumed tool right after its claim; or block inside the tool until killed.
"""

from __future__ import annotations

import json
import os
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio

from actors import Agent, Resume, current_run, idempotent, interrupt, tool
from actors.models import Message, ToolCall
from tether._refund import APPROVAL_LIMIT as LIMIT
from tether._refund import ORDER, RefundBot

__all__ = [
    "AGENTS",
    "ANSWER",
    "KNOBS",
    "LIMIT",
    "ORDER",
    "SIBLING_NOTE",
    "configure",
    "events",
]

ANSWER = f"Refund for order {ORDER} is on its way."
SIBLING_NOTE = "[no result: the agent was interrupted before this tool ran; it was not run on resume]"

#: Exit codes of the crash points.
EXIT_IN_TOOL = 2
EXIT_IN_MODEL = 3
EXIT_AFTER_CLAIM = 4


@dataclass
class Knobs:
    """What this process does at the crash points (set by a child from its command line)."""

    crash: str | None = None  # "tool" | "model" | "after_claim" | "block"
    raise_model_once: bool = False  # the provider fails once, after the tool ran
    ready_file: str | None = None  # "block": touched when the tool is blocked
    contexts: list[dict[str, Any]] = field(default_factory=list)  # the dicts the tool gave interrupt()


KNOBS = Knobs()
_ledger: Path | None = None


def configure(ledger: str | Path) -> None:
    """Use ``ledger`` (a JSON-lines file shared by the parent and its children)."""
    global _ledger
    _ledger = Path(ledger)


def _run_id() -> str | None:
    run = current_run()
    return None if run is None else run.execution_id


def record(kind: str, **data: Any) -> None:
    """Append one event to the ledger (it reaches the OS before a later ``os._exit``)."""
    if _ledger is None:
        raise RuntimeError("the proof ledger is not configured")
    line = json.dumps({"kind": kind, "pid": os.getpid(), **data}, sort_keys=True)
    with _ledger.open("a", encoding="utf-8") as fh:
        fh.write(line + "\n")


def events(kind: str | None = None, run: str | None = None) -> list[dict[str, Any]]:
    """The ledger's events, oldest first, optionally of one ``kind`` and one ``run``."""
    if _ledger is None or not _ledger.exists():
        return []
    out = []
    for line in _ledger.read_text(encoding="utf-8").splitlines():
        event = json.loads(line)
        if (kind is None or event["kind"] == kind) and (run is None or event.get("run") == run):
            out.append(event)
    return out


def charges(run: str) -> list[dict[str, Any]]:
    """The charges made for ``run``, as ``{"order", "amount"[, "approver"]}``."""
    out = []
    for event in events("charge", run):
        charge = {"order": event["order"], "amount": event["amount"]}
        if event.get("approver") is not None:
            charge["approver"] = event["approver"]
        out.append(charge)
    return out


# -- the refund bot, with the proofs' ledger and crash points --------------------------------------


class ProofBot(RefundBot):
    """The refund example (:class:`tether._refund.RefundBot`) recording to the ledger, with the knobs.

    Turn 0 also asks for ``notify(order)`` when the request says "notify"; the answer is :data:`ANSWER`.
    """

    def on_model(self, turn: int, messages: list[Message]) -> None:
        seen = [m.content for m in messages if m.role == "tool"]
        record("model", run=_run_id(), turn=turn, tools_seen=seen)

    def first_calls(self, request: str, amount: int) -> list[ToolCall]:
        calls = super().first_calls(request, amount)
        if "notify" in request:
            calls.append(ToolCall("notify", {"order": ORDER}))
        return calls

    def answer(self, messages: list[Message]) -> str:
        if KNOBS.crash == "model":
            os._exit(EXIT_IN_MODEL)
        if KNOBS.raise_model_once:
            KNOBS.raise_model_once = False
            raise RuntimeError("provider returned 503")
        return ANSWER

    async def on_tool(self, order: str, amount: int) -> None:
        record("tool", tool="refund", run=_run_id(), order=order, amount=amount)
        if KNOBS.crash == "tool":
            os._exit(EXIT_IN_TOOL)
        if KNOBS.crash == "block":
            if KNOBS.ready_file:
                await anyio.Path(KNOBS.ready_file).touch()
            await anyio.sleep(3600)

    def approval_context(self, order: str, amount: int) -> dict[str, Any]:
        context = {"order": order, "amount": amount, "balance": 100}
        KNOBS.contexts.append(context)
        return context

    def after_interrupt(self, context: dict[str, Any]) -> None:
        # The tool changes its context object after interrupt() was called: the approver must not see it.
        context["balance"] = 0
        context["changed"] = "after interrupt()"

    def approver(self, decision: Resume) -> str | None:
        if KNOBS.crash == "after_claim":
            os._exit(EXIT_AFTER_CLAIM)
        return super().approver(decision)

    def charge(self, order: str, amount: int, approver: str | None) -> None:
        record("charge", run=_run_id(), order=order, amount=amount, approver=approver)


BOT = ProofBot()


@tool
def notify(order: str) -> str:
    """Tell the customer about ``order`` (a sync tool)."""
    record("notify", run=_run_id(), order=order)
    return f"customer of order {order} notified"


# Proof 4: a card charge placed before the pause, plain and behind @idempotent.


async def charge_card(order: str) -> dict[str, Any]:
    """A plain side effect: it fires every time it is called."""
    record("card", run=_run_id(), order=order, variant="plain")
    return {"charged": order}


@idempotent
async def charge_card_once(order: str) -> dict[str, Any]:
    """The same side effect, cached per run and arguments."""
    record("card", run=_run_id(), order=order, variant="idempotent")
    return {"charged": order}


@idempotent
async def charge_card_slow(order: str) -> dict[str, Any]:
    """An idempotent charge that takes a while, so ten concurrent callers overlap; each charge has
    its own id."""
    charge_id = f"ch_{uuid.uuid4().hex[:12]}"
    record("card", run=_run_id(), order=order, variant="slow", charge_id=charge_id)
    await anyio.sleep(0.05)
    return {"charged": order, "charge_id": charge_id}


@idempotent
async def opaque(order: str) -> Any:
    """Returns something that is not JSON: refused with IdempotencyError."""
    record("card", run=_run_id(), order=order, variant="opaque")
    return object()


async def _charge_then_pause(order: str, amount: int, *, cached: bool) -> dict[str, Any]:
    record("tool", tool="refund", run=_run_id(), order=order, amount=amount)
    receipt = await (charge_card_once(order) if cached else charge_card(order))
    if amount > LIMIT:
        interrupt("manager_approval", {"order": order, "amount": amount, "balance": 100})
    return {"refunded": True, "receipt": receipt}


@tool(name="refund")
async def refund_plain(order: str, amount: int) -> dict[str, Any]:
    """Charge the card, then (over 1000) wait for approval; the charge is a plain call."""
    return await _charge_then_pause(order, amount, cached=False)


@tool(name="refund")
async def refund_idempotent(order: str, amount: int) -> dict[str, Any]:
    """Charge the card, then (over 1000) wait for approval; the charge is @idempotent."""
    return await _charge_then_pause(order, amount, cached=True)


@tool(name="refund")
async def refund_opaque(order: str, amount: int) -> dict[str, Any]:
    """Calls an @idempotent function whose result is not JSON."""
    record("tool", tool="refund", run=_run_id(), order=order, amount=amount)
    await opaque(order)
    return {"refunded": True}


@tool(name="refund")
async def refund_burst(order: str, amount: int) -> dict[str, Any]:
    """Ten concurrent identical @idempotent calls in one step, then (over 1000) wait for approval:
    the resume re-runs the step, and each call gets its earlier result back."""
    record("tool", tool="refund", run=_run_id(), order=order, amount=amount)
    results: list[Any] = [None] * 10

    async def one(i: int) -> None:
        results[i] = await charge_card_slow(order)

    async with anyio.create_task_group() as tg:
        for i in range(10):
            tg.start_soon(one, i)
    charge_ids = sorted(r["charge_id"] for r in results)
    if amount > LIMIT:
        interrupt("manager_approval", {"order": order, "amount": amount, "charges": len(charge_ids)})
    return {"calls": len(results), "charge_ids": charge_ids}


#: Every runner a proof process can resume, by name.
AGENTS: dict[str, Agent] = {
    "refund-bot": BOT.agent("refund-bot", tools=[*BOT.tools(), notify]),
    "refund-plain": BOT.agent("refund-plain", tools=[refund_plain]),
    "refund-idempotent": BOT.agent("refund-idempotent", tools=[refund_idempotent]),
    "refund-opaque": BOT.agent("refund-opaque", tools=[refund_opaque]),
    "refund-burst": BOT.agent("refund-burst", tools=[refund_burst]),
}
