"""Megatron rank order over servers: tensor groups inside servers, data-parallel groups on
one rail, stages on consecutive servers; stage layers."""

import numpy as np
import pytest

from icefabric.topology.model import ACCEL
from icefabric.training.mapping import RankGrid, TrainingError, stage_layers


def srv(fab, accels):
    return {fab.servers[int(fab.node_server[a])].name for a in np.ravel(accels)}


def test_groups_follow_megatron_order(h100x4):
    fab = h100x4
    g = RankGrid(fab, fab.nodes_of_kind(ACCEL), tp=8, pp=2, dp=2)
    assert srv(fab, g.tp_group(0, 1)) == {"h100-1"}
    assert srv(fab, g.tp_group(1, 0)) == {"h100-2"}
    dp = g.dp_group(1, 5)
    assert srv(fab, dp) == {"h100-2", "h100-3"}
    assert {int(fab.node_index[a]) for a in dp} == {5}  # one rail
    assert g.single_server(g.tp_group(0, 0)) and not g.single_server(dp)
    assert g.library(dp) == "nccl" and g.stage_device(0).name == "H100 SXM"


def test_expert_groups_come_from_data_parallel_ranks(h100x4):
    fab = h100x4
    g = RankGrid(fab, fab.nodes_of_kind(ACCEL), tp=8, pp=1, dp=4, ep=2)
    assert srv(fab, g.ep_group(0, 1, 0)) == {"h100-2", "h100-3"}  # replicas 2, 3
    assert srv(fab, g.edp_group(0, 1, 0)) == {"h100-1", "h100-3"}  # replicas 1, 3


def test_layout_errors(h100x4, hetero):
    with pytest.raises(TrainingError, match=r"tp x pp x dp = 8 x 2 x 3 = 48 ranks, but the "
                       "job has 32 accelerators"):
        RankGrid(h100x4, h100x4.nodes_of_kind(ACCEL), tp=8, pp=2, dp=3)
    with pytest.raises(TrainingError, match=r"ep \(3\) must divide dp \(4\)"):
        RankGrid(h100x4, h100x4.nodes_of_kind(ACCEL), tp=8, pp=1, dp=4, ep=3)
    g = RankGrid(hetero, hetero.nodes_of_kind(ACCEL), tp=8, pp=1, dp=4)
    with pytest.raises(TrainingError, match=r"pipeline stage 0 spans pools \['ascend', "
                       r"'h100'\]"):
        g.stage_pool(0)
    with pytest.raises(TrainingError, match="spans libraries"):
        g.library(g.dp_group(0, 0))
    g = RankGrid(hetero, hetero.nodes_of_kind(ACCEL), tp=8, pp=2, dp=2)
    assert [g.stage_pool(s) for s in (0, 1)] == ["h100", "ascend"]


def test_stage_layers():
    zero = np.zeros((3, 10)), np.zeros(3)
    assert stage_layers("even", *zero) == [4, 3, 3]
    assert stage_layers([2, 3, 5], *zero) == [2, 3, 5]
    with pytest.raises(TrainingError, match="must list 3 positive counts that sum to the "
                       "model's 10 layers"):
        stage_layers([2, 3, 4], *zero)
    with pytest.raises(TrainingError, match="4 pipeline stages but only 3 layers"):
        stage_layers("even", np.zeros((4, 3)), np.zeros(4))
    # a stage twice as fast per layer takes twice the layers; an output layer costs 2 layers
    cost = np.array([[1.0] * 6, [2.0] * 6])
    assert stage_layers("balanced", cost, np.zeros(2)) == [4, 2]
    assert stage_layers("balanced", np.ones((2, 8)), np.array([0.0, 2.0])) == [5, 3]
