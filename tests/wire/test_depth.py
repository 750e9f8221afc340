"""The nesting-depth check every request passes (wire/responses.py)."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from codexgate.errors import InvalidRequest
from codexgate.wire.responses import MAX_DEPTH, _nesting_depth, check_depth

_JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=3), inner, max_size=4),
    max_leaves=40,
)


def _reference_depth(value: Any) -> int:
    if isinstance(value, dict):
        return 1 + max((_reference_depth(v) for v in value.values()), default=0)
    if isinstance(value, list):
        return 1 + max((_reference_depth(v) for v in value), default=0)
    return 0


@given(_JSON)
def test_the_depth_is_that_of_the_deepest_container(value: Any) -> None:
    decoded = orjson.loads(orjson.dumps(value))  # as requests come: decoded JSON
    assert _nesting_depth(decoded) == _reference_depth(decoded)


def test_a_body_deeper_than_the_limit_is_refused_naming_its_field() -> None:
    deep: Any = "leaf"
    for _ in range(MAX_DEPTH):
        deep = {"x": deep}
    body = orjson.loads(orjson.dumps({"model": "m", "metadata": deep}))  # one level more
    with pytest.raises(InvalidRequest, match="'metadata' is nested too deep: more than 64 levels"):
        check_depth(body)
    check_depth(orjson.loads(orjson.dumps({"model": "m", "metadata": deep["x"]})))  # at the limit
