"""The SQLite row statements: the timestamp text."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest

from stores.lowlevel import ts

_UTC_TIMES = [
    datetime(2026, 12, 1, 21, 32, 55, 957594, tzinfo=UTC),
    datetime(2026, 1, 9, 0, 0, 0, 0, tzinfo=UTC),
    datetime(999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC),
    datetime(1, 1, 1, 0, 0, 0, 1, tzinfo=UTC),
    datetime(9999, 12, 31, 23, 59, 59, 10, tzinfo=UTC),
    datetime(2024, 2, 29, 12, 5, 7, 123000, tzinfo=UTC),
]


@pytest.mark.parametrize("value", _UTC_TIMES)
def test_a_timestamp_is_the_utc_isoformat_with_microseconds(value: datetime) -> None:
    assert ts(value) == value.isoformat(timespec="microseconds")
    assert len(ts(value)) == 32


def test_a_timestamp_of_another_zone_or_naive_is_its_utc_time() -> None:
    value = datetime(2026, 3, 1, 1, 30, 0, 250, tzinfo=timezone(timedelta(hours=2)))
    assert ts(value) == "2026-02-28T23:30:00.000250+00:00"
    assert ts(datetime(2026, 3, 1, 1, 30)) == "2026-03-01T01:30:00.000000+00:00"


def test_timestamps_sort_as_their_times() -> None:
    times = sorted(_UTC_TIMES)
    assert sorted(ts(t) for t in times) == [ts(t) for t in times]
