"""Model presets reproduce the published parameter counts; bad shapes are refused."""

import doctest

import pytest

import icefabric.training.schedule
from icefabric.training import model as model_mod
from icefabric.training.model import PRESETS, ModelSpec, model_preset
from icefabric.training.spec import ModelChoice

# Parameter counts as their sources state them.
PUBLISHED = {"llama3-8b": 8.03e9, "llama3-70b": 70.6e9, "gpt3-175b": 175e9,
             "mixtral-8x7b": 46.7e9, "deepseek-v3": 671e9, "megatron-22b": 22e9,
             "megatron-1t": 1008e9}


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_preset_parameters_match_the_publication(name):
    assert PRESETS[name].params == pytest.approx(PUBLISHED[name], rel=0.01)
    assert PRESETS[name].source


def test_moe_layers_split_dense_and_expert_parameters():
    m = model_preset("deepseek-v3")
    dense, expert = m.layer_params(0)
    assert expert == 0  # the first three layers are dense
    dense, expert = m.layer_params(3)
    assert expert == 256 * 3 * 7168 * 2048
    assert dense > m.attn_params  # shared expert, router, norms


def test_overrides_and_custom_models():
    small = ModelChoice(preset="llama3-8b", layers=2).resolve()
    assert small.layers == 2 and small.hidden == 4096
    custom = ModelChoice(layers=2, hidden=64, ffn_hidden=256, heads=4, kv_heads=4, vocab=100,
                         seq_len=32).resolve()
    assert custom.name == "custom" and custom.params > 0


def test_bad_shapes_are_refused():
    with pytest.raises(ValueError, match="multiple of kv_heads"):
        ModelSpec("x", layers=1, hidden=64, ffn_hidden=64, heads=6, kv_heads=4, vocab=10,
                  seq_len=8)
    with pytest.raises(ValueError, match="top_k <= experts"):
        ModelSpec("x", layers=1, hidden=64, ffn_hidden=64, heads=4, kv_heads=4, vocab=10,
                  seq_len=8, experts=2, top_k=4, moe_ffn_hidden=8)
    with pytest.raises(ValueError, match="unknown model 'llama9'; presets: deepseek-v3"):
        model_preset("llama9")


@pytest.mark.parametrize("mod", [model_mod, icefabric.training.schedule])
def test_doctests(mod):
    assert doctest.testmod(mod).failed == 0
