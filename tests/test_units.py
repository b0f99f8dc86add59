import pytest

from icefabric import units


def test_time_conversions_are_integer_ns():
    assert units.us(1.5) == 1500
    assert units.ms(2) == 2_000_000
    assert isinstance(units.us(0.3), int)


def test_transfer_time_rounds_up():
    # 1 MiB at 400 Gb/s = 8*2^20/4e11 s = 20971.52 ns -> 20972 ns
    assert units.transfer_time_ns(units.MiB, units.gbps(400)) == 20972
    with pytest.raises(ValueError):
        units.transfer_time_ns(1, 0)


@pytest.mark.parametrize("text,expected", [("1MiB", 1 << 20), ("64K", 65536), ("1G", 1 << 30),
                                           (4096, 4096), ("512", 512)])
def test_parse_size(text, expected):
    assert units.parse_size(text) == expected


def test_parse_size_rejects_garbage():
    with pytest.raises(ValueError, match="cannot parse size"):
        units.parse_size("ten megs")


def test_format_size_roundtrip():
    for s in (1, 4096, 1 << 20, 3 << 30):
        assert units.parse_size(units.format_size(s)) == s


def test_kbit_per_s_rounds_to_nearest_and_never_to_no_limit():
    assert units.bps_to_kbps(25e9) == 25_000_000
    assert units.bps_to_kbps(1_499.0) == 1 and units.bps_to_kbps(1_500.1) == 2  # not floor
    assert units.bps_to_kbps(10.0) == 1  # 0 would mean "unlimited" to verbs
