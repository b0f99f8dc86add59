"""Request limits: the vectorized JSON depth scan agrees with the parsed depth on any JSON
(whatever the chunking), and token buckets refill at their rate."""

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from icefabric.controller.limits import TokenBuckets, json_depth, too_deep

tricky = st.text(alphabet='[]{}"\\ ab\n', max_size=12)  # strings full of brackets and escapes
values = st.recursive(st.none() | st.integers() | tricky,
                      lambda kids: st.lists(kids, max_size=4) |
                      st.dictionaries(tricky, kids, max_size=4), max_leaves=40)


def depth(v) -> int:
    if isinstance(v, list):
        return 1 + max((depth(x) for x in v), default=0)
    if isinstance(v, dict):
        return 1 + max((depth(x) for x in v.values()), default=0)
    return 0


@settings(max_examples=300, deadline=None)
@given(values, st.integers(1, 64))
def test_depth_scan_matches_the_parsed_depth_for_any_chunking(v, chunk):
    text = json.dumps(v, ensure_ascii=False).encode()
    assert json_depth(text) == depth(v)
    assert json_depth(text, chunk=chunk) == depth(v)  # state carried across chunks
    assert too_deep(text, depth(v)) is False and too_deep(text, depth(v) - 1) is True


def test_escaped_backslashes_before_a_quote():
    # "\\" ends the string; "\"" does not.
    assert json_depth(b'["\\\\", [1]]') == 2
    assert json_depth(b'["\\"[[[", [1]]') == 2
    assert json_depth(b"[" * 100_000 + b"]" * 100_000) == 100_000


def test_token_buckets_allow_a_burst_then_the_rate():
    b = TokenBuckets(rate_per_s=2.0, burst=3, max_keys=2)
    assert [b.take("a", now=0.0) for _ in range(3)] == [0.0, 0.0, 0.0]
    assert b.take("a", now=0.0) == 0.5  # one token comes back in 0.5 s
    assert b.take("a", now=0.6) == 0.0
    assert b.take("b", now=0.0) == 0.0  # per key
    b.take("c", now=0.0)
    assert "a" not in b._b and len(b._b) == 2  # least recently used key forgotten
