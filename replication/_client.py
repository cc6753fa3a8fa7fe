"""The plane's HTTP client (httpx): one ingest POST, the reads, and how each answer is classified.

Classification: a 2xx that carries the plane's acknowledgment, a JSON body ``{"accepted": N,
"rejections": [...]}`` (and ``"signals": M`` when the POST carried inbox entries), is accepted (with
per-item ``rejections``, naming a ``checkpoint_id`` or a ``signal_id``); a 2xx without it (an empty
body from a middlebox, HTML, JSON of another shape, a plane that does not take inbox entries) is a
transport error, since nothing says the rows and entries reached the plane. 400, 409, 413 and 422 refuse the batch on payload grounds; 401, 403, 404, 408
and 429 are a condition of the connection (rows stay buffered; 429 brings ``Retry-After``); 5xx
and transport errors are retried later with backoff. Other statuses count as a condition of the
connection too: nothing about them says a row is at fault.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Mapping
from email.utils import parsedate_to_datetime
from typing import Any, Final
from urllib.parse import urlsplit

import httpx
import msgspec

from stores import utcnow

from ._errors import PlaneError

__all__ = ["INGEST_PATH", "Answer", "PlaneClient", "Verdict"]

INGEST_PATH: Final = "/public/v1/checkpoints/ingest"
_PAYLOAD_REFUSALS: Final = frozenset({400, 409, 413, 422})
_EXPLANATION_CHARS: Final = 300
_LOOPBACK: Final = frozenset({"localhost", "127.0.0.1", "::1"})
_log = logging.getLogger("tether")


class Verdict(enum.Enum):
    """What an answer to an ingest POST means for the rows it carried."""

    ACCEPTED = "accepted"
    REFUSED = "refused"  # payload grounds: quarantine (named rows, or bisect)
    BLOCKED = "blocked"  # a condition of the connection: keep the rows, try later
    FAILED = "failed"  # 5xx or transport: keep the rows, retry with backoff


class Answer(msgspec.Struct, frozen=True):
    """One answer: its verdict (``outcome``), status (``None`` on a transport error), the plane's words,
    the rows it rejected or refused by name (and the inbox entries, by ``signal_id``),
    ``Retry-After`` in seconds, and whether the plane did not answer within the timeout (it may
    still be working on the batch)."""

    outcome: Verdict
    status: int | None
    explanation: str
    rejections: dict[str, str] = {}
    resend: frozenset[str] = frozenset()
    retry_after: float | None = None
    timed_out: bool = False
    signal_rejections: dict[str, str] = {}


class PlaneClient:
    """An ``httpx.AsyncClient`` bound to one plane and one key."""

    def __init__(self, url: str, api_key: str, *, timeout: float) -> None:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise ValueError(f"a plane URL is http(s)://host[:port][/path], not {url!r}")
        if parts.scheme == "http" and (parts.hostname or "") not in _LOOPBACK:
            _log.warning(
                "replicator: %s is plain http to a host other than loopback: payloads travel in clear", url
            )
        self.url = url.rstrip("/")
        self._headers = {"X-API-Key": api_key, "Content-Type": "application/json"}
        self._timeout = timeout
        self._http: httpx.AsyncClient | None = None

    def _client(self) -> httpx.AsyncClient:
        if self._http is None:
            self._http = httpx.AsyncClient(base_url=self.url, headers=self._headers, timeout=self._timeout)
        return self._http

    async def aclose(self) -> None:
        """Close the connection pool (idempotent)."""
        http, self._http = self._http, None
        if http is not None:
            await http.aclose()

    async def ingest(self, body: bytes, *, signals: bool = False) -> Answer:
        """POST one ingest body (``signals``: it carries inbox entries) and classify the answer
        (never raises for HTTP or transport trouble)."""
        try:
            response = await self._client().post(INGEST_PATH, content=body)
        except httpx.HTTPError as exc:
            timed_out = isinstance(exc, httpx.ReadTimeout | httpx.WriteTimeout)  # the plane has it
            return Answer(Verdict.FAILED, None, f"{type(exc).__name__}: {exc}", timed_out=timed_out)
        return classify(response.status_code, response.content, response.headers, signals=signals)

    async def read(self, path: str) -> Any | None:
        """GET a read endpoint: its JSON, or ``None`` on 404; :class:`PlaneError` otherwise."""
        try:
            response = await self._client().get(path)
        except httpx.HTTPError as exc:
            raise PlaneError(f"cannot reach the plane at {self.url}: {type(exc).__name__}: {exc}") from exc
        if response.status_code == 404:
            return None
        if response.status_code // 100 != 2:
            raise PlaneError(
                f"GET {self.url}{path} answered {response.status_code}: {_words(_json(response.content), response.content)}",
                status=response.status_code,
            )
        try:
            return msgspec.json.decode(response.content)
        except msgspec.DecodeError as exc:
            raise PlaneError(f"GET {self.url}{path} answered with a body that is not JSON: {exc}") from exc


def classify(status: int, content: bytes, headers: Mapping[str, str], *, signals: bool = False) -> Answer:
    """The :class:`Answer` of an ingest response (``signals``: the POST carried inbox entries)."""
    body = _json(content)
    words = _words(body, content)
    if 200 <= status < 300:
        missing = _unacknowledged(body, content, signals)
        if missing is not None:
            return Answer(Verdict.FAILED, status, missing)
        named, resend, entries = _rejections(body)
        return Answer(Verdict.ACCEPTED, status, words, named, resend, signal_rejections=entries)
    if status in _PAYLOAD_REFUSALS:
        named, _, entries = _rejections(body)
        return Answer(Verdict.REFUSED, status, words, named, signal_rejections=entries)
    if status >= 500:
        return Answer(Verdict.FAILED, status, words, retry_after=_retry_after(headers))
    return Answer(Verdict.BLOCKED, status, words, retry_after=_retry_after(headers))


_NOT_JSON: Final = object()


def _json(content: bytes) -> Any:
    """The body as JSON, or :data:`_NOT_JSON`."""
    try:
        return msgspec.json.decode(content)
    except msgspec.DecodeError:
        return _NOT_JSON


def _words(body: Any, content: bytes) -> str:
    """The plane's explanation: its JSON ``error``/``detail`` if it gave one, else the body text."""
    if isinstance(body, dict):
        for field in ("error", "detail", "message"):
            text = body.get(field)
            if isinstance(text, str):
                return text[:_EXPLANATION_CHARS]
    return content.decode("utf-8", "replace").strip()[:_EXPLANATION_CHARS]


