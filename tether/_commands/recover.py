"""``tether recover [--force] ID [--runner module:attr]``: recover a run whose owner is gone or frozen.

Without ``--force`` a run a live process owns is refused. A frozen owner (a stopped VM, a process
under a debugger) holds its liveness lock forever; ``--force`` ends its lock session on PostgreSQL
(``pg_terminate_backend``), which abandons every run that process owns, so the fleet recovers them.
It is never done automatically. With ``--runner`` the run is then driven here; without, a worker's
sweep takes it.
"""

from __future__ import annotations

import argparse

import anyio

from stores import AlreadyResumed, OwnerSessions, StoreError

from .._timeline import status_text
from ._command import Command
from ._common import add_json, add_runner, opened_system, print_result

__all__ = ["COMMAND"]


def _arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("execution_id", metavar="ID", help="the run to recover")
    parser.add_argument(
        "--force",
        action="store_true",
        help="end the lock session of the run's owner (a frozen process) first; PostgreSQL only",
    )
    add_runner(parser, required=False, what="that drives the run here (else the fleet does)")
    add_json(parser)


async def _run(args: argparse.Namespace) -> int:
    eid = args.execution_id
    async with opened_system(args.store, args.runner, as_json=args.json) as system:
        store = system.store
        assert store is not None
        if args.force:
            if not isinstance(store, OwnerSessions):
                raise StoreError(
                    f"--force ends an owner's PostgreSQL lock session; on {store!r} stop or kill the "
                    "frozen process instead (the kernel frees its lock when it exits)"
                )
            pid = await store.terminate_owner(eid)
            if pid is not None:
                print(f"{eid}: ended the lock session (server pid {pid}) of its owner", flush=True)
                await anyio.sleep(0.05)  # the server frees the lock as the session ends
        if await store.owned([eid]):
            raise AlreadyResumed(
                f"run {eid!r} is owned by a live process; if that process is frozen, --force ends "
                "its lock session"
            )
        if args.runner:
            result = await system.resume(eid)
        else:
            summary = await system.status(eid)
    if args.runner:
        print_result(result, args.json)
    else:
        print(
            f"{eid}: {status_text(summary.status)}; a worker's sweep takes it (or add --runner to drive it here)"
        )
    return 0


COMMAND = Command(
    name="recover",
    help="recover a run whose owner died or froze (--force ends a frozen owner's lock session)",
    run=_run,
    add_arguments=_arguments,
)
