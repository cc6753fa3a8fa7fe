"""The protocol between a level of a topology and the child actor it runs: one module, as for every actor.

A parent starts a child actor for the level it delegates to (a Supervisor's worker, a Swarm's active
member) and sends it :class:`Begin`; the child takes its level's steps, each a task of its own whose
result comes back to its mailbox, and answers with one :class:`Reported`: the level's outcome
(``Answered``, ``Paused``, ``Failed``, ``HandedOff`` of ``actors._durable._messages``), the error
that stops the whole activation (a lost race), or that the parent cut it. Then it stops; children
are temporary (rule 12: recovery is explicit).
"""

from __future__ import annotations

from typing import Any

import msgspec

__all__ = ["Begin", "ChildMessage", "Reported"]


class Begin(msgspec.Struct, tag="begin", frozen=True):
    """Parent to child: take the level's first step, then the next ones, until it has an outcome."""


class Reported(msgspec.Struct, tag="reported", frozen=True):
    """Child to parent: how the level ended (``outcome``), the error that stops the run (``error``:
    a lost race or a used id; in-process only), or ``cut``: the parent cut its work in flight."""

    outcome: Any = None
    error: Any = None
    cut: bool = False


ChildMessage = Begin | Reported
"""Every message between a level and its child actor."""
