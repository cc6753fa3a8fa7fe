"""The inspector's pages: runs, one run's timeline, a diff of two rows, the pending approvals.

Every page reads through the same functions as the command line (``ActorSystem.status``/``runs``
and :mod:`tether._timeline`); Approve and Reject are plain HTML forms posting the CSRF token. A
decision claims the pause; when this inspector was given the run's runner it also drives the run
to its next resting row (bounded by :data:`DRIVE_TIMEOUT`; a longer run goes on in the background),
else the claim hands the run to the fleet (``system.claim``), whose workers finish it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from datetime import datetime
from pathlib import Path
from typing import Any, Final
from urllib.parse import parse_qs, quote, urlencode

import anyio
import msgspec
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Route
from starlette.templating import Jinja2Templates

from actors import ActorSystem, AlreadyResumed, Resume
from stores import PendingInterrupt, RunNotFound, StoreUnavailable, TetherError

from .._commands._common import RUN_STATUSES, Runner
from .._store_url import opened_store
from .._timeline import (
    diff_rows,
    next_step,
    pick_rows,
    status_text,
    sync_states,
    timeline,
    usage_text,
    when,
)
from ._guard import csrf_ok

__all__ = ["DRIVE_TIMEOUT", "PAGE", "build_app"]

#: How long a decision's request waits for the run to reach its next resting row.
DRIVE_TIMEOUT: Final = 30.0
#: Rows per page of the runs list and of the pending list.
PAGE: Final = 100
#: What the run page says after a decision (``?done=``).
_DONE: Final = {
    "approved": "approved; the run is now {status}.",
    "rejected": "rejected; the run is now {status}.",
    "approved-handed": "approved; handed to the fleet: a worker finishes the run.",
    "rejected-handed": "rejected; handed to the fleet: a worker finishes the run.",
}
#: The most runs one page lists (``?limit=``).
_MAX_LIMIT: Final = 2000
#: Bound on a posted form (a decision is a few short fields).
_MAX_FORM: Final = 16 * 1024

_templates = Jinja2Templates(directory=str(Path(__file__).with_name("templates")))
_templates.env.filters["when"] = when
_templates.env.filters["status_text"] = status_text
_templates.env.filters["usage_text"] = usage_text
_templates.env.filters["json"] = lambda value: msgspec.json.encode(value).decode()


class _State:
    """What every request reads: the system on the store, the CSRF token, the runners' names."""

    def __init__(self, system: ActorSystem, csrf: str, runners: Sequence[Runner]) -> None:
        self.system = system
        self.csrf = csrf
        self.runners = {runner.name for runner in runners}


def _state(request: Request) -> _State:
    state: _State = request.app.state.inspector
    return state


def _page(request: Request, name: str, status_code: int = 200, **context: Any) -> Response:
    context.setdefault("csrf", _state(request).csrf)
    return _templates.TemplateResponse(request, name, context, status_code=status_code)


async def _runs(request: Request) -> Response:
    status = request.query_params.get("status") or None
    runner = request.query_params.get("runner") or None
    if status is not None and status not in RUN_STATUSES:
        return _page(request, "message.html", 400, title="Unknown status", text=f"no status {status!r}")
    limit = request.query_params.get("limit", str(PAGE))
    if not limit.isdigit() or not 1 <= int(limit) <= _MAX_LIMIT:
        return _page(request, "message.html", 400, title="Bad limit", text=f"limit is 1 to {_MAX_LIMIT}")
    found = await _state(request).system.runs(status=status, runner=runner, limit=int(limit))
    more = None
    if len(found) == int(limit) and int(limit) < _MAX_LIMIT:
        query = {
            "limit": str(min(_MAX_LIMIT, 2 * int(limit))),
            "status": status or "",
            "runner": runner or "",
        }
        more = "/runs?" + urlencode({k: v for k, v in query.items() if v})
    return _page(
        request, "runs.html", runs=found, status=status, runner=runner or "", statuses=RUN_STATUSES, more=more
    )


async def _run(request: Request) -> Response:
    system = _state(request).system
    execution_id = request.path_params["execution_id"]
    summary = await system.status(execution_id)
    rows = await system.history(execution_id)
    assert system.store is not None
    lines = timeline(rows, await sync_states(system.store, rows))
    said = _DONE.get(request.query_params.get("done", ""))
    done = said.format(status=summary.status) if said is not None else None
    return _page(request, "run.html", summary=summary, rows=lines, done=done, next_step=next_step(summary))


