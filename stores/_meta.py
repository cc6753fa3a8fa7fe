"""Public names report their public module: ``stores.RunExists``, not ``stores._errors.RunExists``.

The one ``__module__`` fix-up of the four packages: each package's ``__init__`` calls
:func:`fixup_module_metadata` once on its namespace (``stores`` exports it for the others).
"""

from __future__ import annotations

import inspect
import sys
from collections.abc import Iterable, Mapping
from typing import Any

import msgspec

__all__ = ["fixup_module_metadata"]


def fixup_module_metadata(
    module: str, namespace: Mapping[str, Any], names: Iterable[str] | None = None, *, also: Iterable[str] = ()
) -> None:
    """Make each class and function of ``names`` (by default the namespace's ``__all__``) report
    ``module`` as its ``__module__`` when it is defined in a submodule of ``module`` or in one of
    the packages ``also`` (names a package re-exports and speaks for: ``actors`` re-exports the
    errors of ``stores``); anything else is left alone, and a class's methods keep theirs.

    A class's own string annotations are evaluated first, in the module that defined it, because
    msgspec (and ``typing.get_type_hints``) would otherwise look them up in ``module``, which does
    not hold those names. One the defining module imports only for type checking stays a string;
    a ``msgspec.Struct`` must not have one (decoding it would fail), so that raises ``NameError``.
    """
    packages = tuple(also)
    for name in namespace["__all__"] if names is None else names:
        obj = namespace[name]
        origin = getattr(obj, "__module__", None)
        if not isinstance(origin, str) or not callable(obj):
            continue
        if not (origin.startswith(module + ".") or any(_under(origin, package) for package in packages)):
            continue
        if isinstance(obj, type):
            _resolve_annotations(obj, vars(sys.modules[origin]))
        obj.__module__ = module


def _under(origin: str, package: str) -> bool:
    return origin == package or origin.startswith(package + ".")


def _resolve_annotations(cls: type, scope: dict[str, Any]) -> None:
    """Evaluate ``cls``'s own string annotations in ``scope``, the module that defined it."""
    resolved: dict[str, object] = {}
    for key, annotation in inspect.get_annotations(cls).items():
        try:
            resolved[key] = eval(annotation, scope) if isinstance(annotation, str) else annotation
        except NameError:
            if issubclass(cls, msgspec.Struct):
                raise
            resolved[key] = annotation
    if resolved:
        cls.__annotations__ = resolved
