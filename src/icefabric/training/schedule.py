"""Pipeline schedules: the order in which a stage runs its forward and backward passes.

* ``1f1b`` — Megatron-LM's non-interleaved one-forward-one-backward schedule
  (``forward_backward_pipelining_without_interleaving`` in
  ``megatron/core/pipeline_parallel/schedules.py``): stage ``s`` of ``p`` runs
  ``min(p - s - 1, m)`` warm-up forwards, then alternates one forward and one backward, then
  drains the remaining backwards. With one stage it is forward, backward, forward, ...
* ``gpipe`` — all forwards, then all backwards (Huang et al., NeurIPS 2019).

Either way the pipeline bubble is ``(p - 1)`` pass-pairs of idle time per stage
(Narayanan et al., SC'21, §2.2); 1F1B only bounds the activations in flight.
"""

from __future__ import annotations

FORWARD, BACKWARD = "F", "B"


def stage_ops(schedule: str, pp: int, stage: int, micro_batches: int) -> list[tuple[str, int]]:
    """``[(FORWARD|BACKWARD, micro_batch), ...]`` in the order ``stage`` runs them.

    Examples
    --------
    >>> stage_ops("1f1b", 4, 1, 4)
    [('F', 0), ('F', 1), ('F', 2), ('B', 0), ('F', 3), ('B', 1), ('B', 2), ('B', 3)]
    """
    m = micro_batches
    if schedule == "gpipe":
        return [(FORWARD, i) for i in range(m)] + [(BACKWARD, i) for i in range(m)]
    if schedule != "1f1b":
        raise ValueError(f"unknown pipeline schedule {schedule!r}; use 1f1b or gpipe")
    warm = min(pp - stage - 1, m)
    ops = [(FORWARD, i) for i in range(warm)]
    for i in range(m - warm):
        ops += [(FORWARD, warm + i), (BACKWARD, i)]
    return ops + [(BACKWARD, i) for i in range(m - warm, m)]
