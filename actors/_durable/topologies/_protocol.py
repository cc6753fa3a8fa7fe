"""The protocol between a level of a topology and the child actor it runs: one module, as for every actor.

A parent starts a child actor for the level it delegates to (a Supervisor's worker, a Swarm's active
member) and sends it :class:`Begin`; the child drives its level's steps in its own task and answers
with one :class:`Reported`: the level's outcome (``Answered``, ``Paused``, ``Failed``, ``HandedOff``
of ``actors._durable._messages``) or the error that stops the whole activation (a lost race). Then it
stops; children are temporary (rule 12: recovery is explicit).
"""

from __future__ import annotations

from typing import Any

import msgspec

__all__ = ["Begin", "ChildMessage", "Reported"]


class Begin(msgspec.Struct, tag="begin", frozen=True):
    """Parent to child: take the level's first step, then the next ones, until it has an outcome."""


class Reported(msgspec.Struct, tag="reported", frozen=True):
    """Child to parent: how the level ended (``outcome``), or the error that stops the run (``error``:
    a lost race or a used id; in-process only)."""

    outcome: Any = None
    error: Any = None


ChildMessage = Begin | Reported
"""Every message between a level and its child actor."""
