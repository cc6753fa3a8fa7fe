"""The internals of ``replication`` that tests and tooling reach: no stability promise.

What the public face (:mod:`replication`) leaves out and a white-box test needs: the client's
classification of the plane's answers and its ingest path, and the wire's frames. Any name here may
change or go in any release.
"""

from replication._client import INGEST_PATH, Verdict, classify
from replication._wire import Conversations, whole_item

__all__ = ["INGEST_PATH", "Conversations", "Verdict", "classify", "whole_item"]
