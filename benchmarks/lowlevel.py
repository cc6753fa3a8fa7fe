"""The internals of ``benchmarks`` that tests reach: no stability promise.

The statement counter of the queue benchmark (``benchmarks._queues``), which a test reuses to count
what a turn sends to the store. Any name here may change or go in any release.
"""

from benchmarks._queues import _counted as counted_statements
from benchmarks._queues import _Counter as StatementCounter

__all__ = ["StatementCounter", "counted_statements"]
