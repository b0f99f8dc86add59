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


def test_switch_labels_are_legible_and_fit_their_squares():
    from icefabric.reports.fabric_figure import SWITCH_MARKER, switch_label

    fab = build_fabric(load("hetero-default"))
    fig = plot_fabric(fab)
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    side_px = SWITCH_MARKER ** 0.5 * fig.dpi / 72  # the square's side on the canvas
    switches = {switch_label(fab.node_names[i]) for i in range(len(fab.node_names))
                if fab.is_switch[i]}
    labels = [t for t in fig.axes[0].texts if t.get_text() in switches]
    assert {t.get_text() for t in labels} == switches == {f"sp{i}" for i in range(8)} | {
        f"lf{i}" for i in range(4)}
    for t in labels:
        assert t.get_fontsize() >= 7
        box = t.get_window_extent(renderer)
        assert box.width <= side_px and box.height <= side_px, t.get_text()
    plt.close(fig)
