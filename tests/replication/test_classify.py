"""How the replicator reads each answer of the plane to an ingest POST, status by status.

The end-to-end cases (a real plane behind a fault layer) are in ``test_refusals.py``; this table
pins the boundaries of each class (2xx, payload refusals, conditions of the connection, 5xx), the
acknowledgment a 2xx must carry, the plane's words, and ``Retry-After`` in both its forms.
"""

from __future__ import annotations

from datetime import timedelta
from email.utils import format_datetime

import httpx
import msgspec
import pytest

from replication.lowlevel import Verdict, classify
from stores import utcnow

ACK = msgspec.json.encode({"accepted": 2, "rejections": []})


def headers(**values: str) -> httpx.Headers:
    return httpx.Headers({k.replace("_", "-"): v for k, v in values.items()})


@pytest.mark.parametrize("status", [200, 201, 202, 299])
def test_an_acknowledged_2xx_is_accepted(status: int) -> None:
    body = msgspec.json.encode(
        {
            "accepted": 1,
            "rejections": [
                {"checkpoint_id": "a", "reason": "too big"},
                {"checkpoint_id": "b", "resend": True},
                {"checkpoint_id": "c"},
                {"reason": "no id"},
            ],
            "detail": "one of three",
        }
    )
    answer = classify(status, body, headers())
    assert (answer.outcome, answer.status, answer.explanation) == (Verdict.ACCEPTED, status, "one of three")
    assert answer.rejections == {"a": "too big", "c": "rejected"}
    assert answer.resend == frozenset({"b"})
    assert answer.retry_after is None


@pytest.mark.parametrize(
    ("content", "why"),
    [
        (b"", "an empty body"),
        (b"  \n", "an empty body"),
        (b"<html>ok</html>", "a body that is not JSON"),
        (b"[]", "JSON list"),
        (b'{"rejections": []}', 'no "accepted" count'),
        (b'{"accepted": true, "rejections": []}', 'no "accepted" count'),
        (b'{"accepted": -1, "rejections": []}', 'no "accepted" count'),
        (b'{"accepted": 3}', 'no "rejections" list'),
    ],
)
def test_a_2xx_without_the_acknowledgment_is_a_transport_failure(content: bytes, why: str) -> None:
    answer = classify(200, content, headers())
    assert (answer.outcome, answer.status) == (Verdict.FAILED, 200)
    assert answer.explanation.startswith(why)
    assert 'not the plane\'s acknowledgment {"accepted": N, "rejections": [...]}' in answer.explanation


def test_inbox_entries_need_their_own_acknowledgment_and_are_named_by_signal_id() -> None:
    carried = msgspec.json.encode(
        {
            "accepted": 1,
            "signals": 1,
            "rejections": [{"signal_id": "s", "reason": "too big"}, {"checkpoint_id": "c"}],
        }
    )
    answer = classify(200, carried, headers(), signals=True)
    assert answer.outcome is Verdict.ACCEPTED
    assert (answer.rejections, answer.signal_rejections) == ({"c": "rejected"}, {"s": "too big"})
    for content in (ACK, b'{"accepted": 1, "signals": "1", "rejections": []}'):
        old = classify(200, content, headers(), signals=True)  # a plane that does not take them
        assert old.outcome is Verdict.FAILED and 'no "signals" count' in old.explanation
    assert classify(200, ACK, headers()).outcome is Verdict.ACCEPTED  # none carried: none needed
    refused = classify(
        422, msgspec.json.encode({"rejections": [{"signal_id": "s", "reason": "r"}]}), headers()
    )
    assert (refused.outcome, refused.rejections, refused.signal_rejections) == (
        Verdict.REFUSED,
        {},
        {"s": "r"},
    )


@pytest.mark.parametrize(
    ("stored", "counted"), [(0, True), (3, True), (-1, False), (True, False), (None, False), (1.0, False)]
)
def test_the_inbox_count_is_a_whole_number_of_zero_or_more(stored: object, counted: bool) -> None:
    content = msgspec.json.encode({"accepted": 1, "signals": stored, "rejections": []})
    answer = classify(200, content, headers(), signals=True)
    if counted:  # a plane may store none of the entries it was sent: it says so with 0
        assert answer.outcome is Verdict.ACCEPTED
    else:
        assert (answer.outcome, answer.explanation) == (
            Verdict.FAILED,
            'no "signals" count for the inbox entries it was sent (a plane that does not take them?)',
        )


def test_entries_the_plane_names_after_one_it_cannot_read_are_still_read() -> None:
    body = msgspec.json.encode(
        {"accepted": 0, "rejections": ["garbled", {"checkpoint_id": "a"}, 7, {"signal_id": "s"}]}
    )
    answer = classify(200, body, headers())
    assert (answer.rejections, answer.signal_rejections) == ({"a": "rejected"}, {"s": "rejected"})


@pytest.mark.parametrize("status", [400, 409, 413, 422])
def test_payload_refusals_are_refused_with_the_rows_they_name(status: int) -> None:
    body = msgspec.json.encode({"error": "too long", "rejections": [{"checkpoint_id": "x", "reason": "r"}]})
    answer = classify(status, body, headers(retry_after="9"))
    assert (answer.outcome, answer.status, answer.explanation) == (Verdict.REFUSED, status, "too long")
    assert answer.rejections == {"x": "r"}
    assert answer.retry_after is None


@pytest.mark.parametrize("status", [300, 301, 401, 403, 404, 408, 429, 499])
def test_conditions_of_the_connection_are_blocked(status: int) -> None:
    answer = classify(status, b'{"error": "go away"}', headers(retry_after="3"))
    assert (answer.outcome, answer.status, answer.explanation) == (Verdict.BLOCKED, status, "go away")
    assert answer.retry_after == 3.0


@pytest.mark.parametrize("status", [500, 502, 503, 599])
def test_server_errors_fail_and_carry_retry_after(status: int) -> None:
    answer = classify(status, b"upstream down\n", headers(retry_after="7"))
    assert (answer.outcome, answer.status, answer.explanation) == (Verdict.FAILED, status, "upstream down")
    assert answer.retry_after == 7.0
    assert classify(status, b"", headers()).retry_after is None


def test_retry_after_as_seconds_or_an_http_date() -> None:
    assert classify(429, b"", headers(retry_after="0.25")).retry_after == 0.25
    assert classify(429, b"", headers(retry_after="-5")).retry_after == 0.0
    assert classify(429, b"", headers(retry_after="soon")).retry_after is None
    later = format_datetime(utcnow() + timedelta(seconds=30), usegmt=True)
    seconds = classify(503, b"", headers(retry_after=later)).retry_after
    assert seconds is not None and 25 <= seconds <= 30
    earlier = format_datetime(utcnow() - timedelta(seconds=30), usegmt=True)
    assert classify(503, b"", headers(retry_after=earlier)).retry_after == 0.0


def test_the_planes_words_come_from_its_json_or_its_text() -> None:
    for field in ("error", "detail", "message"):
        assert classify(404, msgspec.json.encode({field: "why"}), headers()).explanation == "why"
    assert classify(404, b'{"error": 3}', headers()).explanation == '{"error": 3}'
    assert classify(404, b"x" * 400, headers()).explanation == "x" * 300
    assert classify(404, msgspec.json.encode({"error": "y" * 400}), headers()).explanation == "y" * 300