def _unacknowledged(body: Any, content: bytes, signals: bool) -> str | None:
    """Why a 2xx body is not the plane's acknowledgment ``{"accepted": N, "rejections": [...]}``,
    with ``"signals": M`` when the POST carried inbox entries (the rows and entries may not have
    reached the plane), or ``None`` when it is one."""
    what = 'not the plane\'s acknowledgment {"accepted": N, "rejections": [...]}'
    if not content.strip():
        return f"an empty body, {what}"
    if body is _NOT_JSON:
        return f"a body that is not JSON, {what}: {_words(body, content)!r}"
    if not isinstance(body, dict):
        return f"JSON {type(body).__name__}, {what}"
    accepted = body.get("accepted")
    if not isinstance(accepted, int) or isinstance(accepted, bool) or accepted < 0:
        return f'no "accepted" count, {what}'
    if not isinstance(body.get("rejections"), list):
        return f'no "rejections" list, {what}'
    stored = body.get("signals")
    if signals and (not isinstance(stored, int) or isinstance(stored, bool) or stored < 0):
        return 'no "signals" count for the inbox entries it was sent (a plane that does not take them?)'
    return None


def _rejections(body: Any) -> tuple[dict[str, str], frozenset[str], dict[str, str]]:
    """``{checkpoint_id: reason}`` of a body's ``rejections``, the ids it asks to send whole, and
    ``{signal_id: reason}`` of the inbox entries it names."""
    found = body.get("rejections") if isinstance(body, dict) else None
    named: dict[str, str] = {}
    resend: set[str] = set()
    entries: dict[str, str] = {}
    for entry in found if isinstance(found, list) else ():
        if not isinstance(entry, dict):
            continue
        reason = str(entry.get("reason", "rejected"))[:_EXPLANATION_CHARS]
        if isinstance(entry.get("checkpoint_id"), str):
            if entry.get("resend") is True:
                resend.add(entry["checkpoint_id"])
            else:
                named[entry["checkpoint_id"]] = reason
        elif isinstance(entry.get("signal_id"), str):
            entries[entry["signal_id"]] = reason
    return named, frozenset(resend), entries


def _retry_after(headers: Mapping[str, str]) -> float | None:
    """``Retry-After`` in seconds (delta-seconds or an HTTP date), or ``None``."""
    value = headers.get("retry-after")
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        return max(0.0, (parsedate_to_datetime(value) - utcnow()).total_seconds())
    except (TypeError, ValueError):
        return None
