import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from icefabric.control.coloring import (
    bipartite_edge_coloring,
    coloring_reference,
    is_proper_coloring,
    max_degree,
)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 7), st.integers(0, 7)), max_size=120))
def test_coloring_is_proper_with_max_degree_colors(edges):
    u = np.array([e[0] for e in edges], dtype=np.int64)
    v = np.array([e[1] for e in edges], dtype=np.int64)
    c = bipartite_edge_coloring(u, v)
    assert is_proper_coloring(u, v, c)
    if len(edges):
        assert c.max() + 1 == max_degree(u, v)  # Kőnig: exactly Δ colours


def test_multigraph_parallel_edges():
    c = bipartite_edge_coloring([0, 0, 0], [1, 1, 1])
    assert sorted(c.tolist()) == [0, 1, 2]


def test_large_random_is_fast_and_proper():
    rng = np.random.default_rng(0)
    u, v = rng.integers(0, 64, 20000), rng.integers(0, 64, 20000)
    c = bipartite_edge_coloring(u, v)
    assert is_proper_coloring(u, v, c) and c.max() + 1 == max_degree(u, v)


def test_improper_detected():
    assert not is_proper_coloring([0, 0], [0, 1], [1, 1])


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 9), st.integers(0, 9)), max_size=150))
def test_compiled_coloring_equals_the_python_reference(edges):
    u = np.array([e[0] for e in edges], dtype=np.int64)
    v = np.array([e[1] for e in edges], dtype=np.int64)
    assert bipartite_edge_coloring(u, v).tolist() == coloring_reference(u, v).tolist()


def test_compiled_coloring_equals_the_reference_past_64_colours():
    rng = np.random.default_rng(1)
    u, v = rng.integers(0, 6, 900), rng.integers(0, 6, 900)  # Δ ~ 170: three mask words
    c = bipartite_edge_coloring(u, v)
    assert max_degree(u, v) > 128
    assert c.tolist() == coloring_reference(u, v).tolist()
