"""What an operator reads about one run: its timeline as a tree of agent paths, and a state diff.

Shared by ``tether show``/``tether diff`` and the inspector's pages, so both say the same. A row's
place in the tree is the depth of its ``agent_path`` (``supervisor:ops/worker:support/agent:billing``
is three deep); a diff compares the materialised ``state_snapshot`` of two rows of one run: the
messages the later one added (after the prefix both share), the messages it no longer has, and the
other keys added, removed or changed.
"""

from __future__ import annotations

import shlex
from datetime import datetime
from typing import Any

import msgspec

from actors import RunSummary
from actors.models import Usage
from stores import Checkpoint, ReplicatedStore, RunNotFound, Store, parse_path

from ._content import RowContent, row_contents

__all__ = [
    "KeyChange",
    "StateDiff",
    "TimelineRow",
    "diff_rows",
    "next_step",
    "pick_rows",
    "status_text",
    "sync_states",
    "timeline",
    "usage_text",
    "when",
]

_MESSAGES = "messages"
#: What a run records about its code (its runner's version and fingerprint) and its trace, not a
#: step's state.
_RUN_KEYS = frozenset({"fingerprint", "version", "trace"})
#: The snapshot key of the run's running usage total (see ``docs/observability.md``).
_USAGE = "usage"


class TimelineRow(msgspec.Struct, kw_only=True, frozen=True):
    """One row of a timeline: the row's identity, where it sits in the tree, what it did."""

    seq: int
    checkpoint_id: str
    node_id: str
    agent_path: str | None
    depth: int
    label: str
    step_type: str
    status: str
    created_at: datetime
    interrupt_reason: str | None = None
    sync: str = "-"
    content: RowContent | None = None
    #: The tokens of the model replies this row is the first to count (``""``: none).
    tokens: str = ""

    @property
    def tree(self) -> str:
        """The path as a tree line: its last segment, indented by its depth."""
        if self.depth <= 1:
            return self.label
        return "  " * (self.depth - 2) + "└ " + self.label


class KeyChange(msgspec.Struct, kw_only=True, frozen=True):
    """One key of ``state_snapshot`` that differs (``before``/``after`` absent: added/removed)."""

    key: str
    change: str  # "added" | "removed" | "changed"
    before: Any = None
    after: Any = None


class StateDiff(msgspec.Struct, kw_only=True, frozen=True):
    """How row ``b``'s state differs from row ``a``'s (two rows of one run, any order)."""

    execution_id: str
    seq_a: int
    seq_b: int
    common: int
    added: list[dict[str, Any]]
    removed: list[dict[str, Any]]
    keys: list[KeyChange]


#: How a status reads where the bare word would mislead.
_STATUS_TEXT = {"approved": "approved, waiting for a worker"}


def status_text(status: str) -> str:
    """A run's status as an operator reads it (``approved`` says that it waits for a worker)."""
    return _STATUS_TEXT.get(status, status)


def next_step(summary: RunSummary) -> tuple[str, str] | None:
    """How to continue a run standing as ``summary`` does: what to do, and the command that does
    it (``None``: nothing to do)."""
    eid = shlex.quote(summary.execution_id)
    runner = "--runner MODULE:ATTR"
    match summary.status:
        case "paused":
            return "decide it", f"tether approve {eid} (or reject), with {runner} to go on here"
        case "approved":
            return "a worker finishes it", f"tether worker {runner} (or here: tether resume {eid} {runner})"
        case "orphaned":
            return "recover it", f"tether resume {eid} {runner} (or a tether worker takes it)"
        case "queued":
            return "a worker takes it", f"tether worker {runner}"
        case "waiting" if summary.wake_at is None:
            return "signal it", f"tether signal {eid} NAME --payload JSON (a worker wakes it)"
        case "failed":
            return "to retry from its last step", f"tether resume {eid} {runner}"
    return None


def when(moment: datetime) -> str:
    """A row's time as operators read it: UTC, to the millisecond."""
    return moment.strftime("%Y-%m-%d %H:%M:%S.") + f"{moment.microsecond // 1000:03d}"


def _place(agent_path: str | None) -> tuple[int, str]:
    if not agent_path:
        return 0, "-"
    try:
        segments = parse_path(agent_path)
    except ValueError:
        return 1, agent_path
    kind, name = segments[-1]
    return len(segments), f"{kind}:{name}"


