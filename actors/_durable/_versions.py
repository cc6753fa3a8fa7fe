"""Which code a run belongs to: a runner's ``version`` and a fingerprint of its definition.

Every row a run writes carries the run's ``version`` in its snapshot (when it has one), so how a run
stands (its newest row) names it without another read; the run's first row also carries the
fingerprint of the runner that started it: a short digest, and a compact map of what it covers, each
part a short digest keyed by where it sits in the run (``agent_path`` style): per agent its
instructions and ``max_turns``, per tool the JSON schema of its arguments (keyed like the tool's own
rows, ``<agent path>/tool:<name>``), per topology its structure. The model object is not part of it.

A resume compares the recorded map with the registered runner's: when the step it re-enters calls a
tool that is gone or whose schema changed, a versioned run is refused (:class:`RunnerChanged`);
any other change goes on, named in a WARNING and recorded on the ``resume``/``recover`` row.
See ``docs/versions.md``.
"""

from __future__ import annotations

import hashlib
import re
from typing import TYPE_CHECKING, Any, Final

import msgspec

from stores import HITL_PAUSE, TOOL_CALL, WAIT, Checkpoint, child_path, tool_path

from ._errors import RunnerChanged

if TYPE_CHECKING:
    from .topologies import Runner

__all__ = [
    "FINGERPRINT",
    "FINGERPRINTS",
    "VERSION",
    "Drift",
    "cached_fingerprint",
    "check_step",
    "check_version",
    "drift",
    "fingerprint",
    "version_of",
]

#: The snapshot key of a run's version (on every row of a versioned run).
VERSION: Final = "version"
#: The snapshot key of the runner's fingerprint (on a run's first row): ``{"digest", "parts"}``.
FINGERPRINT: Final = "fingerprint"
#: The ``node_input`` key of a ``resume``/``recover`` row that re-entered changed code:
#: ``{"old": digest, "new": digest, "changed": [what changed, ...]}``.
FINGERPRINTS: Final = "fingerprints"

#: Hex digits of the whole fingerprint and of each part.
_DIGEST: Final = 16
_PART: Final = 10
_TOOL = re.compile(r"/tool:([^/]+)$")
_encode = msgspec.json.Encoder(order="sorted").encode


def check_version(owner: str, version: object) -> str | None:
    """``version`` as given to a runner: ``None`` or a non-empty str without edge spaces."""
    if version is None:
        return None
    if not isinstance(version, str) or not version or version != version.strip():
        raise ValueError(
            f"{owner}: version must be a non-empty str without edge spaces or None, not {version!r}"
        )
    return version


def version_of(row: Checkpoint) -> str | None:
    """The version a row records for its run (``None``: an unversioned run, or an older row)."""
    found = row.state_snapshot.get(VERSION)
    return found if isinstance(found, str) else None


def _digest(value: Any, size: int = _PART) -> str:
    return hashlib.sha256(_encode(value)).hexdigest()[:size]


def fingerprint(runner: Runner) -> dict[str, Any]:
    """The fingerprint of ``runner`` as recorded on a run's first row."""
    parts: dict[str, str] = {}
    _parts(runner, runner.label, parts, root=True)
    return {"digest": _digest(parts, _DIGEST), "parts": parts}


def cached_fingerprint(runner: Any) -> dict[str, Any]:
    """The fingerprint of ``runner``, computed on first use and kept in its ``_fingerprint`` slot
    (the ``fingerprint`` property of an Agent, a Swarm and a Supervisor)."""
    found: dict[str, Any] | None = runner._fingerprint
    if found is None:
        found = runner._fingerprint = fingerprint(runner)
    return found


