"""The shim socket's line protocol."""

import pytest

from icefabric.agent.shim_socket import ShimProtocolError, format_line, parse_line


def test_lines_round_trip():
    line = format_line("QP", seq=3, dev="mlx5_0", port=1, lqpn=291, rqpn=1280,
                       sip="10.0.0.1", dip="10.0.0.2")
    assert line == b"QP seq=3 dev=mlx5_0 port=1 lqpn=291 rqpn=1280 sip=10.0.0.1 dip=10.0.0.2\n"
    kind, f = parse_line(line.decode())
    assert kind == "QP" and f == {"seq": 3, "dev": "mlx5_0", "port": 1, "lqpn": 291,
                                  "rqpn": 1280, "sip": "10.0.0.1", "dip": "10.0.0.2"}


@pytest.mark.parametrize("line, msg", [
    ("hello there", "not a shim message"),
    ("QP seq", "bad field"),
    ("QP seq=x", "seq must be an integer"),
])
def test_bad_lines_are_rejected(line, msg):
    with pytest.raises(ShimProtocolError, match=msg):
        parse_line(line)
