"""Where a result came from: tool version, source commit, Python and library versions.

Every result file carries this block (plus the scenario text and the command line added by
the CLI), so a figure can be traced back to the code and input that made it.
"""

from __future__ import annotations

import platform
import subprocess
from functools import cache
from pathlib import Path

from icefabric import __version__


@cache
def source_commit() -> str | None:
    """``git describe --always --dirty`` of the checkout the package runs from, or None when
    it is not run from a git checkout (an installed wheel)."""
    here = Path(__file__).resolve().parent
    try:
        out = subprocess.run(["git", "-C", str(here), "describe", "--always", "--dirty",
                              "--abbrev=12"], capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None if out.returncode == 0 else None


def provenance() -> dict:
    """Versions of the tool and of the libraries whose numerics shape the results."""
    import numpy
    import scipy

    return {"tool": "ice-fabric", "version": __version__, "commit": source_commit(),
            "python": platform.python_version(), "numpy": numpy.__version__,
            "scipy": scipy.__version__}