def _parts(runner: Any, path: str, parts: dict[str, str], *, root: bool = False) -> None:
    """Add the parts of ``runner`` running at ``path``."""
    if not root and runner.version is not None:
        parts[f"{path}#version"] = runner.version
    match runner.kind:
        case "agent":
            _agent_parts(runner, path, parts)
        case "supervisor":
            _agent_parts(runner.manager, path, parts)
            parts[f"{path}#workers"] = _digest(sorted(runner.workers))
            for role, worker in runner.workers.items():
                _parts(worker, child_path(path, "worker", role), parts)
        case "swarm":
            parts[f"{path}#swarm"] = _digest(
                {"entry": runner.entry, "handoffs": runner.handoffs, "max_handoffs": runner.max_handoffs}
            )
            for member in runner.agents:
                _parts(member, runner.member_path(path, member.name), parts)


def _agent_parts(agent: Any, path: str, parts: dict[str, str]) -> None:
    parts[f"{path}#instructions"] = _digest(agent.instructions or "")
    parts[f"{path}#max_turns"] = str(agent.max_turns)
    for tool in agent.tools:
        parts[tool_path(path, tool.name)] = _digest(tool.parameters)
    for source in agent.sources:  # its tools are recorded by the run itself, when it lists them
        parts[f"{path}#source:{source.name}"] = source.fingerprint()
    if agent.output is not None:
        parts[f"{path}#output_type"] = _digest(agent.output.schema)


class Drift(msgspec.Struct, frozen=True):
    """How the registered runner differs from the fingerprint a run recorded."""

    old: str
    new: str
    changed: list[str]

    def record(self) -> dict[str, Any]:
        """What the ``resume``/``recover`` row records of it."""
        return {"old": self.old, "new": self.new, "changed": self.changed}


def drift(first: Checkpoint, runner: Runner) -> Drift | None:
    """How ``runner`` differs from the fingerprint on the run's first row ``first``; ``None`` when
    it does not (or the run recorded none: an older run)."""
    recorded = first.state_snapshot.get(FINGERPRINT)
    if not isinstance(recorded, dict) or not isinstance(recorded.get("parts"), dict):
        return None
    current = runner.fingerprint
    if recorded.get("digest") == current["digest"]:
        return None
    old: dict[str, Any] = recorded["parts"]
    new: dict[str, str] = current["parts"]
    changed = [_change(key, old.get(key), new.get(key)) for key in sorted(set(old) | set(new))]
    return Drift(str(recorded.get("digest")), current["digest"], [c for c in changed if c])


def _change(key: str, old: object, new: object) -> str | None:
    """One part's change, in words (``None`` when it did not change)."""
    if old == new:
        return None
    where, _, what = key.rpartition("#")
    tool = _TOOL.search(key)
    if tool is not None:
        name = f"tool {tool.group(1)!r} of {key[: tool.start()]!r}"
        return (
            f"{name} was added"
            if old is None
            else f"{name} was removed"
            if new is None
            else f"{name} changed its schema"
        )
    subject = f"{what} of {where!r}"
    if what == "max_turns":
        return f"max_turns of {where!r} changed from {old} to {new}"
    if old is None:
        return f"{subject} was added" if what != "version" else f"{where!r} now has version {new!r}"
    if new is None:
        return f"{subject} was removed"
    return f"{subject} changed"


def check_step(step: Checkpoint, first: Checkpoint, change: Drift, *, version: str, runner: Runner) -> None:
    """Refuse (:class:`RunnerChanged`) re-entering ``step`` when it calls a tool that ``change``
    says is gone or has another schema."""
    if step.step_type not in (TOOL_CALL, HITL_PAUSE, WAIT) or step.agent_path is None:
        return
    old = first.state_snapshot[FINGERPRINT]["parts"].get(step.agent_path)
    if old is None:
        return  # not a tool the run recorded (a topology's own tool): the structure covers it
    new = runner.fingerprint["parts"].get(step.agent_path)
    if new == old:
        return
    tool = _TOOL.search(step.agent_path)
    name = tool.group(1) if tool is not None else step.agent_path
    what = "was removed" if new is None else "changed its schema (its arguments' JSON schema differs)"
    raise RunnerChanged(runner.name, version, name, what, execution_id=step.execution_id)
