"""The shim's pure logic called directly (ctypes), checked against the kernel's formulas as
modelled in :mod:`icefabric.dataplane.roce`; and where the built shim is found."""

import ctypes
import os
import subprocess

import numpy as np
import pytest
from typer.testing import CliRunner

from icefabric.agent import shim
from icefabric.cli.app import app
from icefabric.dataplane.roce import (
    flow_label_for_sport,
    flow_label_to_udp_sport,
    rdma_calc_flow_label,
)


@pytest.fixture(scope="module")
def lib(native):
    so = ctypes.CDLL(str(native.shim))
    so.icefab_sport_of_flow_label.restype = ctypes.c_uint16
    so.icefab_sport_of_flow_label.argtypes = [ctypes.c_uint32]
    so.icefab_calc_flow_label.restype = ctypes.c_uint32
    so.icefab_calc_flow_label.argtypes = [ctypes.c_uint32, ctypes.c_uint32]
    so.icefab_flow_label_for_sport.restype = ctypes.c_uint32
    so.icefab_flow_label_for_sport.argtypes = [ctypes.c_int]
    so.icefab_parse_plan.argtypes = [ctypes.c_char_p, ctypes.c_long,
                                     ctypes.POINTER(ctypes.c_int), ctypes.POINTER(ctypes.c_int)]
    so.icefab_gid_to_ipv4.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_size_t]
    return so


def test_every_port_round_trips_through_its_flow_label(lib):
    ports = range(0xC000, 0x10000)
    labels = [lib.icefab_flow_label_for_sport(p) for p in ports]
    assert labels == flow_label_for_sport(np.arange(0xC000, 0x10000)).tolist()
    assert all(fl != 0 for fl in labels)  # 0 would mean "derive from the QPNs"
    assert [lib.icefab_sport_of_flow_label(fl) for fl in labels] == list(ports)
    assert lib.icefab_flow_label_for_sport(0xC000) == 0x4001
    assert lib.icefab_flow_label_for_sport(0xBFFF) == 0  # unreachable: leave the kernel's
    assert lib.icefab_flow_label_for_sport(-1) == 0


def test_kernel_formulas_match_the_model(lib):
    rng = np.random.default_rng(3)
    fl = rng.integers(0, 1 << 20, 2000)
    assert [lib.icefab_sport_of_flow_label(int(x)) for x in fl] == \
        flow_label_to_udp_sport(fl).tolist()
    lq, rq = rng.integers(0, 1 << 24, (2, 2000))
    assert [lib.icefab_calc_flow_label(int(a), int(b)) for a, b in zip(lq, rq)] == \
        rdma_calc_flow_label(lq, rq).tolist()
    assert lib.icefab_calc_flow_label(0x1234, 0x5678) == 0x60002  # domain-facts §4.1


@pytest.mark.parametrize("line, seq, want", [
    (b"PLAN seq=7 sport=49200 srate=15", 7, (1, 49200, 15)),
    (b"PLAN seq=7 sport=-1 srate=0", 7, (1, -1, 0)),
    (b"NONE seq=7", 7, (0, -1, -1)),
    (b"PLAN seq=6 sport=49200 srate=1", 7, (-1, -1, -1)),   # an older request's reply
    (b"PLAN seq=7 sport=70000 srate=1", 7, (-2, -1, -1)),   # not a port
    (b"PLAN seq=7 sport=49200 srate=25", 7, (-2, -1, -1)),  # not an IBV_RATE_*
    (b"PLAN seq=7 sport=49200", 7, (-2, -1, -1)),           # field missing
    (b"PLAN seq=7 sport=4x srate=1", 7, (-2, -1, -1)),      # not a number
    (b"garbage", 7, (-1, -1, -1)),
])
def test_reply_parsing(lib, line, seq, want):
    s, r = ctypes.c_int(-1), ctypes.c_int(-1)
    got = lib.icefab_parse_plan(line, seq, ctypes.byref(s), ctypes.byref(r))
    assert (got, s.value, r.value) == want


def test_rtld_next_lookups_of_a_program_without_verbs_are_unchanged(native):
    """dlvsym(RTLD_NEXT, ...) resolves relative to its caller (glibc); the shim must not
    make it start after the shim for every process that inherits LD_PRELOAD."""
    prog = [str(native.dir / "rtld_next")]
    alone = subprocess.run(prog, capture_output=True, text=True, check=True).stdout
    shimmed = subprocess.run(prog, capture_output=True, text=True, check=True,
                             env={**os.environ, "LD_PRELOAD": str(native.shim)}).stdout
    assert alone == "next=2 default=1\n"  # libwrap's RTLD_NEXT finds libnext's definition
    assert shimmed == alone


def test_only_ipv4_mapped_gids_have_an_address(lib):
    out = ctypes.create_string_buffer(16)
    mapped = bytes(10) + b"\xff\xff" + bytes([10, 1, 2, 3])
    assert lib.icefab_gid_to_ipv4(mapped, out, 16) == 1 and out.value == b"10.1.2.3"
    link_local = b"\xfe\x80" + bytes(14)
    assert lib.icefab_gid_to_ipv4(link_local, out, 16) == 0


def test_shim_path_and_build(native, tmp_path, monkeypatch):
    monkeypatch.setattr(shim, "SOURCE", tmp_path / "src" / "icefab_verbs.c")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    r = CliRunner().invoke(app, ["agent", "shim-path"])
    assert r.exit_code == 1 and "libibverbs" in r.output and "build-shim" in r.output
    monkeypatch.setattr(shim, "SOURCE", native.shim.with_name("nope.c"))
    r = CliRunner().invoke(app, ["agent", "build-shim"])
    assert r.exit_code == 1 and "nope.c" in r.output
    monkeypatch.undo()
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    out = tmp_path / "cache" / "icefabric" / shim.LIB_NAME
    r = CliRunner().invoke(app, ["agent", "build-shim", "--out", str(out)])
    assert r.exit_code == 0 and out.is_file(), r.output


@pytest.mark.skipif(os.environ.get("ICEFAB_REQUIRE_SHIM") != "1",
                    reason="checks the install hook where .ci/run installed the headers first")
def test_the_install_built_the_shim():
    assert shim.shim_path().is_file()
