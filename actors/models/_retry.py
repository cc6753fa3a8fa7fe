"""When to try a model call again, and how long to wait first.

The server decides first: ``x-should-retry: true/false`` is obeyed as it stands; ``retry-after-ms``,
then ``Retry-After`` (seconds, or an HTTP date) say how long to wait, up to :data:`MAX_SERVER_WAIT`
(the official SDK's two minutes). A longer wait is not waited: the call fails at once, naming it.
Otherwise 408, 409, 429 and 5xx are retried after an exponential backoff with jitter. Every wait
stays within the call's deadline.
"""

from __future__ import annotations

import math
import random
import time
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    import httpx

__all__ = ["MAX_SERVER_WAIT", "backoff_delay", "server_wait", "should_retry"]

#: The longest wait a server can ask for that the client will wait (seconds).
MAX_SERVER_WAIT: Final = 120.0

_RETRY_STATUS: Final = frozenset({408, 409, 429})


def server_wait(headers: httpx.Headers) -> float | None:
    """Seconds the server asked to wait before a retry, or None when it did not say (or said nonsense)."""
    for name, scale in (("retry-after-ms", 1000.0), ("retry-after", 1.0)):
        value = headers.get(name)
        if value is None:
            continue
        try:
            seconds = float(value) / scale
        except ValueError:
            continue
        return seconds if math.isfinite(seconds) else None
    value = headers.get("retry-after")
    if value is None:
        return None
    import email.utils  # only for a Retry-After date: not loaded with the package

    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:
        return None
    return when.timestamp() - time.time()


def should_retry(response: httpx.Response) -> bool:
    """Whether a failed response may be tried again: ``x-should-retry`` first, then the status."""
    verdict = response.headers.get("x-should-retry")
    if verdict == "true":
        return True
    if verdict == "false":
        return False
    status = response.status_code
    return status in _RETRY_STATUS or status >= 500


def backoff_delay(retry: int, base: float, cap: float) -> float:
    """The client's own wait before retry number ``retry`` (0 first): ``base * 2**retry``, capped, with jitter."""
    return min(base * 2.0 ** min(retry, 60), cap) * (1 - 0.25 * random.random())
