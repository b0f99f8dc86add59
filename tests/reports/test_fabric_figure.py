import matplotlib.pyplot as plt

from icefabric.reports.fabric_figure import plot_fabric
from icefabric.scenario.build import build_fabric
from icefabric.scenario.loader import load


def test_one_line_per_cabled_pair_and_one_box_per_server():
    fab = build_fabric(load("hetero-default"))  # 4 leaves x 8 spines, 8 servers, 1 leaf each
    fig = plot_fabric(fab)
    ax = fig.axes[0]
    assert len(ax.lines) == 4 * 8 + 8
    assert len(ax.patches) == 8
    labels = [t.get_text() for t in ax.texts]
    assert "h100-0\n8×400G" in labels and "ascend-3\n8×200G" in labels
    assert "oversubscription 1:1" in ax.get_title()
    plt.close(fig)


def test_fat_tree_draws_three_switch_tiers():
    fab = build_fabric(load("suite-fat-tree"))
    fig = plot_fabric(fab)
    tiers = {t.get_text() for t in fig.axes[0].texts}
    assert {"leaves", "spines / aggregation", "cores", "servers"} <= tiers
    plt.close(fig)
