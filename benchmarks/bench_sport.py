"""Benchmark: solve UDP source ports for 120k QPs on a 3-tier fat-tree-like decision chain.

Run: ``PYTHONPATH=src python benchmarks/bench_sport.py``. Not part of the test run.

Chain per QP (ToR -> agg -> core -> down): the source ToR picks one of 8 aggregation
uplinks, the aggregation switch one of 16 core uplinks (SONiC-like per-role seeds and
offsets; every switch has its own seed). A variant adds a non-power-of-two group
(6 members) to exercise the filtering path.
"""

from __future__ import annotations

import time

import numpy as np

from icefabric.control.sport import QpChains, solve_sports, verify_sports
from icefabric.dataplane.ecmp import HashConfig


def build(n_qps: int, n_tor: int = 64, n_agg: int = 64, hosts_per_tor: int = 32,
          third: int | None = None, seed: int = 0):
    rng = np.random.default_rng(seed)
    tor = [HashConfig("crc16_bisync", seed=int(s), name=f"tor{i}")
           for i, s in enumerate(rng.integers(0, 16, n_tor))]
    agg = [HashConfig("crc16_bisync", seed=int(s), offset=10, name=f"agg{i}")
           for i, s in enumerate(rng.integers(0, 1 << 32, n_agg))]
    core = [HashConfig("crc16_ccitt", seed=int(s), offset=4, name=f"core{i}")
            for i, s in enumerate(rng.integers(0, 1 << 32, 16))]
    configs = tor + agg + core
    n_nics = n_tor * hosts_per_tor
    src = rng.integers(0, n_nics, n_qps)
    dst = (src + rng.integers(hosts_per_tor, n_nics, n_qps)) % n_nics
    sip = (0x0A000000 + src).astype(np.uint32)
    dip = (0x0A000000 + dst).astype(np.uint32)
    src_tor = src // hosts_per_tor
    w0 = rng.integers(0, 8, n_qps)
    agg_sw = n_tor + (src_tor * 8 + w0) % n_agg
    w1 = rng.integers(0, 16, n_qps)
    cols = [src_tor, agg_sw]
    nm = [np.full(n_qps, 8), np.full(n_qps, 16)]
    want = [w0, w1]
    if third:
        cols.append(n_tor + n_agg + w1)
        nm.append(np.full(n_qps, third))
        want.append(rng.integers(0, third, n_qps))
    return (configs, sip, dip, np.stack(cols, 1), np.stack(nm, 1), np.stack(want, 1))


def main() -> None:
    for n_qps, third in ((120_000, None), (120_000, 8), (120_000, 6)):
        configs, sip, dip, ci, nm, want = build(n_qps, third=third)
        chains = QpChains(sip, dip, ci, nm, want)
        warm = QpChains(sip[:100], dip[:100], ci[:100], nm[:100], want[:100])
        solve_sports(configs, warm)  # warm caches
        times = []
        for _ in range(3):
            t0 = time.perf_counter()
            sp = solve_sports(configs, chains, seed=1)
            times.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        ok = verify_sports(configs, chains, sp)
        t_verify = time.perf_counter() - t0
        solved = sp >= 0
        chain = "8x16" + (f"x{third}" if third else "")
        print(f"{n_qps} QPs, chain {chain}: solve {min(times) * 1e3:.0f} ms (best of 3), "
              f"verify {t_verify * 1e3:.0f} ms, solved {solved.mean():.2%}, "
              f"verified {ok[solved].mean():.2%}")


if __name__ == "__main__":
    main()
