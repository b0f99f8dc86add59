import matplotlib.pyplot as plt
import numpy as np
import pytest

from icefabric.experiment.runner import Execution, run_scenario
from icefabric.reports.figures import (
    byte_formatter,
    flow_label,
    link_groups,
    plot_busbw,
    plot_timeseries,
    save_figures,
)
from icefabric.scenario.loader import load


@pytest.fixture(scope="module")
def res():
    return run_scenario(load("homog-small"), policies=["ecmp", "spray", "ice", "ideal"],
                        sizes=[1 << 20, 1 << 24, 1 << 30])


def test_byte_ticks():
    f = byte_formatter()
    assert [f(x, None) for x in (512, 1024, 1 << 20, 3 << 20, 1 << 30)] == \
        ["512 B", "1 KiB", "1 MiB", "3 MiB", "1 GiB"]


def test_busbw_axes_start_at_zero_with_byte_ticks_and_coinciding_lines_visible(res):
    fig = plot_busbw(res, "job0", "all_reduce")
    ax = fig.axes[0]
    assert ax.get_ylim()[0] == 0
    fig.canvas.draw()
    assert [t.get_text() for t in ax.get_xticklabels()] == ["1 MiB", "16 MiB", "1 GiB"]
    lines = {line.get_label(): line for line in ax.get_lines()}
    # spray and ice reach the same busbw: the one drawn first is wider, with bigger markers
    assert np.allclose(lines["spray"].get_ydata(), lines["ice"].get_ydata(), rtol=1e-3)
    assert lines["spray"].get_linewidth() > lines["ice"].get_linewidth()
    assert lines["spray"].get_markersize() > lines["ice"].get_markersize()
    plt.close(fig)


def test_link_groups_order_by_tier_then_switch():
    names = ["leaf0->spine0", "spine0->leaf0", "leaf1->spine0", "spine0->leaf1",
             "leaf0->spine1", "spine1->leaf0/1"]
    order, groups = link_groups(names)
    assert [names[i] for i in order] == ["leaf0->spine0", "leaf0->spine1", "leaf1->spine0",
                                         "spine0->leaf0", "spine1->leaf0/1", "spine0->leaf1"]
    assert groups == [("leaf->spine", "leaf0", 0, 2), ("leaf->spine", "leaf1", 2, 3),
                      ("spine->leaf", "leaf0", 3, 5), ("spine->leaf", "leaf1", 5, 6)]


def test_flow_labels_are_readable():
    assert flow_label("gpt:all_reduce:1073741824#12") == "gpt all_reduce 1 GiB, flow 12"
    assert flow_label("victim:all_gather#552") == "victim all_gather, flow 552"


def test_queue_plot_units_and_readable_flow_labels():
    r = run_scenario(load("pfc-victim"), policies=["ecmp"], sizes=[1 << 26],
                     how=Execution(trace=True))
    fig = plot_timeseries(r.runs["ecmp"])
    assert fig.axes[0].get_ylabel() == "queue (KiB)"
    assert fig.axes[1].get_ylabel().startswith("rate (Gb/s)")
    assert all(":" not in t.get_text().split(",")[0] for t in fig.axes[1].get_legend().texts)
    plt.close(fig)


def test_save_figures_in_every_format(res, tmp_path):
    heard = []
    paths = save_figures(res, tmp_path, formats=("png", "svg", "pdf"),
                         progress=lambda *a: heard.append(a))
    # progress before each figure is drawn, then once when all are written
    assert heard == [(0, 2, "busbw"), (1, 2, "link_utilization"), (2, 2, "done")]
    for name in ("busbw", "link_utilization"):
        assert (tmp_path / f"{name}.svg").read_text().lstrip().startswith("<?xml")
        assert (tmp_path / f"{name}.pdf").read_bytes()[:4] == b"%PDF"
        assert (tmp_path / f"{name}.png").stat().st_size > 1000
    assert len(paths) == 6
    with pytest.raises(ValueError, match="unknown figure format"):
        save_figures(res, tmp_path, formats=("jpg",))


def test_draws_plot_a_box_per_drawn_policy_and_size(tmp_path):
    from icefabric.reports.figures import plot_draws

    drawn = run_scenario(load("homog-small"), policies=["ecmp", "ice"], sizes=[1 << 20, 1 << 26],
                         draws=6)
    fig = plot_draws(drawn, "job0", "all_reduce")
    ax = fig.axes[0]
    boxes = [p for p in ax.patches if p.get_facecolor()[3] < 1]  # the ecmp boxes
    assert len(boxes) == 2
    ecmp = [r for r in drawn.rows if r["policy"] == "ecmp"]
    for box, r in zip(boxes, ecmp):
        lo, hi = box.get_path().get_extents().y0, box.get_path().get_extents().y1
        q25, q75 = np.percentile(r["busbw_GBps_draws"], [25, 75])
        assert lo == pytest.approx(q25) and hi == pytest.approx(q75)
    assert "ice" in [t.get_text() for t in ax.get_legend().get_texts()]
    names = {p.rsplit("/", 1)[1] for p in save_figures(drawn, tmp_path)}
    assert "busbw_draws.png" in names
    assert "busbw_draws.png" not in {p.rsplit("/", 1)[1] for p in save_figures(
        run_scenario(load("homog-small"), policies=["ecmp"], sizes=[1 << 20]), tmp_path)}


def test_one_size_draws_a_bar_per_policy_with_its_range():
    from icefabric.experiment.runner import run_scenario
    from icefabric.reports.figures import plot_busbw
    from icefabric.scenario.loader import builtin_text, loads

    res = run_scenario(loads(builtin_text("homog-small")), policies=["ecmp", "ice", "ideal"],
                       sizes=[1 << 24], draws=3)
    fig = plot_busbw(res, "job0", "all_reduce")
    ax = fig.axes[0]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["ecmp", "ice", "ideal"]
    heights = [b.get_height() for b in ax.patches]
    assert heights == pytest.approx([r["busbw_GBps"] for r in res.rows])
    assert ax.get_title() == "job0 · all_reduce at 16MiB"
    ecmp = res.rows[0]
    bars = next(c for c in ax.containers if hasattr(c, "errorbar")).errorbar
    caps = bars.lines[2][0].get_segments()[0]  # ecmp's p10-p90 range
    assert caps[:, 1] == pytest.approx([ecmp["busbw_GBps_p10"], ecmp["busbw_GBps_p90"]])
    plt.close(fig)
