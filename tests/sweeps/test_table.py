import pytest

from icefabric.sweeps.spec import parse_sweep
from icefabric.sweeps.table import gain_baseline, summarize, summarize_busbw_and_gain

SPEC = parse_sweep({"base": "homog-small", "axes": {"fabric.spines": [2, 4]}, "seeds": [1, 2,
                                                                                        3]})


def _row(spines, seed, gain, **extra):
    return {"fabric.spines": spines, "seed": seed, "policy": "ice", "job": "j",
            "collective": "all_reduce", "size_bytes": 1, "gain_vs_ecmp": gain, **extra}


def test_median_and_range_over_seeds():
    rows = [_row("2", s, g) for s, g in (("1", 0.1), ("2", 0.5), ("3", 0.3))]
    rows.append(_row("4", "1", None))  # no ecmp in that point: no gain, no figure
    (out,) = summarize(SPEC, rows)
    assert out["fabric.spines"] == "2" and "seed" not in out
    assert (out["n"], out["median"]) == (3, 0.3)
    assert out["low"] == pytest.approx(0.14) and out["high"] == pytest.approx(0.46)


def test_one_seed_uses_the_rows_own_draw_quantiles():
    (out,) = summarize(SPEC, [_row("2", "1", 0.3, gain_vs_ecmp_p10=0.05,
                                   gain_vs_ecmp_p90=0.9)])
    assert (out["median"], out["low"], out["high"]) == (0.3, 0.05, 0.9)


def test_gains_are_over_the_deployed_ecmp_where_the_sweep_ran_it():
    bare = [_row("2", s, 0.5, busbw_GBps=10.0) for s in "123"]
    assert gain_baseline(bare) == ("ecmp", "gain_vs_ecmp")
    tuned = [dict(r, gain_vs_deployed=0.2) for r in bare]
    assert gain_baseline(tuned) == ("ecmp-tuned", "gain_vs_deployed")
    (out,) = summarize_busbw_and_gain(SPEC, tuned)
    assert (out["median"], out["gain"]) == (10.0, 0.2)
