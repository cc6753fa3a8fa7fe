"""Flow control, the half both backends share: :class:`Queue`, its limits' rules and a take's outcome.

A run enqueued into a queue carries the queue's name, its ``key`` and its ``priority`` in its
``run_owners`` row (and, for good, in ``run_queues``, which ``RunSummary`` reads). The serving
processes give a queue's limits (:meth:`~stores.OwnedStore.declare_queues`); the store keeps
one row per queue in ``queues`` (the limits in force) and the times of its last ``rate[0]`` starts
in ``queue_starts``. A sweep takes a queued run with :meth:`~stores.OwnedStore.take_queued`,
in ONE transaction that holds the queue's row (PostgreSQL: ``FOR UPDATE`` in the store's take
function; SQLite: the writer's ``BEGIN IMMEDIATE``), so the limits are fleet-wide:

* ``concurrency``: the runs of the queue whose recorded owner's liveness lock is held, other than
  the run taken, number fewer than it. A dead worker's runs stop counting the moment its lock goes.
* ``per_key``: the same, among the runs with the run's ``key`` (a run without a key has no such limit).
* ``rate = (n, window)``: fewer than ``n`` starts in the ``window`` before now: the ``n``-th most
  recent recorded start is at least ``window`` old. A take records its start in the same
  transaction, in ``queue_starts``: ``n`` slots per queue, the oldest overwritten (:func:`start_slot`),
  so recording a start writes one small row whatever ``n`` is.

:func:`admit` is that rule, as SQLite applies it; PostgreSQL applies the same rule in SQL
(``stores.postgres._queue_sql``). Runs taken any other way (``spawn``, a person's resume) carry no
queue in their ``run_owners`` row: they are neither throttled nor counted.
"""

from __future__ import annotations

import math
import re
from dataclasses import KW_ONLY, dataclass
from datetime import timedelta
from typing import Any, Final, NamedTuple

__all__ = [
    "DEFAULT_QUEUE",
    "TRIM_STARTS",
    "Admission",
    "Queue",
    "Work",
    "admit",
    "check_enqueue",
    "parse_queue",
    "start_slot",
    "stricter",
]

#: Keep a queue's most recent ``count`` starts (after a declaration that may lower it): the queue's
#: name twice and the count, in either backend's placeholders once ``?`` is replaced.
TRIM_STARTS: Final = (
    "DELETE FROM queue_starts WHERE queue = ? AND slot NOT IN "
    "(SELECT slot FROM queue_starts WHERE queue = ? ORDER BY at DESC LIMIT ?)"
)
#: The queue of a run enqueued without one.
DEFAULT_QUEUE: Final = "default"
#: The longest queue name and key (they are stored and indexed).
_MAX_NAME: Final = 200
_SPEC: Final = re.compile(r"^(?P<name>[^:]+):(?P<limits>.*)$")
_RATE: Final = re.compile(r"^(?P<n>\d+)/(?P<window>\d+(?:\.\d+)?)(?P<unit>ms|s|m|h)?$")
_UNITS: Final = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, None: 1.0}


@dataclass(frozen=True, slots=True)
class Queue:
    """A queue's fleet-wide limits, given by the processes that serve it (``serve(queues=[...])``).

    ``concurrency``: runs of the queue at once across the fleet; ``per_key``: runs at once with one
    ``key``; ``rate = (n, window)``: at most ``n`` runs start within any ``window``. ``None``: no limit.
    """

    name: str
    _: KW_ONLY
    concurrency: int | None = None
    per_key: int | None = None
    rate: tuple[int, timedelta] | None = None

    def __post_init__(self) -> None:
        _check_name("queue name", self.name)
        for field in ("concurrency", "per_key"):
            value = getattr(self, field)
            if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
                raise ValueError(
                    f"queue {self.name!r}: {field} must be an int of at least 1 or None, not {value!r}"
                )
        rate = self.rate
        if rate is not None:
            if not isinstance(rate, tuple) or len(rate) != 2:
                raise ValueError(f"queue {self.name!r}: rate must be (count, timedelta), not {rate!r}")
            count, window = rate
            if not isinstance(count, int) or isinstance(count, bool) or count < 1:
                raise ValueError(
                    f"queue {self.name!r}: a rate's count must be an int of at least 1, not {count!r}"
                )
            if not isinstance(window, timedelta) or window <= timedelta(0):
                raise ValueError(
                    f"queue {self.name!r}: a rate's window must be a positive timedelta, not {window!r}"
                )

    @property
    def window(self) -> float | None:
        """The rate's window in seconds (``None``: no rate limit)."""
        return None if self.rate is None else self.rate[1].total_seconds()

    @property
    def limited(self) -> bool:
        """Whether any limit is set."""
        return self.concurrency is not None or self.per_key is not None or self.rate is not None


class Admission(NamedTuple):
    """The outcome of a sweep's take of a run: ``taken``, or why not. ``full`` is ``"queue"``
    (its concurrency), ``"key"`` (its ``per_key``) or ``"rate"`` when a limit refused it (``None``: a
    live owner holds the run); ``retry_in``: seconds until the rate admits a start again; ``queue``
    and ``key``: the refused run's (what a sweep then leaves out of its listing)."""

    taken: bool
    full: str | None = None
    retry_in: float | None = None
    queue: str | None = None
    key: str | None = None


