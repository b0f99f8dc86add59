"""The Examples sections of the planning modules run as doctests."""

import doctest

import pytest

from icefabric.control import coloring, demand, planning


@pytest.mark.parametrize("mod", [coloring, demand, planning])
def test_doctests(mod):
    res = doctest.testmod(mod, optionflags=doctest.ELLIPSIS)
    assert res.failed == 0 and res.attempted > 0
