"""Where the verbs shim (``native/icefab_verbs.c``, loaded with ``LD_PRELOAD``) is, and how
to build it when the install could not.

``pip install`` builds it as an optional extension when a C compiler and the rdma-core
headers (Debian/Ubuntu package ``libibverbs-dev``) are present; otherwise the install goes on
without it and :func:`shim_path` raises :class:`ShimNotBuilt` with the way out.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import icefabric.native as _native

SOURCE = Path(_native.__file__).with_name("icefab_verbs.c")
LIB_NAME = "libicefab_verbs.so"
HEADERS_HINT = ("install a C compiler and the rdma-core headers (Debian/Ubuntu: apt-get "
                "install gcc libibverbs-dev; RHEL: dnf install gcc rdma-core-devel)")


class ShimNotBuilt(RuntimeError):
    """The shim library is absent (no compiler or no libibverbs headers at install time)."""


def user_build_dir() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "icefabric"


def shim_path() -> Path:
    """The built shim: the one installed with the package, else one built by
    ``icefab agent build-shim`` into the user's cache."""
    installed = sorted(SOURCE.parent.glob("libicefab_verbs*.so"))
    for p in [*installed, user_build_dir() / LIB_NAME]:
        if p.is_file():
            return p
    raise ShimNotBuilt("the verbs shim was not built when ice-fabric was installed (no C "
                       f"compiler or no libibverbs headers); {HEADERS_HINT}, then run "
                       "`icefab agent build-shim` or reinstall")


def build_shim(out: Path | None = None, *, cc: str | None = None) -> Path:
    """Compile the shim into ``out`` (default: the user's cache) and return its path.

    Raises :class:`ShimNotBuilt` with the compiler's message when it cannot be built."""
    out = Path(out) if out is not None else user_build_dir() / LIB_NAME
    cc = cc or os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if not cc:
        raise ShimNotBuilt(f"no C compiler found; {HEADERS_HINT}")
    out.parent.mkdir(parents=True, exist_ok=True)
    cmd = [cc, "-O2", "-Wall", "-fPIC", "-shared", "-o", str(out), str(SOURCE), "-ldl",
           "-lpthread"]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        hint = HEADERS_HINT if "infiniband/verbs.h" in proc.stderr else "see the error above"
        raise ShimNotBuilt(f"{' '.join(cmd)} failed:\n{proc.stderr.strip()[-2000:]}\n{hint}")
    return out
