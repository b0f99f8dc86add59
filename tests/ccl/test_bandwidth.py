import pytest

from icefabric.ccl.bandwidth import algbw_GBps, busbw_factor, busbw_GBps


@pytest.mark.parametrize("kind,n,factor", [
    ("all_reduce", 8, 2 * 7 / 8), ("all_reduce", 16, 2 * 15 / 16),
    ("all_gather", 8, 7 / 8), ("reduce_scatter", 4, 3 / 4), ("alltoall", 16, 15 / 16),
    ("broadcast", 8, 1.0), ("reduce", 8, 1.0), ("sendrecv", 2, 1.0),
])
def test_busbw_factors_match_nccl_tests(kind, n, factor):
    assert busbw_factor(kind, n) == pytest.approx(factor)


def test_nccl_tests_row_is_reproduced():
    # nccl-tests all_reduce row (domain-facts §6): 33554432 B, 195.40 us, 8 ranks ->
    # algbw 171.72, busbw 300.51 GB/s
    t = 195.40e-6
    assert algbw_GBps(33554432, t) == pytest.approx(171.72, abs=0.01)
    assert busbw_GBps("all_reduce", 33554432, 8, t) == pytest.approx(300.51, abs=0.01)


def test_unknown_collective():
    with pytest.raises(ValueError, match="unknown collective"):
        busbw_factor("allsort", 4)
