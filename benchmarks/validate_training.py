"""Training-iteration model against published measurements (run on demand).

    python benchmarks/validate_training.py [--cases 22b-full,22b-seqsel,1t-full,1t-seqsel]
                                           [--compute-efficiency 0.75]

Korthikanti et al., "Reducing Activation Recomputation in Large Transformer Models"
(MLSys 2023, arXiv 2205.05198), Table 5 measured end-to-end iteration times of Megatron-LM
on NVIDIA's Selene (DGX A100 80GB, 8 x 200 Gb/s HDR InfiniBand per node), fp16, sequence
2048, micro-batch 1 except the 22B model (4), data parallel 1. The values are as the
Calculon project's validation transcribes them (calculon/llm/validation.py,
``seqsel_tab5``):

* 22B (TP 8, 1 node, batch 4): full recomputation 1.42 s, sequence parallelism +
  selective recomputation 1.10 s;
* 1T (TP 8 x PP 64, 64 nodes, batch 512): 94.42 s and 71.49 s.

Prints the simulated iteration time, the difference, and the model-FLOPs utilisation.
The 1T cases build ~200,000 flows and take several minutes; docs/training.md discusses
the differences.
"""

from __future__ import annotations

import argparse
import time

from icefabric.pipeline import EngineOptions, plan, simulate
from icefabric.policies.base import get_policy
from icefabric.topology.builders import LeafSpineSpec, ServerGroup, leaf_spine
from icefabric.topology.catalog import server_profile
from icefabric.topology.model import ACCEL
from icefabric.training.iteration import build_iteration
from icefabric.training.spec import TrainingSpec

# (model, servers, pp, global batch, micro-batch, measured seconds by mode)
CASES = {"22b": ("megatron-22b", 1, 1, 4, 4, {"full": 1.42, "seqsel": 1.10}),
         "1t": ("megatron-1t", 64, 64, 512, 1, {"full": 94.42, "seqsel": 71.49})}


def run(case: str, mode: str, efficiency: float) -> tuple[float, float, float]:
    model, servers, pp, gb, mb, _ = CASES[case]
    fab = leaf_spine([ServerGroup(server_profile("hgx-a100"), servers, "a100")],
                     LeafSpineSpec(servers_per_leaf=min(servers, 8), n_spines=8))
    spec = TrainingSpec.model_validate({
        "pools": ["a100"], "model": model, "compute_efficiency": efficiency,
        "parallel": {"tp": 8, "pp": pp, "global_batch": gb, "micro_batch": mb, "zero": 0,
                     "flash_attention": False, "sequence_parallel": mode == "seqsel",
                     "recompute": "full" if mode == "full" else "selective"}})
    t0 = time.perf_counter()
    tw = build_iteration(fab, fab.nodes_of_kind(ACCEL), spec)
    T = simulate(plan(fab, tw.workload, get_policy("ecmp")), EngineOptions()).makespan_ns / 1e9
    s = tw.summary
    return T, s["model_flops"] / T / s["peak_flops"], time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cases", default="22b-full,22b-seqsel,1t-full,1t-seqsel")
    ap.add_argument("--compute-efficiency", type=float, default=0.75)
    args = ap.parse_args()
    print("| case | measured s | simulated s | difference | MFU | wall s |")
    print("|---|---:|---:|---:|---:|---:|")
    for c in args.cases.split(","):
        case, mode = c.split("-")
        measured = CASES[case][5][mode]
        T, mfu, wall = run(case, mode, args.compute_efficiency)
        print(f"| {c} | {measured:.2f} | {T:.2f} | {T / measured - 1:+.1%} | {mfu:.1%} | "
              f"{wall:.0f} |", flush=True)


if __name__ == "__main__":
    main()
