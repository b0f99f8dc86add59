"""The verbs shim's test kit: the shim built from source, a stand-in libibverbs/libmlx5 that
records what reaches the symbol boundary, and a small CCL program (tests/agent/native/).

Without a C compiler or libibverbs headers the shim's tests are skipped, unless
ICEFAB_REQUIRE_SHIM=1 (set by .ci/run), where they fail instead.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from icefabric.agent.shim import ShimNotBuilt, build_shim

NATIVE = Path(__file__).with_name("native")
IBV_QP_RATE_LIMIT = 1 << 25
IBV_QPS_RTR, IBV_QPS_RTS = 2, 3


@dataclass
class NativeKit:
    dir: Path
    shim: Path

    def env(self, log: Path, ip: str, *, real_verbs: bool = False, **extra: str
            ) -> dict[str, str]:
        """The environment of a CCL program: the stand-in libibverbs, or with ``real_verbs``
        the installed one with only the kernel faked (``native/fakekernel.c``)."""
        launcher = ("LD_LIBRARY_PATH", "RANK", "OMPI_COMM_WORLD_RANK", "SLURM_PROCID", "PMI_RANK")
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("ICE_", "FAKE")) and k not in launcher}
        env.update(FAKEVERBS_LOG=str(log), FAKEVERBS_IP=ip, LD_PRELOAD=str(self.shim),
                   ICE_SHIM_MLX5_LIB=str(self.dir / "libmlx5.so.1"))
        if real_verbs:
            env["LD_PRELOAD"] += f" {self.dir / 'libfakekernel.so'}"
        else:
            env["LD_LIBRARY_PATH"] = str(self.dir)
        env.update(extra)
        return env

    def run(self, program: str, n_qps: int, peer: str, env: dict, *, threads: int = 1,
            rqpn_base: int = 0x500, hold_ms: int = 0, hold_file: Path | None = None,
            timeout_s: float = 30) -> subprocess.Popen:
        args = [str(self.dir / program), str(n_qps), peer, hex(rqpn_base), str(threads),
                str(hold_ms), *([str(hold_file)] if hold_file else [])]
        return subprocess.Popen(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True)


def records(log: Path) -> list[dict]:
    """The stand-in's recorded calls, in order."""
    if not log.exists():
        return []
    return [json.loads(x) for x in log.read_text().splitlines() if x.strip()]


def rtr_labels(log: Path, field: str = "flow_label") -> dict[int, int]:
    """Flow label (or another recorded ``field``) each QP got at INIT->RTR (successful
    calls)."""
    return {r["qpn"]: r[field] for r in records(log)
            if r["call"] == "modify_qp" and r["state"] == IBV_QPS_RTR and r["rc"] == 0}


def wait_for(cond, timeout_s: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(0.01)
    return False


@pytest.fixture
def agent_sock():
    """A short socket path (Unix socket paths are limited to 108 bytes)."""
    d = Path(tempfile.mkdtemp(prefix="ice"))
    yield d / "v.sock"
    shutil.rmtree(d, ignore_errors=True)


def _cc(*args: str) -> None:
    cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if not cc:
        raise ShimNotBuilt("no C compiler")
    proc = subprocess.run([cc, "-O2", "-Wall", *args], capture_output=True, text=True)
    if proc.returncode != 0:
        raise ShimNotBuilt(proc.stderr[-2000:])


def build_kit(d: Path) -> NativeKit:
    """Compile the shim, the stand-ins and the CCL program into ``d`` (also used by
    benchmarks/bench_shim_delay.py). Raises :class:`ShimNotBuilt`."""
    shim = build_shim(d / "libicefab_verbs.so")
    _cc("-fPIC", "-shared", "-Wl,-soname,libibverbs.so.1",
        f"-Wl,--version-script={NATIVE / 'fakeverbs.map'}", "-o", str(d / "libibverbs.so.1"),
        str(NATIVE / "fakeverbs.c"))
    _cc("-fPIC", "-shared", "-Wl,-soname,libmlx5.so.1",
        f"-Wl,--version-script={NATIVE / 'fakemlx5.map'}", "-o", str(d / "libmlx5.so.1"),
        str(NATIVE / "fakemlx5.c"))
    _cc("-DCCL_LINKED", "-o", str(d / "ccl_linked"), str(NATIVE / "ccl_sim.c"),
        str(d / "libibverbs.so.1"), f"-Wl,-rpath,{d}", "-lpthread")
    _cc("-o", str(d / "ccl_dlopen"), str(NATIVE / "ccl_sim.c"), "-ldl", "-lpthread")
    _cc("-o", str(d / "ccl_replay"), str(NATIVE / "ccl_replay.c"), "-ldl")
    # The installed libibverbs (libibverbs-dev) over a faked kernel.
    _cc("-fPIC", "-shared", "-o", str(d / "libfakekernel.so"), str(NATIVE / "fakekernel.c"),
        "-libverbs", "-ldl", "-lpthread")
    _cc("-DCCL_REALVERBS", "-o", str(d / "ccl_real"), str(NATIVE / "ccl_sim.c"), "-ldl",
        "-lpthread")
    for lib in ("next", "wrap"):
        _cc(f"-DLIB_{lib.upper()}", "-fPIC", "-shared", f"-Wl,-soname,lib{lib}.so",
            f"-Wl,--version-script={NATIVE / 'rtld_next.map'}", "-o", str(d / f"lib{lib}.so"),
            str(NATIVE / "rtld_next.c"), "-ldl")
    _cc("-o", str(d / "rtld_next"), str(NATIVE / "rtld_next.c"), "-Wl,--no-as-needed",
        str(d / "libwrap.so"), str(d / "libnext.so"), f"-Wl,-rpath,{d}", "-ldl")
    return NativeKit(d, shim)


@pytest.fixture(scope="session")
def native(tmp_path_factory) -> NativeKit:
    try:
        return build_kit(tmp_path_factory.mktemp("native"))
    except ShimNotBuilt as e:
        if os.environ.get("ICEFAB_REQUIRE_SHIM") == "1":
            pytest.fail(f"ICEFAB_REQUIRE_SHIM=1 but the shim kit does not build: {e}")
        pytest.skip(f"no C compiler or libibverbs headers: {e}")


def two_server_ring(name: str, channels: int, qps_per_connection: int) -> str:
    """A scenario of 2 H100 servers, one GPU each, under their own leaves, running one
    ring AllReduce: NCCL runs every channel through that GPU's NIC, so the NIC pair under
    test carries ``channels x qps_per_connection`` QPs each way."""
    return f"""
name: {name}
seed: 3
fabric: {{kind: leaf-spine, servers_per_leaf: 1, spines: 4, links_per_spine: 1, oversub: 1.0}}
pools: [{{name: h100, server: hgx-h100, count: 2}}]
jobs:
  - {{name: train1, pools: [h100], ranks_per_server: 1, channels: {channels},
     qps_per_connection: {qps_per_connection}, collectives: [{{kind: all_reduce}}]}}
sizes: {{min: 1MiB, max: 1MiB, factor: 2}}
"""
