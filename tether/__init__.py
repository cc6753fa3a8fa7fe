"""tether, the application: the ``tether`` command line and the demo, on top of the library.

Layout: :mod:`tether.cli` is the command line (``tether`` and ``python -m tether``); each command
lives in a module of its own under ``tether/_commands/``. ``_demo`` is ``tether demo``; ``_refund`` the
refund agent that the demo, the benchmarks and the boundary proofs share; ``_store_url`` turns
``--store`` / ``$TETHER_STORE`` into a store. Dependencies run one way: stores <- actors <-
replication <- tether.
"""

__version__ = "0.1.0"

__all__ = ["__version__"]
