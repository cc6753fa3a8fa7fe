"""Schedules as the store keeps them: :class:`StoredSchedule`, one row per name, shared by a fleet.

The store holds each schedule's next tick (``next_at``, indexed: a worker reads only the due ones)
and moves it on with a compare-and-set, so racing workers agree; the run a tick starts has the id
``"<name>@<tick>"``, whose unique first row makes the tick exactly-once in any case. What a tick is
(cron or a fixed interval) is computed by the caller (``actors``); the store only keeps the rows.

No ``from __future__ import annotations`` here: ``stores`` reports :class:`StoredSchedule` as
``stores.StoredSchedule``, and msgspec resolves string annotations in the module ``__module__`` names.
"""

from datetime import datetime
from typing import Any

import msgspec

__all__ = ["COLUMNS", "StoredSchedule", "schedule_sql"]


class StoredSchedule(msgspec.Struct, kw_only=True, frozen=True):
    """One schedule: ``runner`` (a runner's name) runs ``input`` at each tick of ``cron`` (five
    fields, UTC) or every ``every`` seconds; ``next_at`` is its next tick, ``last_run`` the id of
    the run its latest tick started (``None``: none yet)."""

    name: str
    runner: str
    input: Any
    cron: str | None = None
    every: float | None = None
    next_at: datetime
    last_run: str | None = None


#: The columns of a schedule, in the order every backend selects them.
COLUMNS = "name, runner, input, cron, every, next_at, last_run"


def schedule_sql(table: str, mark: Any) -> dict[str, str]:
    """The schedule statements of a backend (``mark(n)`` writes the n-th parameter): one text for
    both dialects. An upsert keeps the stored next tick when the timing (cron, every) is the same,
    so a process that declares its schedules at each start neither skips nor repeats a tick."""
    m = mark
    return {
        "put": f"INSERT INTO {table} ({COLUMNS}) VALUES ({m(1)}, {m(2)}, {m(3)}, {m(4)}, {m(5)}, {m(6)}, NULL) "
        "ON CONFLICT (name) DO UPDATE SET runner = excluded.runner, input = excluded.input, "
        "cron = excluded.cron, every = excluded.every, next_at = CASE WHEN "
        f"{table}.cron IS NOT DISTINCT FROM excluded.cron AND {table}.every IS NOT DISTINCT FROM "
        f"excluded.every THEN {table}.next_at ELSE excluded.next_at END",
        "delete": f"DELETE FROM {table} WHERE name = {m(1)}",
        "all": f"SELECT {COLUMNS} FROM {table} ORDER BY name",
        "due": f"SELECT {COLUMNS} FROM {table} WHERE next_at <= {m(1)} ORDER BY next_at LIMIT {m(2)}",
        "advance": f"UPDATE {table} SET next_at = {m(3)}, last_run = {m(4)} "
        f"WHERE name = {m(1)} AND next_at = {m(2)}",
    }
