"""Shipping rows to a remote plane (the replicator actor, the plane client, restore).

Not built yet: the replicator is planned work. The store side is ready: stores that implement
``stores.ReplicatedStore`` keep an outbox (``fetch_unsynced``, ``mark_synced``, ``mark_quarantined``).
"""

__all__: list[str] = []
