"""Device catalog: server and switch profiles with the sources behind their numbers.

Values marked [UNCONFIRMED] in ../shared/reference/domain-facts.md are defaults, not facts;
every field can be overridden in a scenario file.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from icefabric.units import gbps


@dataclass(frozen=True)
class ServerProfile:
    """An accelerator server as the fabric sees it.

    Attributes
    ----------
    n_accel : int — accelerators (GPUs/NPUs) per server.
    n_nics : int — scale-out RDMA NICs/ports; accelerator ``i`` owns NICs
        ``i * n_nics // n_accel`` up to (not including) ``(i + 1) * n_nics // n_accel``, at
        least one (:meth:`nics_of_accel`): 8 NICs for 8 GPUs, one each; 16 ports, two each.
    nic_bps : float — line rate of each scale-out NIC in bits/s.
    intra_bps : float — per-accelerator, per-direction bandwidth into the server's scale-up
        fabric (NVLink/NVSwitch, HCCS, Infinity Fabric), modelled as a non-blocking hub.
    pcie_bps : float — accelerator <-> NIC bandwidth per direction (PCIe or on-package).
    library : str — the collective library the vendor's stack uses (nccl, hccl, rccl).
    cuda_sm : int or None — CUDA compute capability x 10 of NVIDIA accelerators (NCCL's
        topology search depends on it, :mod:`icefabric.ccl.nccl_defaults`); None otherwise.
    """

    name: str
    vendor: str
    accelerator: str
    n_accel: int
    n_nics: int
    nic_bps: float
    intra_bps: float
    pcie_bps: float
    library: str
    intra_delay_ns: int = 500
    nic_vendor: str = ""
    source: str = ""
    cuda_sm: int | None = None

    def nic_of_accel(self, i: int) -> int:
        """The first (or only) NIC of accelerator ``i``."""
        return i * self.n_nics // self.n_accel

    def nics_of_accel(self, i: int) -> range:
        """Every NIC accelerator ``i`` owns (sits next to on PCIe)."""
        first = self.nic_of_accel(i)
        return range(first, max(first + 1, (i + 1) * self.n_nics // self.n_accel))


@dataclass(frozen=True)
class SwitchProfile:
    """A fabric switch: radix, port speed, packet buffer and ECMP hash defaults."""

    name: str
    asic: str
    radix: int
    port_bps: float
    buffer_bytes: int
    hash_algorithm: str = "crc16_ccitt"
    forwarding_delay_ns: int = 0
    source: str = ""


SERVERS: dict[str, ServerProfile] = {
    p.name: p
    for p in (
        ServerProfile(
            name="hgx-h100", vendor="NVIDIA", accelerator="H100 SXM", n_accel=8, n_nics=8,
            nic_bps=gbps(400), intra_bps=gbps(3600), pcie_bps=gbps(512), library="nccl",
            nic_vendor="ConnectX-7", cuda_sm=90,
            source="NVIDIA HGX H100 '2-8-9-400' reference architecture: 8 GPUs on NVLink4/"
            "NVSwitch (900 GB/s bidirectional per GPU = 3.6 Tb/s per direction), 8 x 400G "
            "ConnectX-7, one NIC per GPU on PCIe Gen5 x16 (~64 GB/s per direction); "
            "domain-facts §8.1"),
        ServerProfile(
            name="bm-gpu-h100-8", vendor="NVIDIA", accelerator="H100 SXM", n_accel=8,
            n_nics=16, nic_bps=gbps(200), intra_bps=gbps(3600), pcie_bps=gbps(512),
            library="nccl", nic_vendor="ConnectX-7 (2 x 200G ports per GPU)", cuda_sm=90,
            source="OCI BM.GPU.H100.8: 8 H100 SXM on NVLink4/NVSwitch as hgx-h100, RoCEv2 "
            "cluster network of 16 x 200 Gb/s RDMA ports (3.2 Tb/s), two per GPU (OCI compute "
            "shapes documentation; the nccl-tests run of reference log ncclt-oci-h100-roce "
            "lists 16 HCAs in NCCL_IB_HCA on each of its 2 hosts)"),
        ServerProfile(
            name="atlas-800t-a2", vendor="Huawei", accelerator="Ascend 910B", n_accel=8,
            n_nics=8, nic_bps=gbps(200), intra_bps=gbps(1568), pcie_bps=gbps(400),
            library="hccl", nic_vendor="Ascend integrated RoCE",
            source="Atlas 800T A2: 8 NPUs, 8 NPU-integrated RoCE ports in one subnet, HCCS "
            "full mesh inside (domain-facts §7.3); port speed 200GE and HCCS 7 x 28 GB/s per "
            "direction are [UNCONFIRMED] defaults; HCCS mesh modelled as a non-blocking hub"),
        ServerProfile(
            name="mi300x", vendor="AMD", accelerator="MI300X OAM", n_accel=8, n_nics=8,
            nic_bps=gbps(400), intra_bps=gbps(3584), pcie_bps=gbps(512), library="rccl",
            nic_vendor="Pensando Pollara 400 / ConnectX-7",
            source="AMD MI300X platform: 8 GPUs on Infinity Fabric (7 x 64 GB/s per direction "
            "full mesh, modelled as a hub), 8 RDMA NICs at 400G, 1:1 (domain-facts §8.1)"),
        ServerProfile(
            name="hgx-a100", vendor="NVIDIA", accelerator="A100 SXM", n_accel=8, n_nics=8,
            nic_bps=gbps(200), intra_bps=gbps(2400), pcie_bps=gbps(256), library="nccl",
            nic_vendor="ConnectX-6", cuda_sm=80,
            source="NVIDIA DGX A100: NVLink3 600 GB/s bidirectional per GPU, 8 x 200G "
            "ConnectX-6 on PCIe Gen4 x16"),
    )
}

SWITCHES: dict[str, SwitchProfile] = {
    p.name: p
    for p in (
        SwitchProfile(
            name="tomahawk4-64x400", asic="Broadcom Tomahawk 4 (BCM56990)", radix=64,
            port_bps=gbps(400), buffer_bytes=113 * 2**20, hash_algorithm="crc16_ccitt",
            source="25.6 Tb/s, 64x400G; ~113 MB shared buffer [UNCONFIRMED]; RTAG7 CRC16-CCITT "
            "as configured by FBOSS (domain-facts §2.5, §3.2)"),
        SwitchProfile(
            name="tomahawk5-128x400", asic="Broadcom Tomahawk 5 (BCM78900)", radix=128,
            port_bps=gbps(400), buffer_bytes=165 * 2**20, hash_algorithm="crc16_ccitt",
            source="51.2 Tb/s, 128x400G; ~165 MB on-chip buffer [UNCONFIRMED]"),
        SwitchProfile(
            name="tomahawk5-256x200", asic="Broadcom Tomahawk 5 (BCM78900)", radix=256,
            port_bps=gbps(200), buffer_bytes=165 * 2**20, hash_algorithm="crc16_ccitt",
            source="51.2 Tb/s as 256x200G (domain-facts §2.5 table: 64x800G / 128x400G / "
            "256x200G); ~165 MB on-chip buffer [UNCONFIRMED]"),
        SwitchProfile(
            name="spectrum4-128x400", asic="NVIDIA Spectrum-4", radix=128, port_bps=gbps(400),
            buffer_bytes=160 * 2**20, hash_algorithm="crc16_ccitt",
            source="51.2 Tb/s, 128x400G; ~160 MB shared buffer [UNCONFIRMED]; Cumulus "
            "crc16-ccitt with a random per-switch seed"),
        SwitchProfile(
            name="trident4-64x200", asic="Broadcom Trident 4", radix=64, port_bps=gbps(200),
            buffer_bytes=132 * 2**20, hash_algorithm="crc16_bisync",
            source="12.8 Tb/s; buffer [UNCONFIRMED]; Dell OS9-style crc16 (BISYNC) default"),
    )
}


@dataclass(frozen=True)
class AcceleratorProfile:
    """An accelerator's compute and memory, for training-time models.

    Attributes
    ----------
    peak_flops : float — dense 16-bit (BF16/FP16) tensor throughput in FLOP/s (no sparsity).
    hbm_bytes_per_s : float — peak HBM bandwidth in bytes per second.
    hbm_bytes : int — HBM capacity in bytes.
    """

    name: str
    vendor: str
    peak_flops: float
    hbm_bytes_per_s: float
    hbm_bytes: int
    source: str = ""


ACCELERATORS: dict[str, AcceleratorProfile] = {
    a.name: a
    for a in (
        AcceleratorProfile(
            name="H100 SXM", vendor="NVIDIA", peak_flops=989.4e12, hbm_bytes_per_s=3.35e12,
            hbm_bytes=80 * 10**9,
            source="NVIDIA H100 Tensor Core GPU datasheet (SXM): BF16 Tensor Core 1,979 "
            "TFLOPS with sparsity, half without (989.4 dense), GPU memory 80 GB HBM3 at "
            "3.35 TB/s"),
        AcceleratorProfile(
            name="A100 SXM", vendor="NVIDIA", peak_flops=312e12, hbm_bytes_per_s=2.039e12,
            hbm_bytes=80 * 10**9,
            source="NVIDIA A100 Tensor Core GPU datasheet (80GB SXM): BF16/FP16 Tensor Core "
            "312 TFLOPS dense (624 with sparsity), 80 GB HBM2e at 2,039 GB/s"),
        AcceleratorProfile(
            name="MI300X OAM", vendor="AMD", peak_flops=1307.4e12, hbm_bytes_per_s=5.3e12,
            hbm_bytes=192 * 10**9,
            source="AMD Instinct MI300X datasheet: peak BF16 1,307.4 TFLOPS dense (2,614.9 "
            "with sparsity), 192 GB HBM3 at 5.3 TB/s"),
        AcceleratorProfile(
            name="Ascend 910B", vendor="Huawei", peak_flops=320e12, hbm_bytes_per_s=1.6e12,
            hbm_bytes=64 * 10**9,
            source="[UNCONFIRMED] Huawei publishes 256 TFLOPS FP16 for the Ascend 910 (2019); "
            "second-hand figures for the 910B range 256-376 TFLOPS FP16 with 64 GB HBM2e at "
            "about 1.6 TB/s; 320 TFLOPS and 1.6 TB/s are configurable defaults"),
    )
}


def accelerator_profile(name: str) -> AcceleratorProfile:
    try:
        return ACCELERATORS[name]
    except KeyError:
        raise ValueError(f"no compute figures for accelerator {name!r}; known: "
                         f"{sorted(ACCELERATORS)}") from None


def server_profile(name: str, **overrides) -> ServerProfile:
    try:
        base = SERVERS[name]
    except KeyError:
        raise ValueError(f"unknown server profile {name!r}; known: {sorted(SERVERS)}") from None
    return replace(base, **overrides) if overrides else base


def switch_profile(name: str, **overrides) -> SwitchProfile:
    try:
        base = SWITCHES[name]
    except KeyError:
        raise ValueError(f"unknown switch profile {name!r}; known: {sorted(SWITCHES)}") from None
    return replace(base, **overrides) if overrides else base
