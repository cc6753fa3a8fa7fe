"""The logger of stores: the standard-library ``"tether"`` logger, the one every package writes to.

``stores`` is the bottom package and cannot use the structlog events of ``actors`` (``actors._core._log``),
so its few records (a lost liveness lock, a failed store callback, queues whose limits disagree,
notices that cannot be listened for) are plain ``%``-formatted ones on that same logger.
"""

from __future__ import annotations

import logging
from typing import Final

__all__ = ["LOGGER"]

LOGGER: Final = logging.getLogger("tether")
