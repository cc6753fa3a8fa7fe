"""Schedules: a runner started at each tick of a cron expression or a fixed interval, by the fleet.

A schedule lives in the store (``system.schedule`` upserts it by name), so every serving worker
sees it; a worker's sweep starts the run of each due tick with the id ``"<name>@<tick>"`` (ISO 8601
UTC), whose unique first row makes the tick exactly-once however many workers race it, then moves
the schedule's next tick on with a compare-and-set. Ticks missed while no worker served are not
replayed: the latest of them runs, once. Cron expressions (five fields, UTC) are parsed by
``cronsim``, a small maintained library without dependencies of its own.
"""

from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta

import msgspec
from cronsim import CronSim, CronSimError

from stores import RunExists, Store, StoredSchedule, utcnow

__all__ = ["Schedule", "due_tick", "first_tick", "public", "run_id", "start_due", "stored"]


class Schedule(msgspec.Struct, kw_only=True, frozen=True):
    """A schedule as ``system.schedules()`` lists it: ``runner`` (a runner's name) runs ``input``
    at each tick of ``cron`` (five fields, UTC) or every ``every``; ``next_at`` is its next tick,
    ``last_run`` the id of the run its latest tick started (``None``: none yet)."""

    name: str
    runner: str
    input: str
    cron: str | None = None
    every: timedelta | None = None
    next_at: datetime
    last_run: str | None = None


def public(found: StoredSchedule) -> Schedule:
    """The public view of a stored schedule."""
    return Schedule(
        name=found.name,
        runner=found.runner,
        input=found.input if isinstance(found.input, str) else str(found.input),
        cron=found.cron,
        every=None if found.every is None else timedelta(seconds=found.every),
        next_at=found.next_at,
        last_run=found.last_run,
    )


def _cron(expression: str, after: datetime, *, reverse: bool = False) -> datetime:
    """The tick of ``expression`` after ``after`` (or, ``reverse``, at or before it), in UTC."""
    try:
        return next(iter(CronSim(expression, after.astimezone(UTC), reverse=reverse))).astimezone(UTC)
    except CronSimError as error:
        raise ValueError(f"cron expression {expression!r} is not valid: {error}") from None
    except StopIteration:  # pragma: no cover - a valid expression always has a next time
        raise ValueError(f"cron expression {expression!r} never fires") from None


def stored(
    name: str,
    runner: str,
    input: str,
    *,
    cron: str | None,
    every: timedelta | None,
    start_at: datetime | None,
) -> StoredSchedule:
    """A schedule checked and ready to store, with its first tick (``ValueError``/``TypeError``
    naming what is wrong, before anything is written)."""
    if not isinstance(name, str) or not name or "@" in name or len(name) > 200:
        raise ValueError(
            f"a schedule's name is a non-empty str of at most 200 characters without '@', not {name!r}"
        )
    if not isinstance(input, str):
        raise TypeError(f"a schedule's input is a str (the user's message), not {type(input).__name__}")
    if (cron is None) == (every is None):
        raise ValueError("a schedule takes exactly one of cron=... or every=...")
    if start_at is not None and (not isinstance(start_at, datetime) or start_at.tzinfo is None):
        raise TypeError(f"start_at is an aware datetime, not {start_at!r}")
    seconds = None
    if every is not None:
        if not isinstance(every, timedelta) or every.total_seconds() <= 0:
            raise ValueError(f"every is a positive timedelta, not {every!r}")
        seconds = every.total_seconds()
    elif not isinstance(cron, str) or len(cron.split()) != 5:
        raise ValueError(f"cron is an expression of five fields (UTC), not {cron!r}")
    schedule = StoredSchedule(
        name=name, runner=runner, input=input, cron=cron, every=seconds, next_at=utcnow(), last_run=None
    )
    return msgspec.structs.replace(schedule, next_at=first_tick(schedule, start_at))


def first_tick(schedule: StoredSchedule, start_at: datetime | None) -> datetime:
    """A new schedule's first tick: ``start_at`` (or the first cron tick from it), else one
    interval from now (or the next cron tick)."""
    now = utcnow()
    if schedule.cron is not None:
        return _cron(schedule.cron, (start_at or now) - timedelta(microseconds=1))
    assert schedule.every is not None
    return start_at.astimezone(UTC) if start_at is not None else now + timedelta(seconds=schedule.every)


def due_tick(schedule: StoredSchedule, now: datetime) -> tuple[datetime, datetime]:
    """For a due schedule: the latest tick at or before ``now`` (missed ones are not replayed)
    and the tick after it."""
    if schedule.cron is not None:
        tick = max(schedule.next_at, _cron(schedule.cron, now, reverse=True))
        return tick, _cron(schedule.cron, tick)
    assert schedule.every is not None
    step = timedelta(seconds=schedule.every)
    missed = int((now - schedule.next_at) / step)
    tick = schedule.next_at + missed * step
    return tick, tick + step


def run_id(name: str, tick: datetime) -> str:
    """The id of the run a tick starts: ``"<name>@<tick, ISO 8601 UTC>"``."""
    return f"{name}@{tick.astimezone(UTC).isoformat()}"


async def start_due(
    store: Store,
    limit: int,
    start: Callable[[str, str, str], Awaitable[object]],
    has_runner: Callable[[str], bool],
) -> list[str]:
    """Start the run of each due tick this process has the runner for (``start(runner_name,
    input, execution_id)`` enqueues it; a tick another worker started already is skipped) and
    move each schedule on; the ids of the runs this call started."""
    started = []
    now = utcnow()
    for schedule in await store.due_schedules(now, limit):
        if not has_runner(schedule.runner):
            continue
        tick, after = due_tick(schedule, now)
        execution_id = run_id(schedule.name, tick)
        try:
            await start(schedule.runner, schedule.input, execution_id)
            started.append(execution_id)
        except RunExists:
            pass  # another worker started this tick: the unique first row decided
        await store.advance_schedule(schedule.name, schedule.next_at, after, execution_id)
    return started
