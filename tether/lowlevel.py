"""The internals of ``tether`` that tests and tooling reach: no stability promise.

What the command line does not expose as a Python name and a white-box test needs: the demo's
runner and its refund agent, and how a command finds its store's URL. Any name here may change or
go in any release.
"""

from tether._demo import demo_agent
from tether._refund import RefundBot
from tether._store_url import DEFAULT_STORE, store_url

__all__ = ["DEFAULT_STORE", "RefundBot", "demo_agent", "store_url"]
