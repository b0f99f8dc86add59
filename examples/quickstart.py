"""Run a built-in scenario from Python and print the busbw of every policy at 1 GiB.

    python examples/quickstart.py [SCENARIO]
"""

import sys

from icefabric.experiment.runner import run_scenario
from icefabric.scenario.loader import load

name = sys.argv[1] if len(sys.argv) > 1 else "homog-small"
result = run_scenario(load(name), sizes=[1 << 30])
for row in result.rows:
    print(f"{row['policy']:>14} {row['job']:>8} {row['collective']:>12}  "
          f"busbw {row['busbw_GBps']:7.2f} GB/s  ({row['frac_of_ideal']:.0%} of ideal)")
