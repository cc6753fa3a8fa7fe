"""A reusable conformance suite for tether stores.

A store passes when it behaves like the protocol's docstrings and the rules of docs/durability.md say:
ordering by ``seq``, the conflicts, pause and claim, re-entry, fork, prune (rule 10), the cache, the
ownership lock and its lock-free read, the run heads, the outbox of rows, cache and inbox entries
(when the store is a :class:`~stores.ReplicatedStore`), messages stored once, history pages and
watches, the JSON rule, the row size limit and the newer-schema refusal.

Run it against your store by subclassing :class:`StoreConformance` in a test module::

    import pytest
    from stores.testing import StoreConformance

    class TestMyStore(StoreConformance):
        @pytest.fixture(autouse=True)
        def _database(self, tmp_path):
            self.path = tmp_path / "my.db"

        async def make_store(self, **options):
            return MyStore(self.path, **options)   # not set up: the suite calls setup()

        async def bump_schema_version(self, store):
            ...  # raw SQL: mark the database as written by a newer schema version

        async def raw_checkpoint_ids(self, execution_id):
            ...  # raw SQL: the ids of the run's stored rows

Every ``make_store`` call must open the *same* database (the suite opens several instances to
check the ownership lock, concurrent writers and the schema refusal). ``options`` may hold
``max_row_bytes``. The suite needs ``anyio``'s pytest plugin (it ships with anyio) and an
``anyio_backend`` fixture (e.g. returning ``"asyncio"``).
"""

from ._cache import CacheTests
from ._factories import make_message, make_pending, make_row, resume_row, run_end_row
from ._follow import FollowTests
from ._heads import HeadsTests
from ._inbox import InboxOutboxTests
from ._json_rule import JsonRuleTests
from ._locks import LockTests
from ._messages import MessageTests
from ._outbox import OutboxTests
from ._pauses import PauseTests
from ._prune import PruneTests
from ._reentry import ReentryTests
from ._rows import RowTests

__all__ = [
    "StoreConformance",
    "make_message",
    "make_pending",
    "make_row",
    "resume_row",
    "run_end_row",
]


class StoreConformance(
    RowTests,
    PauseTests,
    ReentryTests,
    PruneTests,
    CacheTests,
    LockTests,
    HeadsTests,
    OutboxTests,
    InboxOutboxTests,
    MessageTests,
    JsonRuleTests,
    FollowTests,
):
    """The conformance suite. Subclass it and implement :meth:`make_store` (and the backend hooks)."""