async def _diff(request: Request) -> Response:
    system = _state(request).system
    execution_id = request.path_params["execution_id"]
    try:
        seq_a, seq_b = int(request.query_params["a"]), int(request.query_params["b"])
    except (KeyError, ValueError):
        return _page(request, "message.html", 400, title="Pick two rows", text="choose a row A and a row B")
    diff = diff_rows(*pick_rows(await system.history(execution_id), seq_a, seq_b))
    return _page(request, "diff.html", diff=diff)


async def _pending(request: Request) -> Response:
    """A page of the pending approvals; ``?after=ID&at=TIME`` continues after the last entry of
    the previous page, by position (so paging holds when that run was decided meanwhile)."""
    after = None
    if "after" in request.query_params:
        try:
            at = datetime.fromisoformat(request.query_params["at"])
        except (KeyError, ValueError):
            return _page(
                request, "message.html", 400, title="Bad page", text="a next page takes after= and at="
            )
        after = PendingInterrupt(execution_id=request.query_params["after"], reason="", created_at=at)
    found: list[PendingInterrupt] = await _state(request).system.pending(limit=PAGE, after=after)
    more = None
    if len(found) == PAGE:
        more = "/pending?" + urlencode(
            {"after": found[-1].execution_id, "at": found[-1].created_at.isoformat()}
        )
    return _page(request, "pending.html", pending=found, more=more)


async def _decide(request: Request) -> Response:
    state = _state(request)
    execution_id = request.path_params["execution_id"]
    if request.path_params["decision"] not in ("approve", "reject"):
        return _page(request, "message.html", 404, title="Not found", text="a run takes approve or reject")
    approved = request.path_params["decision"] == "approve"
    body = b""
    async for chunk in request.stream():  # read at most _MAX_FORM (+ one chunk), never more
        body += chunk
        if len(body) > _MAX_FORM:
            break
    form = parse_qs(body.decode("utf-8", "replace")) if len(body) <= _MAX_FORM else {}
    if not csrf_ok(state.csrf, form):
        return _page(
            request, "message.html", 403, title="Refused", text="refused: CSRF token missing or wrong"
        )
    approver = (form.get("approver") or ["inspector"])[0][:200]
    decision = Resume(approved=approved, metadata={"approver": approver})
    done = "approved" if approved else "rejected"
    try:
        if (await state.system.status(execution_id)).runner in state.runners:
            with anyio.move_on_after(DRIVE_TIMEOUT):
                await state.system.resume(execution_id, decision)
        else:  # no runner here: claim the pause and leave the run to the fleet's workers
            await state.system.claim(execution_id, decision)
            done += "-handed"
    except AlreadyResumed as exc:
        return _page(request, "message.html", 409, title="Already resumed", text=f"already resumed: {exc}")
    return RedirectResponse(f"/runs/{quote(execution_id, safe='')}?done={done}", status_code=303)


async def _refused(request: Request, exc: Exception) -> Response:
    """A refusal of the library as a page naming it: 404 for an unknown run or row, 503 when the
    store cannot be reached, else 409 (a missing runner, a finished run)."""
    code = 404 if isinstance(exc, RunNotFound) else 503 if isinstance(exc, StoreUnavailable) else 409
    return _page(request, "message.html", code, title=type(exc).__name__, text=f"{type(exc).__name__}: {exc}")


async def _home(request: Request) -> Response:
    return RedirectResponse("/runs", status_code=303)


def build_app(url: str, *, runners: Sequence[Runner], csrf: str) -> Starlette:
    """The inspector's ASGI app on the store at ``url`` (opened for the app's lifetime)."""

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        async with opened_store(url, create=False) as store, ActorSystem(store, runners=runners) as system:
            app.state.inspector = _State(system, csrf, runners)
            yield

    routes = [
        Route("/", _home),
        Route("/runs", _runs),
        Route("/runs/{execution_id}", _run),
        Route("/runs/{execution_id}/diff", _diff),
        Route("/pending", _pending),
        Route("/runs/{execution_id}/{decision:str}", _decide, methods=["POST"]),
    ]
    return Starlette(routes=routes, lifespan=lifespan, exception_handlers={TetherError: _refused})
