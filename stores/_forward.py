"""A store's public method that one of its parts answers: :class:`Forward`.

A store holds its parts (the inbox, the outbox, the schedules of a backend) as objects, and its
public surface names their methods with ``name = Forward("_part", Part.name)``. Reading the name on a
store gives the part's own bound method (no forwarding coroutine in between), and mypy sees the
part's signature, so the store classes are still checked against the protocols of
``stores._protocol``. Read on the class, the name gives the part's function.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Concatenate, Generic, ParamSpec, TypeVar, overload

__all__ = ["Forward"]

P = ParamSpec("P")
R = TypeVar("R")


class Forward(Generic[P, R]):
    """The method ``method`` of the part the store holds in its attribute ``part``."""

    def __init__(self, part: str, method: Callable[Concatenate[Any, P], R]) -> None:
        self._part = part
        self._method = method
        self._name = method.__name__
        self.__doc__ = method.__doc__

    @overload
    def __get__(self, store: None, owner: type) -> Callable[Concatenate[Any, P], R]: ...

    @overload
    def __get__(self, store: object, owner: type) -> Callable[P, R]: ...

    def __get__(self, store: object | None, owner: type) -> Callable[Concatenate[Any, P], R] | Callable[P, R]:
        if store is None:  # read on the class: the part's own function, as a method reads there
            return self._method
        method: Callable[P, R] = getattr(getattr(store, self._part), self._name)
        return method
