"""Unit tests of the JSON rule (stores._json): fast path, slow path, normalisation, canonical form."""

from __future__ import annotations

import dataclasses
import math
from datetime import UTC, datetime
from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stores import MAX_JSON_DEPTH, IdempotencyError, SerializationError, canonical_json
from stores import decode_json as decode
from stores import encode_json as encode
from stores import normalize_json as normalize
from stores.lowlevel import encode_many

REFUSED: list[tuple[str, Any, str]] = [
    ("nan", {"a": math.nan}, "$.a"),
    ("inf", {"a": [1, math.inf]}, "$.a[1]"),
    ("-inf", [-math.inf], "$[0]"),
    ("bytes", {"a": {"b": b"raw"}}, "$.a.b"),
    ("bytearray", {"a": bytearray(b"x")}, "$.a"),
    ("set", {"a": {1, 2}}, "$.a"),
    ("frozenset", [frozenset()], "$[0]"),
    ("datetime", {"when": datetime(2024, 1, 1, tzinfo=UTC)}, "$.when"),
    ("int-key", {"a": {1: "x"}}, "$.a"),
    ("tuple-key", {(1, 2): "x"}, "$"),
    ("nul", {"a": "x\x00y"}, "$.a"),
    ("nul-only", "\x00", "$"),
    ("int-2**64", {"n": 2**64}, "$.n"),
    ("int-huge", [10**30], "$[0]"),
    ("int-below", {"n": -(2**63) - 1}, "$.n"),
    ("object", {"o": object()}, "$.o"),
    ("complex", {"c": 1j}, "$.c"),
    ("odd-key", {"a b": {"c": math.nan}}, "$['a b'].c"),
    ("deep", {"m": [{"content": [1, {"x": math.nan}]}]}, "$.m[0].content[1].x"),
]


@pytest.mark.parametrize(("label", "value", "path"), REFUSED, ids=[r[0] for r in REFUSED])
def test_refused_values_name_their_path(label: str, value: Any, path: str) -> None:
    with pytest.raises(SerializationError) as info:
        encode(value)
    assert info.value.path == path, label
    assert path in str(info.value)
    with pytest.raises(SerializationError) as again:
        normalize(value)
    assert again.value.path == path
    with pytest.raises(SerializationError):
        canonical_json(value)


def test_path_prefix_and_error_type() -> None:
    with pytest.raises(IdempotencyError) as info:
        encode({"x": math.nan}, path="$.node_input", error=IdempotencyError)
    assert info.value.path == "$.node_input.x"
    assert isinstance(info.value, ValueError)


@pytest.mark.parametrize(
    "value",
    [
        None,
        True,
        0,
        -(2**63),
        2**63 - 1,
        2**64 - 1,
        1.5,
        -0.0,
        1e308,
        "",
        "ünïcode ☃ \U0001f600",
        "1234567890123456789012345",
        [],
        {},
        {"a": [1, {"b": None}], "c": "d"},
    ],
)
def test_allowed_values_take_the_fast_path_and_round_trip(value: Any) -> None:
    data = encode(value)
    assert decode(data) == value
    assert type(decode(data)) is type(value)


def test_bools_stay_bools_and_ints_stay_ints() -> None:
    assert decode(encode({"t": True, "one": 1, "f": 1.0})) == {"t": True, "one": 1, "f": 1.0}
    out = decode(encode([True, 1, 1.0]))
    assert [type(v) for v in out] == [bool, int, float]


@dataclasses.dataclass
class Point:
    x: int
    tags: tuple[str, ...]


class Pair(msgspec.Struct):
    left: int
    right: Point


def test_normalisation_of_tuples_structs_and_dataclasses() -> None:
    value = {"t": (1, (2, 3)), "p": Pair(1, Point(2, ("a",))), "d": Point(3, ())}
    expected = {
        "t": [1, [2, 3]],
        "p": {"left": 1, "right": {"x": 2, "tags": ["a"]}},
        "d": {"x": 3, "tags": []},
    }
    assert normalize(value) == expected
    assert decode(encode(value)) == expected
    assert decode(canonical_json(value)) == expected


def test_a_struct_with_a_bad_field_names_the_field() -> None:
    with pytest.raises(SerializationError) as info:
        encode({"p": Pair(1, Point(math.nan, ()))})  # type: ignore[arg-type]
    assert info.value.path == "$.p.right.x"


def test_a_dataclass_class_is_not_a_value() -> None:
    with pytest.raises(SerializationError):
        encode({"cls": Point})


def test_canonical_json_ignores_key_order() -> None:
    a = {"b": 1, "a": {"y": [1, 2], "x": None}}
    b = {"a": {"x": None, "y": (1, 2)}, "b": 1}
    assert canonical_json(a) == canonical_json(b)
    assert canonical_json(a) == b'{"a":{"x":null,"y":[1,2]},"b":1}'
    assert canonical_json({"a": 1}) != canonical_json({"a": 2})


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**64 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text().filter(lambda s: "\x00" not in s),
    lambda children: (
        st.lists(children, max_size=5)
        | st.dictionaries(st.text(max_size=8).filter(lambda s: "\x00" not in s), children, max_size=5)
    ),
    max_leaves=25,
)


@settings(max_examples=300, deadline=None)
@given(json_values)
def test_allowed_values_round_trip_unchanged(value: Any) -> None:
    out = decode(encode(value))
    assert out == value
    assert msgspec.json.encode(out) == msgspec.json.encode(value)
    assert decode(canonical_json(value)) == value


@pytest.mark.parametrize(("label", "value", "path"), REFUSED, ids=[r[0] for r in REFUSED])
def test_encode_many_refuses_what_encode_refuses(label: str, value: Any, path: str) -> None:
    assert encode_many([{}, value, [1]]) is None, label
    assert encode_many([value]) is None, label


def test_encode_many_refuses_what_encode_normalises_or_nests_too_deep() -> None:
    deep: Any = 1
    for _ in range(MAX_JSON_DEPTH + 1):
        deep = [deep]
    assert encode_many([deep]) is None
    assert encode_many([deep[0]]) == [encode(deep[0])]  # exactly MAX_JSON_DEPTH deep
    assert encode_many([{"t": (1, 2)}]) is None
    assert encode_many([{"p": Point(1, ())}]) is None


@settings(max_examples=300, deadline=None)
@given(st.lists(json_values, max_size=6))
def test_encode_many_gives_the_bytes_of_encode(values: list[Any]) -> None:
    assert encode_many(values) == [encode(v) for v in values]
