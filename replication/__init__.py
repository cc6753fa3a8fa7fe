"""Shipping a store's rows to a remote plane, and restoring a run from it.

:class:`Replicator` is an actor bound to one :class:`~actors.ActorSystem`'s store and one plane key:
each commit kicks it without waiting; it sends the outbox (rows, ``@idempotent`` cache entries,
inbox entries) oldest first, bisects refused batches down to their poison rows or entries and
quarantines them, and keeps everything else buffered, with no age or count bound, until the plane
takes it. :func:`restore_from_plane` imports a whole run the local store lacks (rows, cache
entries, the pending row, its unconsumed signals and the wait it rests at);
``system.resume/send/signal/fork`` do it by themselves when a replicator is attached
(``TETHER_RESTORE_FROM_PLANE=off`` turns that off).
The reference plane server is :mod:`replication.plane` (optional extra ``plane``).
"""

from stores import fixup_module_metadata as _fixup_module_metadata

from ._errors import PlaneError
from ._messages import Drained
from ._replicator import Replicator
from ._restore import ENV_RESTORE, restore_from_plane

__all__ = ["ENV_RESTORE", "Drained", "PlaneError", "Replicator", "restore_from_plane"]

_fixup_module_metadata(__name__, globals())  # tracebacks say replication.PlaneError
del _fixup_module_metadata
