import matplotlib.pyplot as plt
import numpy as np

from icefabric.reports.sweep_figures import plot_gain_vs_axis
from icefabric.sweeps.spec import parse_sweep

SPEC = parse_sweep({"base": "homog-small",
                    "axes": {"fabric.oversub": [1, 2], "mix": {"a": {}, "b": {}}},
                    "seeds": [1, 2]})


def test_one_panel_per_other_axis_value_and_a_line_per_policy_at_the_medians():
    summary = [{"fabric.oversub": o, "mix": m, "policy": p, "job": "j", "collective": "c",
                "size_bytes": 1, "n": 2, "median": med, "low": med - 0.1, "high": med + 0.1}
               for o in ("1", "2") for m in ("a", "b")
               for p, med in (("ecmp", 0.0), ("ice", 0.5 * int(o)), ("spray", 0.4))]
    fig = plot_gain_vs_axis(SPEC, summary)
    assert [ax.get_title() for ax in fig.axes] == ["mix=a", "mix=b"]
    lines = {ln.get_label(): ln for ln in fig.axes[0].lines}
    assert set(lines) >= {"ice", "spray", "ecmp"}  # ecmp is the zero line
    np.testing.assert_allclose(lines["ice"].get_ydata(), [0.5, 1.0])
    x = lines["ice"].get_xdata()
    assert x[0] < x[1] and abs(x[0] - 1) < 0.1  # oversub on x (slightly dodged)
    plt.close(fig)
