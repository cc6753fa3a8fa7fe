"""The JSON rule: a value is stored only if it round-trips unchanged.

Allowed: None, bool, int (fits in 64 bits), finite float, str without NUL or lone surrogates (UTF-8
cannot encode them), list, dict with str keys, nested at most :data:`MAX_DEPTH` lists and dicts deep.
Normalised on the way in (documented): tuples become lists, msgspec Structs and dataclasses become
dicts. Anything else raises :class:`SerializationError` naming its path, before anything is written.

The common case costs one msgspec encode, one decode and one C-level comparison, plus a MessagePack
encode that refuses integers wider than 64 bits (JSON would keep them; PostgreSQL and the plane would
not). Only a value that fails these checks is walked in Python, to normalise it or to find the
offending path.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Final

import msgspec

from ._errors import SerializationError

__all__ = ["MAX_DEPTH", "canonical_json", "check_str", "decode", "encode", "encode_many", "normalize"]

#: How many lists and dicts deep a value may nest (``[[1]]`` is 2 deep). Deeper values are refused
#: with :class:`SerializationError` instead of exhausting the interpreter's recursion limit.
MAX_DEPTH: Final = 256

_INT_MIN = -(2**63)
_INT_MAX = 2**64 - 1
_NUL_ESCAPE = b"\\u0000"
_BACKSLASH = b"\\"

_encoder = msgspec.json.Encoder()
_canonical_encoder = msgspec.json.Encoder(order="sorted")
_decoder = msgspec.json.Decoder()
# MessagePack holds exactly the 64-bit integers of the JSON rule and raises OverflowError for wider
# ones; encoding a value to it copies strings as they are (~1 µs for 20 KB, where scanning the JSON
# bytes for long digit runs took ~19 µs).
_width_check = msgspec.msgpack.Encoder().encode


def encode(value: Any, *, path: str = "$", error: type[SerializationError] = SerializationError) -> bytes:
    """Encode ``value`` as JSON bytes, or raise ``error`` naming the path that breaks the JSON rule."""
    if type(value) is dict and not value:  # node_input, node_output... are often empty
        return b"{}"
    try:
        data = _encoder.encode(value)
    except (TypeError, ValueError, OverflowError, RecursionError):  # UnicodeEncodeError is a ValueError
        return _encoder.encode(normalize(value, path=path, error=error))
    if (
        _BACKSLASH not in data or _NUL_ESCAPE not in data  # memchr first: most values have no escape
    ) and _decoder.decode(data) == value:
        try:  # integers wider than 64 bits (see _width_check)
            _width_check(value)
        except (OverflowError, TypeError, ValueError):
            pass
        else:
            # Deeper than MAX_DEPTH takes more than MAX_DEPTH opening brackets and their closing ones.
            if len(data) <= 2 * MAX_DEPTH or _shallow(value, data):
                return data
    return _encoder.encode(normalize(value, path=path, error=error))


def encode_many(values: list[Any]) -> list[bytes] | None:
    """Each value's JSON bytes, exactly as :func:`encode` gives them, when all of them pass the rule's
    checks at once: one decode, one comparison and one width check for the lot, where one
    :func:`encode` per value pays each. ``None`` if any value fails them: the caller then encodes
    them one by one (which normalises the value or names the path that breaks the rule)."""
    try:
        parts = list(map(_encoder.encode, values))
    except (TypeError, ValueError, OverflowError, RecursionError):
        return None
    data = b"[" + b",".join(parts) + b"]"
    # Nesting deeper than MAX_DEPTH takes more than MAX_DEPTH opening brackets and as many closing
    # ones; the outer array adds one of each.
    if (
        (_BACKSLASH not in data or _NUL_ESCAPE not in data)
        and (len(data) <= 2 * MAX_DEPTH + 2 or data.count(b"[") + data.count(b"{") <= MAX_DEPTH + 1)
        and _decoder.decode(data) == values
    ):
        try:  # integers wider than 64 bits (see _width_check)
            _width_check(values)
        except (OverflowError, TypeError, ValueError):
            return None
        return parts
    return None


def _shallow(value: Any, data: bytes) -> bool:
    """Whether ``value`` (plain JSON, encoded as ``data``) nests at most :data:`MAX_DEPTH` deep.

    Nesting that deep needs that many brackets: most values are cleared by two byte counts (C
    speed); only a value with more brackets than the limit is walked.
    """
    if data.count(b"[") + data.count(b"{") <= MAX_DEPTH:
        return True
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if depth > MAX_DEPTH:
            return False
        children = item.values() if type(item) is dict else item if type(item) is list else ()
        stack.extend((child, depth + 1) for child in children if type(child) in (dict, list))
    return True


def canonical_json(
    value: Any, *, path: str = "$", error: type[SerializationError] = SerializationError
) -> bytes:
    """Encode ``value`` with sorted keys: equal values give equal bytes (used for cache keys)."""
    return _canonical_encoder.encode(normalize(value, path=path, error=error))


def decode(data: bytes | str) -> Any:
    """Decode JSON produced by :func:`encode`."""
    return _decoder.decode(data)


def normalize(value: Any, *, path: str = "$", error: type[SerializationError] = SerializationError) -> Any:
    """Return ``value`` with tuples, Structs and dataclasses turned into lists and dicts.

    Raises ``error`` (a :class:`SerializationError`) with the path of the first value that breaks the rule.
    """
    return _normalize(value, path, error, 0)


def _normalize(value: Any, path: str, error: type[SerializationError], depth: int) -> Any:
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, str):
        if "\x00" in value or not value.isascii():  # check_str's common case, without its call
            check_str(value, path, error)
        return value
    if isinstance(value, int):
        if not _INT_MIN <= value <= _INT_MAX:
            raise error(f"integer {value} does not fit in 64 bits", path=path)
        return int(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise error(f"float {value!r} is not finite; JSON has no NaN or infinity", path=path)
        return float(value)
    if isinstance(value, dict | list | tuple) and depth >= MAX_DEPTH:
        raise error(f"the value nests more than {MAX_DEPTH} lists and dicts deep", path=path)
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for key, item in value.items():
            if not isinstance(key, str):
                raise error(f"dict key {key!r} is a {type(key).__name__}, not a str", path=path)
            if "\x00" in key or not key.isascii():
                check_str(key, path, error)
            child = f"{path}.{key}" if key.isidentifier() else f"{path}[{key!r}]"
            out[key] = _normalize(item, child, error, depth + 1)
        return out
    if isinstance(value, list | tuple):
        return [_normalize(item, f"{path}[{i}]", error, depth + 1) for i, item in enumerate(value)]
    if isinstance(value, msgspec.Struct):
        return _normalize(msgspec.structs.asdict(value), path, error, depth)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        fields = {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
        return _normalize(fields, path, error, depth)
    raise error(f"a value of type {type(value).__name__} is not JSON", path=path)


def check_str(value: str, path: str, error: type[SerializationError]) -> None:
    """Refuse a NUL (stores cannot keep it) or a lone surrogate (UTF-8 cannot encode it)."""
    if "\x00" in value:
        raise error("a string contains a NUL character, which JSON stores cannot keep", path=path)
    if not value.isascii():
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise error(
                f"a string contains a lone surrogate ({value[exc.start]!r} at index {exc.start}), "
                "which UTF-8 cannot encode",
                path=path,
            ) from None