class Work(NamedTuple):
    """A run that needs an owner, as a sweep lists it: its queue and key (``None``: none recorded)."""

    execution_id: str
    queue: str | None = None
    key: str | None = None


def _check_name(what: str, value: object) -> None:
    if not isinstance(value, str) or not value or len(value) > _MAX_NAME:
        raise ValueError(f"{what} must be a non-empty str of at most {_MAX_NAME} characters, not {value!r}")


def check_enqueue(queue: object, key: object, priority: object) -> None:
    """Refuse a bad ``queue``, ``key`` or ``priority`` of an enqueue before anything is written."""
    _check_name("queue", queue)
    if key is not None:
        _check_name("key", key)
    if not isinstance(priority, int) or isinstance(priority, bool) or not -(2**31) <= priority < 2**31:
        raise ValueError(f"priority must be an int (32-bit), not {priority!r}")


def _rate_per_second(queue: Queue) -> float:
    return math.inf if queue.rate is None else queue.rate[0] / queue.rate[1].total_seconds()


def _least(a: int | None, b: int | None) -> int | None:
    return b if a is None else a if b is None else min(a, b)


def stricter(a: Queue, b: Queue) -> Queue:
    """Both declarations of one queue at once: the lower ``concurrency`` and ``per_key``, and the
    rate that admits fewer starts per second (at a tie, the smaller burst)."""
    rate = a.rate
    if b.rate is not None and (
        a.rate is None or (_rate_per_second(b), b.rate[0]) < (_rate_per_second(a), a.rate[0])
    ):
        rate = b.rate
    return Queue(
        a.name,
        concurrency=_least(a.concurrency, b.concurrency),
        per_key=_least(a.per_key, b.per_key),
        rate=rate,
    )


def start_slot(recorded: int, top: int | None, oldest: int | None, count: int) -> int:
    """The slot of ``queue_starts`` a new start is written to: a new one (past the ``top`` slot)
    while the queue has fewer than ``count`` starts (``recorded``), else the oldest start's. A
    declaration that lowers ``count`` keeps the most recent ``count`` starts, so a queue never
    has more: its oldest start is then its ``count``-th most recent."""
    if recorded < count or oldest is None:
        return 0 if top is None else top + 1
    return oldest


def admit(queue: Queue, live: int, keyed: int | None, nth: float | None, now: float) -> Admission:
    """Whether a run of ``queue`` may start now: ``live`` runs of the queue (``keyed`` of them with
    the run's key; ``None``: the run has none) are owned by live owners, and ``nth`` is the time of
    the queue's ``rate[0]``-th most recent start (epoch seconds; ``None``: fewer were recorded)."""
    if queue.concurrency is not None and live >= queue.concurrency:
        return Admission(False, "queue")
    if queue.per_key is not None and keyed is not None and keyed >= queue.per_key:
        return Admission(False, "key")
    if queue.rate is not None and nth is not None:
        window = queue.rate[1].total_seconds()
        if now - nth < window:
            return Admission(False, "rate", nth + window - now)
    return Admission(True)


def parse_queue(spec: str) -> Queue:
    """A queue from ``NAME:concurrency=3,per_key=1,rate=10/60s`` (the command line's ``--queue``);
    ``ValueError`` naming what is wrong. A rate's window takes ``ms``, ``s`` (the default), ``m`` or ``h``."""
    found = _SPEC.match(spec.strip())
    if found is None:
        raise ValueError(
            f"queue spec {spec!r}: expected NAME:limit=value,... (e.g. q:concurrency=3,rate=10/60s)"
        )
    name = found["name"].strip()
    options: dict[str, Any] = {}
    for part in filter(None, (p.strip() for p in found["limits"].split(","))):
        field, sep, value = part.partition("=")
        field, value = field.strip(), value.strip()
        if not sep or not value:
            raise ValueError(f"queue spec {spec!r}: {part!r} is not limit=value")
        if field in options:
            raise ValueError(f"queue spec {spec!r}: {field} is given twice")
        if field in ("concurrency", "per_key"):
            if not value.isdigit() or int(value) < 1:
                raise ValueError(
                    f"queue spec {spec!r}: {field} must be a whole number of at least 1, not {value!r}"
                )
            options[field] = int(value)
        elif field == "rate":
            rate = _RATE.match(value)
            if rate is None or int(rate["n"]) < 1 or float(rate["window"]) <= 0:
                raise ValueError(
                    f"queue spec {spec!r}: rate must be COUNT/WINDOW with a positive window, e.g. "
                    f"10/60s or 5/500ms, not {value!r}"
                )
            seconds = float(rate["window"]) * _UNITS[rate["unit"]]
            options[field] = (int(rate["n"]), timedelta(seconds=seconds))
        else:
            raise ValueError(f"queue spec {spec!r}: unknown limit {field!r} (concurrency, per_key or rate)")
    if not options:
        raise ValueError(f"queue spec {spec!r}: no limit given (concurrency=, per_key= or rate=)")
    return Queue(name, **options)