def timeline(rows: list[Checkpoint], sync: dict[str, str] | None = None) -> list[TimelineRow]:
    """The rows of a run as timeline rows, in ``seq`` order; ``sync`` maps checkpoint ids to their
    replication state (``synced``, ``quarantined: ...``), ``-`` where it has none."""
    out = []
    contents = row_contents(rows)
    billed = Usage()
    for row in rows:
        depth, label = _place(row.agent_path)
        total = _total(row)
        added = Usage(
            input_tokens=max(0, total.input_tokens - billed.input_tokens),
            output_tokens=max(0, total.output_tokens - billed.output_tokens),
        )
        billed = total if total else billed
        out.append(
            TimelineRow(
                seq=row.seq,
                checkpoint_id=row.checkpoint_id,
                node_id=row.node_id,
                agent_path=row.agent_path,
                depth=depth,
                label=label,
                step_type=row.step_type,
                status=row.status,
                created_at=row.created_at,
                interrupt_reason=row.interrupt_reason,
                sync=(sync or {}).get(row.checkpoint_id, "-"),
                content=contents[row.seq],
                tokens=f"+{added.input_tokens} in, +{added.output_tokens} out" if added else "",
            )
        )
    return out


def _total(row: Checkpoint) -> Usage:
    """The run's usage total as ``row`` records it."""
    stored = row.state_snapshot.get(_USAGE)
    if not isinstance(stored, dict):
        return Usage()
    counts = {k: v for k, v in stored.items() if k in ("input_tokens", "output_tokens") and type(v) is int}
    return Usage(**counts)


def usage_text(usage: Usage) -> str:
    """A run's token usage as operators read it (``""`` when its models reported none)."""
    if not usage:
        return ""
    return f"{usage.input_tokens} input + {usage.output_tokens} output tokens"


def pick_rows(rows: list[Checkpoint], seq_a: int, seq_b: int) -> tuple[Checkpoint, Checkpoint]:
    """Rows ``seq_a`` and ``seq_b`` of a run's history; ``RunNotFound`` naming a missing one."""
    by_seq = {row.seq: row for row in rows}
    for seq in (seq_a, seq_b):
        if seq not in by_seq:
            eid = rows[0].execution_id if rows else "?"
            known = f"{rows[0].seq}..{rows[-1].seq}" if rows else "none"
            raise RunNotFound(f"run {eid!r} has no row at seq {seq} (its rows: {known})")
    return by_seq[seq_a], by_seq[seq_b]


def diff_rows(a: Checkpoint, b: Checkpoint) -> StateDiff:
    """The state diff from row ``a`` to row ``b``."""
    before, after = a.state_snapshot, b.state_snapshot
    old = list(before.get(_MESSAGES) or [])
    new = list(after.get(_MESSAGES) or [])
    common = 0
    while common < min(len(old), len(new)) and old[common] == new[common]:
        common += 1
    keys = []
    for key in sorted((set(before) | set(after)) - {_MESSAGES} - _RUN_KEYS):
        if key not in before:
            keys.append(KeyChange(key=key, change="added", after=after[key]))
        elif key not in after:
            keys.append(KeyChange(key=key, change="removed", before=before[key]))
        elif before[key] != after[key]:
            keys.append(KeyChange(key=key, change="changed", before=before[key], after=after[key]))
    return StateDiff(
        execution_id=a.execution_id,
        seq_a=a.seq,
        seq_b=b.seq,
        common=common,
        added=new[common:],
        removed=old[common:],
        keys=keys,
    )


async def sync_states(store: Store, rows: list[Checkpoint]) -> dict[str, str]:
    """Each row's replication state from the store's outbox: ``synced`` or ``quarantined: <reason>``;
    rows not yet sent (and every row of a store without an outbox) are left out."""
    if not isinstance(store, ReplicatedStore):
        return {}
    found: dict[str, str] = {}
    for row in rows:
        state = await store.sync_state(row.checkpoint_id)
        if state is None:
            continue
        synced, error = state
        if error is not None:
            found[row.checkpoint_id] = f"quarantined: {error}"
        elif synced:
            found[row.checkpoint_id] = "synced"
    return found
