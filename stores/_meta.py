"""Public names report their public module: ``stores.RunExists``, not ``stores._errors.RunExists``."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

__all__ = ["fixup_module_metadata"]


def fixup_module_metadata(module: str, namespace: Mapping[str, Any], names: Iterable[str]) -> None:
    """Set ``__module__`` of each class and function in ``names`` defined under ``module`` to ``module``.

    A class's methods keep theirs. A msgspec Struct resolves string annotations through the module
    its ``__module__`` names, so a Struct rewritten here must not be defined under
    ``from __future__ import annotations`` (see :mod:`stores._model`).
    """
    for name in names:
        obj = namespace[name]
        if not isinstance(obj, type) and not callable(obj):
            continue
        current = getattr(obj, "__module__", None)
        if isinstance(current, str) and current.startswith(module + "."):
            obj.__module__ = module
