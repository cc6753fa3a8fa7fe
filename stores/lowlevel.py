"""The internals of ``stores`` that tests and tooling reach: no stability promise.

What the public face (:mod:`stores`, :mod:`stores.testing`) leaves out and a white-box test needs:
the shared rules of the base store, the row codec and the JSON rule's batch encoder, the refusals'
wording, the queue, prune and signal rules, SQLite's row statements and lock watch, and the two
schema modules (``sqlite_schema_module``, ``postgres_schema_module``), whose migrations a test cuts
with ``monkeypatch`` to write a database as an earlier version did, and the modules that open
connections (``sqlite_writer_module``, ``postgres_connection_module``), which a benchmark wraps to
count what they run. Any name here may change or go
in any release.
"""

from stores._base import REPLAN_BUDGET, BaseStore, LogMoved, Plan, check_history_range, check_page, intent_key
from stores._codec import DEFAULT_MAX_ROW_BYTES, MessageLogs
from stores._codec import _encode_one_by_one as encode_one_by_one
from stores._errors import already_finished, marker_not_step, no_checkpoint, no_checkpoints, no_step
from stores._heads import check_heads_arguments
from stores._json import encode_many
from stores._prune import PruneRow, doomed
from stores._queues import admit, start_slot, stricter
from stores._signals import check_copies, check_copy, check_signal, merge_copies, refuse_signal, restored_wait
from stores._watch import WAITS
from stores.postgres import _connection as postgres_connection_module
from stores.postgres import _schema as postgres_schema_module
from stores.sqlite import _schema as sqlite_schema_module
from stores.sqlite import _writer as sqlite_writer_module
from stores.sqlite._locks import WATCH_INTERVAL
from stores.sqlite._rows import pending_query, ts

__all__ = [
    "DEFAULT_MAX_ROW_BYTES",
    "REPLAN_BUDGET",
    "WAITS",
    "WATCH_INTERVAL",
    "BaseStore",
    "LogMoved",
    "MessageLogs",
    "Plan",
    "PruneRow",
    "admit",
    "already_finished",
    "check_copies",
    "check_copy",
    "check_heads_arguments",
    "check_history_range",
    "check_page",
    "check_signal",
    "doomed",
    "encode_many",
    "encode_one_by_one",
    "intent_key",
    "marker_not_step",
    "merge_copies",
    "no_checkpoint",
    "no_checkpoints",
    "no_step",
    "pending_query",
    "postgres_connection_module",
    "postgres_schema_module",
    "refuse_signal",
    "restored_wait",
    "sqlite_schema_module",
    "sqlite_writer_module",
    "start_slot",
    "stricter",
    "ts",
]
