"""The emulated EC2's filter values: the exact-value fast path of ``value_match``
answers as matching every value one by one (exact or wildcard) did."""

from __future__ import annotations

import fnmatch

from hypothesis import given
from hypothesis import strategies as st

from emulated.ec2.filters import value_match

_text = st.text(alphabet="ab*?-1", max_size=5)


def _one_by_one(have: str, wanted: list[str]) -> bool:
    return any(w == have or (("*" in w or "?" in w) and fnmatch.fnmatchcase(have, w)) for w in wanted)


@given(have=_text, wanted=st.lists(_text, max_size=6))
def test_value_match_as_one_by_one(have: str, wanted: list[str]) -> None:
    assert value_match(have, wanted) == _one_by_one(have, wanted)


def test_value_match_cases() -> None:
    assert value_match("i-1", ["i-0", "i-1"])
    assert value_match("i-1", ["i-?"])
    assert not value_match("i-1", ["i-2", "j-*"])
    assert not value_match("i-1", [])
